//! Warm pool: pre-started, single-use sandboxes, so an exec pays little more than the
//! payload's own fork+exec.
//!
//! A pooled sandbox is a helper that is already running (spawned, exec'd, its Rust runtime
//! up, its pipes checked, `PR_SET_PDEATHSIG` set) and blocked reading its plan, plus its
//! workspace (`tmp/`, `input/`, `output/`) and its cgroup directories, already created.
//! At exec, the request's limits are written into the cgroup, the plan goes into the
//! helper's plan pipe, and the run continues exactly as a cold [`crate::run`] (same helper
//! code, same payload setup order, same kill, metering and cleanup). Each pooled sandbox
//! serves one exec and is then destroyed like any run; nothing is reused.
//!
//! The library owns no hidden task: [`WarmPool::new`] returns the pool and its refiller
//! future; the caller spawns the refiller on its own runtime (on a worker thread that lives
//! as long as the pool: the helpers' `PR_SET_PDEATHSIG` follows the spawning thread).
//! Dropping the [`WarmPool`] stops the refiller and destroys every sandbox still waiting.
//!
//! Cgroups: the waiting helper joins its sandbox's cgroups at fill time (every directory
//! except the kill cgroup, i.e. the v1 memory/pids/cpu/cpuacct ones on a hybrid host), with
//! no limits while it waits; the request's limits are written at exec, before the plan is
//! sent. The payload (or the namespace init) inherits those cgroups at fork and is cloned
//! straight into the cgroup2 kill leaf (`clone3` + `CLONE_INTO_CGROUP`), so a pooled exec
//! does no `cgroup.procs` write (the migration costs an RCU grace period, several ms). The
//! price: the helper's own memory allocated after it joined (small: the plan and its
//! supervision loop) and CPU time count in the sandbox's memory and CPU figures, and
//! `pids.max` is raised by one for the helper's own pid. The helper is never in the kill
//! cgroup, so `cgroup.kill` (or the freezer) still takes the whole payload tree and nothing
//! else; the cgroups are removed after the helper has exited, as for a cold run.
//!
//! Namespace tier: the pool pre-starts the helper, workspace and cgroup; namespaces and
//! mounts are still set up at exec (inside `ns::spawn_plan`), because their plan depends on
//! the request (inputs, output, network, env).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sandboxio_core::{ErrorCode, ExecRequest, ExecResult, IsolationTier, Limits};
use tokio::sync::Notify;

use crate::cgroup::{self, CgroupPlan};
use crate::config::{CgroupUsage, SandboxConfig};
use crate::error::SandboxError;
use crate::exec::{self, spawn_helper, CancelToken, Prepared, Workspace};
use crate::plan;

/// Wait after a failed pre-start before trying again (the exec path falls back to a cold
/// start meanwhile, which reports the real error).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// A pool of pre-started, single-use sandboxes for one tier and one [`SandboxConfig`].
pub struct WarmPool {
    shared: Arc<Shared>,
    wake: Arc<Wake>,
}

/// How the pool talks to its refiller: "take happened" and "pool dropped".
struct Wake {
    notify: Notify,
    closed: AtomicBool,
}

struct Shared {
    cfg: SandboxConfig,
    tier: IsolationTier,
    size: usize,
    ready: Mutex<VecDeque<Prepared>>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("tier", &self.shared.tier)
            .field("size", &self.shared.size)
            .field("ready", &self.ready())
            .finish()
    }
}

impl WarmPool {
    /// A pool keeping up to `size` sandboxes of `tier` ready, and the future that fills it.
    /// Spawn the future on your runtime (`tokio::spawn(refiller)`); it ends when the pool is
    /// dropped. Until it has run, [`WarmPool::exec`] starts sandboxes cold.
    pub fn new(
        cfg: SandboxConfig,
        tier: IsolationTier,
        size: usize,
    ) -> Result<(WarmPool, impl Future<Output = ()> + Send + 'static), SandboxError> {
        exec::check_tier(tier)?;
        // Fail early on a missing helper rather than in the background.
        cfg.resolve_helper()?;
        let shared = Arc::new(Shared {
            cfg,
            tier,
            size,
            ready: Mutex::new(VecDeque::with_capacity(size)),
        });
        let wake = Arc::new(Wake {
            notify: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let refiller = refill(Arc::downgrade(&shared), wake.clone());
        Ok((WarmPool { shared, wake }, refiller))
    }

    /// Sandboxes ready right now.
    pub fn ready(&self) -> usize {
        self.shared.ready.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// The configured pool size.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// Run `req` in a pre-started sandbox (or a cold one when none is ready). Same contract
    /// as [`crate::run`]: `Err` only when the sandbox could not do its job; dropping the
    /// future kills the whole tree.
    pub async fn exec(
        &self,
        req: &ExecRequest,
        cancel: Option<CancelToken>,
    ) -> Result<ExecResult, SandboxError> {
        // A pooled helper's stdio is pipes: a terminal request starts cold. A request with
        // network needs the egress proxy, which only the gateway runs (SBX_E1450).
        let prepared = if req.tty || req.network != sandboxio_core::NetworkMode::None {
            None
        } else {
            self.take()
        };
        let used_pool = prepared.is_some();
        let (tier, cfg) = (self.shared.tier, &self.shared.cfg);
        let mut io = crate::stream::StreamIo::default();
        let first = exec::run_prepared(req, tier, cfg, cancel.clone(), prepared, &mut io).await;
        let res = crate::fallback::after_refusal(first, req, tier, cfg, cancel, io).await;
        // Refill after the exec, not during it: starting a helper (exec of a large binary,
        // page faults) would compete for the CPU with the run it replaces.
        self.wake.notify.notify_one();
        if !used_pool {
            tracing::debug!("warm pool empty; the sandbox was started cold");
        }
        res
    }

    /// Take one live pooled sandbox (the refiller is woken when the exec ends).
    fn take(&self) -> Option<Prepared> {
        let mut found = None;
        let mut dead = Vec::new();
        if let Ok(mut q) = self.shared.ready.lock() {
            while let Some(p) = q.pop_front() {
                // A helper that died while waiting (e.g. its parent thread exited) is
                // discarded; it is reaped here.
                if exec::reaped(p.helper.pid) {
                    dead.push(p);
                    continue;
                }
                found = Some(p);
                break;
            }
        }
        for p in dead {
            destroy(p, true);
        }
        found
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        // The refiller wakes, sees `closed` and ends; `Shared::drop` destroys what is still
        // waiting once the last reference (this one or the refiller's) goes.
        self.wake.closed.store(true, Ordering::SeqCst);
        self.wake.notify.notify_one();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let waiting: Vec<Prepared> = match self.ready.get_mut() {
            Ok(q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for p in waiting {
            destroy(p, false);
        }
    }
}

/// Keep the pool full until it is dropped.
async fn refill(pool: Weak<Shared>, wake: Arc<Wake>) {
    loop {
        let mut failed = false;
        loop {
            if wake.closed.load(Ordering::SeqCst) {
                return;
            }
            let Some(shared) = pool.upgrade() else {
                return;
            };
            let need = shared
                .ready
                .lock()
                .map(|q| q.len() < shared.size)
                .unwrap_or(false);
            if !need {
                break;
            }
            match prepare(&shared.cfg, shared.tier) {
                Ok(p) => match shared.ready.lock() {
                    Ok(mut q) => q.push_back(p),
                    Err(_) => destroy(p, false),
                },
                Err(e) => {
                    tracing::warn!(error = %e, code = e.code(), "warm pool could not pre-start a sandbox");
                    failed = true;
                    break;
                }
            }
            drop(shared);
            // Let execs and other tasks run between two pre-starts.
            tokio::task::yield_now().await;
        }
        if failed {
            tokio::time::sleep(RETRY_AFTER).await;
            continue;
        }
        wake.notify.notified().await;
    }
}

/// Pre-start one sandbox: workspace, cgroup directories (no limits yet), helper waiting
/// for its plan and already in the cgroups its payload will inherit.
fn prepare(cfg: &SandboxConfig, tier: IsolationTier) -> Result<Prepared, SandboxError> {
    let _ = tier;
    let sandbox_id = plan::new_sandbox_id();
    let helper_path = cfg.resolve_helper()?;
    let workspace = Workspace::create_empty(&cfg.resolve_work_root(), true, true)?;
    let mut gaps = Vec::new();
    let mut cg: Option<CgroupPlan> = None;
    if cfg.cgroups != CgroupUsage::Off {
        let configured = cfg
            .cgroup_root
            .as_ref()
            .map(|root| cgroup::with_root(cgroup::host_layout(), root));
        let layout = configured.as_ref().unwrap_or_else(|| cgroup::host_layout());
        match cgroup::plan(layout, &sandbox_id, &Limits::default()) {
            Some(p) => match cgroup::create_dirs(&p) {
                Ok(_) => cg = Some(p),
                Err(e) if cfg.cgroups == CgroupUsage::Required => return Err(e),
                Err(e) => gaps.push(cgroup::unavailable_gap(&e)),
            },
            None if cfg.cgroups == CgroupUsage::Required => {
                return Err(SandboxError::CgroupUnavailable {
                    why: "no cgroup hierarchy found in /proc/self/mountinfo".into(),
                })
            }
            None => {}
        }
    }
    // stdin is always a pipe here (the request is not known yet); without stdin data the
    // exec closes it, so the payload reads EOF at once.
    let helper = match spawn_helper(&helper_path, exec::HelperStdio::Pipes { stdin: true }, None) {
        Ok(h) => h,
        Err(e) => {
            if let Some(c) = &cg {
                let _ = cgroup::remove(c);
            }
            return Err(e);
        }
    };
    // Move the waiting helper into the sandbox's cgroups now, off the hot path (a v1
    // `cgroup.procs` write waits for an RCU grace period): its payload, or its namespace
    // init, inherits them at fork. Never the kill cgroup (it would kill or freeze the
    // helper); the payload is cloned into that one (clone3 CLONE_INTO_CGROUP).
    let joined = cg.as_ref().map(cgroup::prejoin_dirs).unwrap_or_default();
    let prepared = Prepared {
        sandbox_id,
        workspace,
        cgroup: cg,
        joined,
        gaps,
        helper,
    };
    if let Err(e) = cgroup::join(&prepared.joined, prepared.helper.pid) {
        destroy(prepared, false);
        return Err(e);
    }
    Ok(prepared)
}

/// Destroy an unused pooled sandbox: kill and reap its helper (unless already reaped),
/// remove its cgroup directories and its workspace.
fn destroy(p: Prepared, already_reaped: bool) {
    let pid = p.helper.pid;
    if !already_reaped && pid > 0 {
        // SAFETY: kill(2)/waitpid(2) on our own child, which is blocked reading its plan
        // (it has not called setsid or forked yet, so it has no descendants).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
    }
    if let Some(c) = &p.cgroup {
        if let Err(e) = cgroup::remove(c) {
            tracing::warn!(error = %e, "could not remove a pooled sandbox cgroup");
        }
    }
    drop(p);
}
