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

/// Whether this test runs as root (the effective uid in /proc/self/status is 0).
pub fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

/// The unprivileged user the suites also run as when they are root (`nobody`).
pub const NOBODY: u32 = 65534;

/// Who runs `sandboxio` in a test: this test's own user, and when that is root also uid
/// and gid 65534 through `setpriv` (as CI runs the escape suite). `Some(uid)` is the
/// command-line prefix's user; prints why 65534 is skipped.
pub fn runners() -> Vec<Option<u32>> {
    let mut v = vec![None];
    if !root() {
        return v;
    }
    if !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIP as uid {NOBODY}: no /usr/bin/setpriv");
        return v;
    }
    v.push(Some(NOBODY));
    v
}

impl World {
    /// Hands the world (its directory and files) to `uid`, so that user's `sandboxio`
    /// can read the policy and config and create the state directory.
    pub fn hand_over(&self, uid: u32) {
        for e in std::fs::read_dir(self.path()).unwrap().flatten() {
            std::os::unix::fs::chown(e.path(), Some(uid), Some(uid)).unwrap();
        }
        std::os::unix::fs::chown(self.path(), Some(uid), Some(uid)).unwrap();
    }

    /// The command line that runs `sandboxio` as `uid` (`setpriv`, no supplementary
    /// groups, HOME in the world), or nothing for this test's own user.
    pub fn as_user(&self, uid: Option<u32>) -> Vec<String> {
        match uid {
            None => Vec::new(),
            Some(u) => vec![
                "/usr/bin/env".into(),
                format!("HOME={}", self.path().display()),
                "/usr/bin/setpriv".into(),
                format!("--reuid={u}"),
                format!("--regid={u}"),
                "--clear-groups".into(),
            ],
        }
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
