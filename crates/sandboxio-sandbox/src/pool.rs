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
//! Cgroups: in the process tier the waiting helper joins its sandbox's cgroups at fill time
//! (every directory except the kill cgroup, i.e. the v1 memory/pids/cpu/cpuacct ones on a
//! hybrid host), with no limits while it waits; in the namespace tier the pre-built init
//! moves itself into them when the base is built and the helper stays out. The request's
//! limits are written at exec, before the plan is sent. The payload inherits those cgroups
//! at fork (from the helper or the init) and is cloned straight into the cgroup2 kill leaf
//! (`clone3` + `CLONE_INTO_CGROUP`), so a pooled exec does no `cgroup.procs` write (the
//! migration costs an RCU grace period, several ms). The price in the process tier: the
//! helper's own memory allocated after it joined (small: the plan and its supervision
//! loop) and CPU time count in the sandbox's memory and CPU figures, and `pids.max` is
//! raised by one for the helper's own pid. The helper is never in the kill cgroup, so
//! `cgroup.kill` (or the freezer) still takes the whole payload tree and nothing else; the
//! cgroups are removed after the helper has exited, as for a cold run.
//!
//! Namespace tier: the namespaces are pre-built too. At fill time the helper gets the
//! pool's base plan (a template request: no network, no input, no mounts) and builds it
//! (`ns::prebuild`): its own user namespace when not root, its private mount namespace and
//! staging tmpfs, the init in its user, pid, mount, net, ipc, uts and cgroup namespaces and
//! cgroups, the read-only system view, `/proc`, `/dev`, `/tmp`, the staged workspace and
//! output, pivot_root; the init then waits. A sandbox enters the pool only once the helper
//! said its base is built. At exec only what depends on the request is left
//! (`ns::prebuilt`): tmpfs sizes and exec flags, the workspace files, argv, env, cwd,
//! rlimits, Landlock and seccomp (applied last in the payload, as cold), the exec. A
//! request of another shape (terminal, network, an input directory, the caller's mounts:
//! binds of host paths cannot be added after pivot_root) starts cold; the result's
//! `meter.pool` says `hit` or `miss(<reason>)`.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sandboxio_core::{ErrorCode, ExecRequest, ExecResult, IsolationTier, Limits};
use tokio::sync::Notify;

use crate::cgroup::{self, CgroupPlan};
use crate::config::{CgroupUsage, SandboxConfig};
use crate::error::SandboxError;
use crate::exec::{self, CancelToken, Prepared, Workspace};
use crate::plan;

/// Wait after a failed pre-start before trying again (the exec path falls back to a cold
/// start meanwhile, which reports the real error).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// The longest a pooled helper may take to pre-build its namespaces (loaded host).
const PREBUILD_LIMIT: Duration = Duration::from_secs(30);

/// The longest `destroy` waits for a pre-built helper to clean up after itself (it unmounts
/// its staging tmpfs and removes its directory) before killing it.
const DESTROY_GRACE: Duration = Duration::from_secs(2);

/// The request the pool's namespace base is planned from: no network, no input directory,
/// no mounts, default limits. Requests differing only in request-time parts fit it.
fn template() -> ExecRequest {
    let mut r = ExecRequest::new(["/bin/true"]);
    r.limits = r.limits.or_builtin_defaults();
    r
}

/// Host paths for shape comparisons only (`ns::prebuilt::shape` blanks them).
fn shape_host() -> crate::ns::NsHostPaths {
    crate::ns::NsHostPaths {
        workspace: "/nonexistent/workspace".into(),
        output: "/nonexistent/output".into(),
    }
}

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
    /// Namespace tier: the plan of [`template`], to compare each request's shape with.
    base: Option<crate::ns::NamespacePlan>,
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
        let base = match tier {
            IsolationTier::Namespace => Some(crate::ns::plan(
                &template(),
                &shape_host(),
                &BTreeMap::new(),
            )?),
            _ => None,
        };
        let shared = Arc::new(Shared {
            cfg,
            tier,
            size,
            base,
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
        let miss = self.miss(req);
        let prepared = if miss.is_none() { self.take() } else { None };
        let outcome = match (&prepared, miss) {
            (Some(_), _) => "hit".to_string(),
            (None, Some(why)) => format!("miss({why})"),
            (None, None) => "miss(empty)".to_string(),
        };
        let (tier, cfg) = (self.shared.tier, &self.shared.cfg);
        let mut io = crate::stream::StreamIo::default();
        let first = exec::run_prepared(req, tier, cfg, cancel.clone(), prepared, &mut io).await;
        let mut res = crate::fallback::after_refusal(first, req, tier, cfg, cancel, io).await;
        // Refill after the exec, not during it: starting a helper (exec of a large binary,
        // page faults) would compete for the CPU with the run it replaces.
        self.wake.notify.notify_one();
        tracing::debug!(pool = %outcome, "warm pool exec");
        if let Ok(r) = &mut res {
            if let Some(m) = &mut r.meter {
                m.pool = Some(outcome);
            }
        }
        res
    }

    /// Why `req` cannot use a pooled sandbox (`None`: it can). A pooled helper's stdio is
    /// pipes (a terminal starts cold); network needs the egress proxy, which only the
    /// gateway runs (`SBX_E1450`); a pre-built namespace base serves only requests of its
    /// own shape (`ns::prebuilt`).
    fn miss(&self, req: &ExecRequest) -> Option<&'static str> {
        if req.tty {
            return Some("tty");
        }
        if req.network != sandboxio_core::NetworkMode::None {
            return Some("network");
        }
        let base = self.shared.base.as_ref()?;
        if req.input_dir.is_some() {
            return Some("input");
        }
        if !req.mounts.is_empty() {
            return Some("mounts");
        }
        match crate::ns::plan(req, &shape_host(), &BTreeMap::new()) {
            // The cold run reports what is wrong with the request.
            Err(_) => Some("invalid request"),
            Ok(real) => crate::ns::prebuilt::mismatch(base, &real),
        }
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
            let made = match prepare(&shared.cfg, shared.tier) {
                Ok(p) if p.prebuilt => match p.helper.await_prebuilt(PREBUILD_LIMIT).await {
                    Ok(()) => Ok(p),
                    Err(e) => {
                        destroy(p, false);
                        Err(e)
                    }
                },
                other => other,
            };
            match made {
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
    let prebuilt = tier == IsolationTier::Namespace;
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
    let stdio = exec::HelperStdio::Pipes { stdin: true };
    let helper = match exec::spawn_helper_as(&helper_path, stdio, None, prebuilt) {
        Ok(h) => h,
        Err(e) => {
            if let Some(c) = &cg {
                let _ = cgroup::remove(c);
            }
            return Err(e);
        }
    };
    // Process tier: move the waiting helper into the sandbox's cgroups now, off the hot
    // path; its payload inherits them at fork. Never the kill cgroup (it would kill or
    // freeze the helper); the payload is cloned into that one (clone3 CLONE_INTO_CGROUP).
    // This write names a pid, so it waits for an RCU grace period, and every fork on the
    // host waits with it meanwhile. A pre-built namespace needs none of it: its init moves
    // itself into the v1 cgroups when the base is built (`cgroup::self_join_file`) and the
    // helper stays out of them.
    let joined = match &cg {
        Some(c) if !prebuilt => cgroup::prejoin_dirs(c),
        _ => Vec::new(),
    };
    let prepared = Prepared {
        sandbox_id,
        workspace,
        cgroup: cg,
        joined,
        gaps,
        helper,
        prebuilt,
    };
    if let Err(e) = cgroup::join(&prepared.joined, prepared.helper.pid) {
        destroy(prepared, false);
        return Err(e);
    }
    if prebuilt {
        // The init the helper clones now enters the sandbox's cgroups at once.
        if let Err(e) = base_plan(&prepared).and_then(|p| prepared.helper.send_base_plan(&p)) {
            destroy(prepared, false);
            return Err(e);
        }
    }
    Ok(prepared)
}

/// The plan a pooled namespace helper pre-builds: [`template`] in this sandbox's
/// workspace and cgroups.
fn base_plan(p: &Prepared) -> Result<plan::SandboxPlan, SandboxError> {
    let req = template();
    let host_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut sp = plan::build(
        &p.sandbox_id,
        &req,
        crate::tier::TierRequest::Namespace,
        host_env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        p.workspace.paths.clone(),
        p.cgroup.clone(),
    )?;
    sp.cgroup_joined = p.joined.clone();
    Ok(sp)
}

/// Destroy an unused pooled sandbox: end and reap its helper (unless already reaped),
/// remove its cgroup directories and its workspace. A pre-built helper is first let go by
/// closing its pipes (it sees the end of its plan, kills its init and unmounts its
/// staging); one that does not exit within [`DESTROY_GRACE`] is killed.
fn destroy(p: Prepared, already_reaped: bool) {
    let Prepared {
        helper,
        cgroup: cg,
        workspace,
        prebuilt,
        ..
    } = p;
    let pid = helper.pid;
    drop(helper);
    if !already_reaped && pid > 0 {
        let mut gone = false;
        if prebuilt {
            let deadline = std::time::Instant::now() + DESTROY_GRACE;
            while !gone && std::time::Instant::now() < deadline {
                gone = exec::reaped(pid);
                if !gone {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
        if !gone {
            // Our own child, blocked reading its plan (a pre-built one's init dies with it:
            // PR_SET_PDEATHSIG).
            let _ = crate::sys::proc::kill(pid, libc::SIGKILL);
            let _ = crate::sys::proc::waitpid(pid);
        }
    }
    if let Some(c) = &cg {
        if let Err(e) = cgroup::remove(c) {
            tracing::warn!(error = %e, "could not remove a pooled sandbox cgroup");
        }
    }
    drop(workspace);
}
