//! A test world: a temp dir with a state dir, a policy allowing the process tier, a config,
//! and a way to run the real binary with a clean telemetry environment.

#![allow(dead_code)] // each test module uses a subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

/// Allows exec and run_code in the process tier only: any other tier is denied with
/// "no policy rule allows `exec` of `<argv[0]>`", which quotes the command.
pub const POLICY: &str = r#"[settings]
name = "observability-tests"
description = "allows exec and run_code in the process tier without network"

[[rule]]
id = "run-in-process"
effect = "allow"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "tests run commands in the process tier"
"#;

pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new(tag: &str, config: &str) -> World {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sbx-obs-{tag}-"))
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        World { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    pub fn audit_file(&self) -> PathBuf {
        self.state().join("audit.jsonl")
    }

    /// `sandboxio <sub> --state-dir .. --policy .. --config ..`, with no inherited
    /// `OTEL_*`, `SBX_*`, `RUST_LOG` or `TRACEPARENT` variables.
    pub fn cmd(&self, sub: &str) -> Command {
        self.cmd_words(&[sub])
    }

    /// Like [`World::cmd`] for a nested subcommand (`["audit", "query"]`).
    pub fn cmd_words(&self, sub: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("OTEL_")
                || k.starts_with("SBX_")
                || k == "RUST_LOG"
                || k == "TRACEPARENT"
            {
                c.env_remove(k);
            }
        }
        c.args(sub)
            .arg("--state-dir")
            .arg(self.state())
            .arg("--policy")
            .arg(self.path().join("policy.toml"))
            .arg("--config")
            .arg(self.path().join("config.toml"))
            .current_dir(self.path())
            .stdin(Stdio::null());
        c
    }
}

/// Runs a command to completion (bounded by the binary's own sandbox timeout).
pub fn output(mut c: Command) -> Output {
    c.output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON log lines in a stderr capture (other lines are the program's own stderr or
/// the CLI's human messages).
pub fn log_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A random hex string.
pub fn hex(n: usize) -> String {
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    (0..n)
        .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap())
        .collect()
}
