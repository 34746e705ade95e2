//! Shared helpers for the integration suite.

mod cgroups;
mod drain;
mod landlock;
mod process;
mod release;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandboxio_core::{ExecRequest, ExecResult, IsolationTier};
use sandboxio_sandbox::{cgroup, run, CancelToken, CgroupUsage, SandboxConfig, SandboxError};

pub fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandboxio-helper"))
}

pub fn cfg(cgroups: CgroupUsage) -> SandboxConfig {
    SandboxConfig {
        helper_path: Some(helper()),
        cgroups,
        ..SandboxConfig::default()
    }
}

pub fn sh(script: &str) -> ExecRequest {
    ExecRequest::new(["sh", "-c", script])
}

pub async fn run_process(
    req: &ExecRequest,
    cgroups: CgroupUsage,
    cancel: Option<CancelToken>,
) -> Result<ExecResult, SandboxError> {
    let r = run(req, IsolationTier::Process, &cfg(cgroups), cancel).await;
    if let Ok(res) = &r {
        assert_no_cgroup_left(&res.sandbox_id);
    }
    r
}

/// Alive and not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            let state = rest.split_whitespace().next().unwrap();
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

pub fn wait_dead(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !alive(pid)
}

/// Read a pid a sandboxed program wrote, waiting briefly for it to appear.
pub fn read_pid(path: &std::path::Path, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(p) = s.trim().parse() {
                return p;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no pid file at {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn assert_no_cgroup_left(sandbox_id: &str) {
    for base in cgroup::base_dirs(cgroup::host_layout()) {
        let dir = base.join(sandbox_id);
        assert!(!dir.exists(), "cgroup left behind: {}", dir.display());
    }
}

/// Whether this host lets the tests create cgroups with memory and pids limits.
pub fn cgroups_usable() -> bool {
    let r = sandboxio_sandbox::probe().cgroups;
    if !r.check.available {
        eprintln!("SKIP: cgroups not usable here: {}", r.check.detail);
    }
    r.check.available
}
