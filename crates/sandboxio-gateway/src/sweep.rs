//! What crashed processes leave on the host (empty sandbox cgroups, workspaces and staging
//! directories whose owner is gone) is swept once per process, starting when its first
//! sandbox starts: a process that never starts one (a denied run, `status`, `approvals`)
//! pays nothing for it, and every process that does start one sweeps, on the blocking
//! pool beside its sandbox's set-up (the sweep never touches a live owner's directory or a
//! cgroup younger than its age, so it cannot race with the sandbox it runs beside). The
//! runtime's shutdown waits for it, so the leftovers of a killed run are gone when the next
//! run that started a sandbox has ended.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The once-per-process sweep of a gateway (see the module docs).
#[derive(Debug)]
pub struct StartSweep {
    /// `None`: this gateway sweeps nothing (embedders that sweep on their own).
    settings: Option<Settings>,
    started: std::sync::Once,
}

#[derive(Debug, Clone)]
struct Settings {
    work_root: Option<PathBuf>,
    /// Directories without an owner in their name (older versions) go after this age.
    legacy_age: Duration,
}

impl Default for StartSweep {
    /// Sweeps nothing.
    fn default() -> StartSweep {
        StartSweep {
            settings: None,
            started: std::sync::Once::new(),
        }
    }
}

impl StartSweep {
    /// Sweeps the default work roots and `work_root`; unowned directories older than
    /// `legacy_age` go too.
    pub fn new(work_root: Option<PathBuf>, legacy_age: Duration) -> StartSweep {
        StartSweep {
            settings: Some(Settings {
                work_root,
                legacy_age,
            }),
            started: std::sync::Once::new(),
        }
    }

    /// Starts the sweep on the blocking pool, unless this process already did; does not
    /// wait for it (the runtime's shutdown does).
    pub fn start_once(self: &Arc<Self>) {
        let Some(settings) = self.settings.clone() else {
            return;
        };
        self.started.call_once(|| {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(tokio::task::spawn_blocking(move || sweep(&settings)));
            } else {
                sweep(&settings);
            }
        });
    }
}

fn sweep(s: &Settings) {
    // Cgroups a SIGKILLed process could not remove (empty and older than STALE_AGE).
    let stale = sandboxio_sandbox::cgroup::cleanup_stale();
    if !stale.is_empty() {
        tracing::info!(count = stale.len(), "removed stale sandbox cgroups");
    }
    let cfg = sandboxio_sandbox::SandboxConfig {
        work_root: s.work_root.clone(),
        ..Default::default()
    };
    let removed = sandboxio_sandbox::sweep::sweep_for(&cfg, s.legacy_age);
    if !removed.is_empty() {
        tracing::info!(
            count = removed.len(),
            "removed workspaces of runs whose process is gone"
        );
    }
}
