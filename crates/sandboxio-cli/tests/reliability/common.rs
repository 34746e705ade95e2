//! Shared helpers: a temporary environment (state dir, policy, config), process and cgroup
//! scans from outside, and readers for the store and the audit trail.

#![allow(dead_code)] // each test module uses a subset

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandboxio_gateway::store::{LiveCounts, SqliteStore, Store, SyncMode};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

/// The default policy with its `run-in-namespace` rule switched to a given tier.
pub fn policy_for(tier: &str) -> String {
    format!(
        r#"[settings]
name = "reliability-tests"
description = "allows exec and run_code in the {tier} tier without network"

[[rule]]
id = "run-in-{tier}"
effect = "allow"
kind = ["exec", "run_code"]
tier = "{tier}"
network = "none"
reason = "tests run commands in the {tier} tier"
"#
    )
}

/// Replaces `env`'s policy with one that asks a person for every exec and run_code in the
/// process tier.
pub fn ask_policy(env: &Env) {
    std::fs::write(
        env.path().join("policy.toml"),
        r#"[settings]
name = "ask-tests"
description = "every exec in the process tier needs a person"

[[rule]]
id = "ask-process"
effect = "ask"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "a person approves each run in these tests"
"#,
    )
    .unwrap();
}

/// One test's world: a temp dir holding the state dir, a policy and a config.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// A unique string that appears in every payload's argv (for /proc scans).
    pub marker: String,
    pub tier: String,
}

impl Env {
    pub fn new(tag: &str, tier: &str) -> Env {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sbx-rel-{tag}-"))
            .tempdir()
            .unwrap();
        let marker = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::write(dir.path().join("policy.toml"), policy_for(tier)).unwrap();
        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        Env {
            dir,
            marker,
            tier: tier.to_string(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    pub fn write_config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `sandboxio <sub> --state-dir .. --policy .. --config ..` (config may be overridden).
    pub fn cmd(&self, sub: &str, config: Option<&Path>) -> Command {
        let mut c = Command::new(BIN);
        c.arg(sub)
            .arg("--state-dir")
            .arg(self.state())
            .arg("--policy")
            .arg(self.path().join("policy.toml"))
            .arg("--config")
            .arg(config.map_or_else(|| self.path().join("config.toml"), Path::to_path_buf))
            .env_remove("SBX_STATE_DIR")
            .stdin(Stdio::null());
        c
    }

    /// `sandboxio run --tier <tier> [extra..] -- argv..`
    pub fn run_cmd(&self, config: Option<&Path>, extra: &[&str], argv: &[&str]) -> Command {
        let mut c = self.cmd("run", config);
        c.arg("--tier")
            .arg(&self.tier)
            .args(extra)
            .arg("--")
            .args(argv);
        c
    }

    pub fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.state().join("state.db"), SyncMode::Full).unwrap()
    }

    pub fn live_counts(&self) -> LiveCounts {
        self.store().live_counts().unwrap()
    }

    pub fn audit_files(&self, base: &Path) -> Vec<PathBuf> {
        sandboxio_audit::trail_files(base).unwrap()
    }
}

/// Pids (other than ours) whose cmdline contains `marker`.
pub fn procs_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // Zombies have an empty cmdline; they are not running anything.
        if String::from_utf8_lossy(&cmd).contains(marker) {
            out.push(pid);
        }
    }
    out
}

/// Waits up to `within` for no process to carry `marker`; returns the survivors.
pub fn wait_no_procs(marker: &str, within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left = procs_with(marker);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Describes and then stops leftover processes, by pid only.
pub fn describe_and_stop(pids: &[u32]) -> String {
    let mut s = String::new();
    for pid in pids {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        s.push_str(&format!("\n  pid {pid}: {cmd} [{}]", stat.trim()));
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    }
    s
}

/// Every directory under a `sandboxio` cgroup parent, on v1 and v2 hierarchies.
pub fn cgroup_dirs() -> BTreeSet<PathBuf> {
    let mut parents = vec![
        PathBuf::from("/sys/fs/cgroup/sandboxio"),
        PathBuf::from("/sys/fs/cgroup/unified/sandboxio"),
    ];
    if let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") {
        for e in rd.flatten() {
            parents.push(e.path().join("sandboxio"));
        }
    }
    let mut out = BTreeSet::new();
    for p in parents {
        if let Ok(rd) = std::fs::read_dir(&p) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    out.insert(e.path());
                }
            }
        }
    }
    out
}

/// Cgroup dirs present now that were not in `before`, after waiting up to `within`.
pub fn new_cgroups(before: &BTreeSet<PathBuf>, within: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + within;
    loop {
        let now: Vec<PathBuf> = cgroup_dirs().difference(before).cloned().collect();
        if now.is_empty() || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends a signal with the `kill` command (tests forbid `unsafe`, so no libc::kill).
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid} failed");
}

/// Waits for a file to contain `needle` (used to know a payload is running).
pub fn wait_file_contains(p: &Path, needle: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if std::fs::read_to_string(p).is_ok_and(|s| s.contains(needle)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}
