//! A test world: a temp dir with a state dir, a policy allowing the namespace and process
//! tiers without network, and an empty config.

#![allow(dead_code)] // each test module uses a subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

const POLICY: &str = r#"[settings]
name = "stream-tests"
description = "allows exec and run_code in the namespace and process tiers without network"

[[rule]]
id = "run-sandboxed"
effect = "allow"
kind = ["exec", "run_code"]
tier = ["namespace", "process"]
network = "none"
reason = "tests run commands in the namespace or process tier"
"#;

pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new(tag: &str) -> World {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sbx-stream-{tag}-"))
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        World { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// `sandboxio run --state-dir .. --policy .. --config .. [extra..] -- argv..`, stdin
    /// from /dev/null unless the test sets it.
    pub fn run(&self, extra: &[&str], argv: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--state-dir")
            .arg(self.state())
            .arg("--policy")
            .arg(self.path().join("policy.toml"))
            .arg("--config")
            .arg(self.path().join("config.toml"))
            .args(extra)
            .arg("--")
            .args(argv)
            .env_remove("SBX_STATE_DIR")
            .stdin(Stdio::null());
        c
    }
}

/// Bytes that are not UTF-8 and hold every byte value, NUL included (xorshift, fixed seed).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v: Vec<u8> = (0..=255u8).collect();
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push((x >> 24) as u8);
    }
    v.truncate(n.max(256));
    v
}
