//! What crashed processes leave on the host (empty sandbox cgroups, workspaces and staging
//! directories whose owner is gone) is swept once per process, right before its first
//! sandbox starts: a process that never starts one (a denied run, `status`, `approvals`)
//! pays nothing for it, and every process that does start one still sweeps first, so the
//! leftovers of a killed run are gone by the time the next run's sandbox exists.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The once-per-process sweep of a gateway (see the module docs).
#[derive(Debug, Default)]
pub struct StartSweep {
    /// `None`: this gateway sweeps nothing (embedders that sweep on their own).
    settings: Option<Settings>,
    done: tokio::sync::OnceCell<()>,
}

#[derive(Debug, Clone)]
struct Settings {
    work_root: Option<PathBuf>,
    /// Directories without an owner in their name (older versions) go after this age.
    legacy_age: Duration,
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
            done: tokio::sync::OnceCell::new(),
        }
    }

    /// Sweeps now, off the async workers, unless this process already did. Concurrent
    /// callers wait for the one sweep.
    pub async fn run_once(self: &Arc<Self>) {
        let Some(settings) = self.settings.clone() else {
            return;
        };
        self.done
            .get_or_init(|| async move {
                let swept = tokio::task::spawn_blocking(move || sweep(&settings)).await;
                if let Err(e) = swept {
                    tracing::warn!(error = %e, "sweeping the leftovers of crashed runs failed");
                }
            })
            .await;
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
