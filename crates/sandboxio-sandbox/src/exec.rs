//! The supervisor side (async): workspace, cgroup, helper process, output capture,
//! timeout backstop, cancellation, cleanup, and the `ExecResult`.

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxio_core::{
    Enforcement, ExecEvent, ExecRequest, ExecResult, IsolationTier, Meter, NetworkMode, Usage,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::cgroup::{self, Applied, CgroupPlan};
use crate::config::{CgroupUsage, SandboxConfig};
use crate::drain::{drain, Pending, PumpState, Writers};
use crate::error::SandboxError;
use crate::helper::HELPER_ARG;
use crate::plan::{self, WorkspacePaths, MAX_PLAN_BYTES};
use crate::protocol::{FinalReport, HelperFds, HelperMsg, CANCEL_BYTE};
use crate::stream::{self, Capture, OutputSinks, StreamIo};
use crate::sys;

/// How long after the timeout the supervisor waits for the helper before killing it itself.
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(5);
pub use crate::drain::DRAIN_GRACE;
/// Lowest fd number for the child ends of the helper's pipes before they are dup2'ed.
const HIGH_FD: RawFd = 10;

/// Cancels a run. Clonable; the first reason wins.
#[derive(Debug, Clone)]
pub struct CancelToken {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    pub fn new() -> Self {
        CancelToken {
            tx: Arc::new(watch::channel(None).0),
        }
    }

    /// Cancel every run holding this token; the whole tree of each is killed.
    pub fn cancel(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.tx.send_if_modified(|v| {
            if v.is_none() {
                *v = Some(reason);
                true
            } else {
                false
            }
        });
    }

    pub fn is_cancelled(&self) -> bool {
        self.tx.borrow().is_some()
    }

    pub fn reason(&self) -> Option<String> {
        self.tx.borrow().clone()
    }

    /// Wait until cancelled; returns the reason.
    pub async fn cancelled(&self) -> String {
        let mut rx = self.tx.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                // The sender lives in `self`, so this cannot happen; never resolve.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Run one program under `tier`. Returns `Err` only when the sandbox could not do its job;
/// a program that fails, times out or is cancelled is an `Ok(ExecResult)` saying so.
/// Dropping the returned future kills the whole process tree.
pub async fn run(
    req: &ExecRequest,
    tier: IsolationTier,
    cfg: &SandboxConfig,
    cancel: Option<CancelToken>,
) -> Result<ExecResult, SandboxError> {
    run_streaming(req, tier, cfg, cancel, StreamIo::default()).await
}

/// [`run`], live: output chunks go to `io.events` as the program writes them (then one
/// `Exit` event), `io.stdin` feeds a `stdin_stream` request, and a `tty` request runs
/// under a new pseudo-terminal of `io.tty_size`. The returned `ExecResult` holds the same
/// bytes as the events.
pub async fn run_streaming(
    req: &ExecRequest,
    tier: IsolationTier,
    cfg: &SandboxConfig,
    cancel: Option<CancelToken>,
    io: StreamIo,
) -> Result<ExecResult, SandboxError> {
    check_tier(tier)?;
    let mut io = io;
    let first = run_prepared(req, tier, cfg, cancel.clone(), None, &mut io).await;
    crate::fallback::after_refusal(first, req, tier, cfg, cancel, io).await
}

/// Whether this crate has a backend for `tier` (never a weaker one instead).
pub(crate) fn check_tier(tier: IsolationTier) -> Result<(), SandboxError> {
    match tier {
        // Landlock: allowed only by `SandboxConfig.landlock_fallback` (fallback::check_allowed).
        IsolationTier::Process | IsolationTier::Namespace | IsolationTier::Landlock => Ok(()),
        IsolationTier::Microvm | IsolationTier::Remote => Err(SandboxError::UnsupportedTier {
            tier,
            why: "not built yet",
        }),
    }
}

/// A sandbox started ahead of its request (warm pool): helper already running and waiting
/// for its plan, workspace and cgroup directories already created (limits not yet written).
pub(crate) struct Prepared {
    pub(crate) sandbox_id: String,
    pub(crate) workspace: Workspace,
    /// Cgroup directories created for `sandbox_id` (limits are written at use).
    pub(crate) cgroup: Option<CgroupPlan>,
    /// The directories of `cgroup` the waiting helper already sits in (joined at fill
    /// time, so the payload inherits them at fork instead of migrating at exec).
    pub(crate) joined: Vec<PathBuf>,
    /// Gaps found while preparing (e.g. cgroup creation failed under `Auto`).
    pub(crate) gaps: Vec<String>,
    pub(crate) helper: HelperProc,
    /// Namespace tier: the helper pre-builds its namespaces (`ns::prebuild`).
    pub(crate) prebuilt: bool,
}

/// The shared body of [`run`] and of a warm-pool exec.
pub(crate) async fn run_prepared(
    req: &ExecRequest,
    tier: IsolationTier,
    cfg: &SandboxConfig,
    cancel: Option<CancelToken>,
    prepared: Option<Prepared>,
    io: &mut StreamIo,
) -> Result<ExecResult, SandboxError> {
    // Zero never means "unlimited": unset limits take the built-in defaults.
    let defaulted;
    let req = if req.limits == req.limits.or_builtin_defaults() {
        req
    } else {
        defaulted = ExecRequest {
            limits: req.limits.or_builtin_defaults(),
            ..req.clone()
        };
        &defaulted
    };
    let started = Instant::now();
    if req.stdin.is_some() && req.stdin_stream {
        return Err(SandboxError::StdinConflict);
    }
    let mut gaps: Vec<String> = Vec::new();
    let mut guard = Inflight {
        workspace: None,
        keep: req.keep_workspace,
        cgroup: None,
        control: None,
        helper_pid: None,
        done: false,
    };
    let configured_layout = cfg
        .cgroup_root
        .as_ref()
        .map(|root| cgroup::with_root(cgroup::host_layout(), root));
    let layout = configured_layout
        .as_ref()
        .unwrap_or_else(|| cgroup::host_layout());
    let mut cg_plan: Option<CgroupPlan>;
    let mut applied: Option<Applied> = None;
    let sandbox_id;
    let workspace_paths;
    let helper;
    match prepared {
        Some(p) => {
            sandbox_id = p.sandbox_id;
            guard.helper_pid = Some(p.helper.pid);
            // Until the plan is sent, dropping this makes the waiting helper exit.
            helper = HelperSource::Pooled(p.helper);
            guard.workspace = Some(p.workspace.dir);
            guard.cgroup = p.cgroup.clone();
            workspace_paths = Workspace::adopt(&p.workspace.paths, req)?;
            gaps.extend(p.gaps);
            cg_plan = None;
            let joined = p.joined;
            // A pooled helper (process tier) or a pre-built init sits in the cgroups.
            let occupied = !joined.is_empty() || p.prebuilt;
            if let Some(pre) = &p.cgroup {
                // Same id and layout, so the same directories; only the limits differ.
                let want = plan::cgroup_plan(layout, &sandbox_id, req, tier, true)
                    .filter(|cg| cg.dirs == pre.dirs);
                if let Some(mut cg) = want {
                    // The helper's own pid counts in the pids cgroup it already sits in.
                    cgroup::allow_for_helper(&mut cg, &joined);
                    let mut a = Applied {
                        enforced: cg.enforced.clone(),
                        gaps: cg.gaps.clone(),
                    };
                    match cgroup::write_limits(&cg, &mut a) {
                        Ok(()) => {
                            applied = Some(a);
                            cg_plan = Some(cg);
                        }
                        Err(e) => {
                            // write_limits removed the directories already, except those
                            // the helper or the init sits in: they go once it has exited
                            // (the guard).
                            if !occupied {
                                guard.cgroup = None;
                            }
                            if cfg.cgroups == CgroupUsage::Required {
                                return Err(e);
                            }
                            gaps.push(format!("cgroup: {e}; running without a cgroup"));
                        }
                    }
                }
            }
            if cg_plan.is_none() && cfg.cgroups == CgroupUsage::Required {
                return Err(SandboxError::CgroupUnavailable {
                    why: "the pooled sandbox has no usable cgroup".into(),
                });
            }
            let joined = if cg_plan.is_some() {
                joined
            } else {
                Vec::new()
            };
            let run = Run {
                req,
                tier,
                cfg,
                cancel,
                started,
            };
            let setup = Setup {
                sandbox_id,
                workspace_paths,
                cgroup: cg_plan,
                cgroup_joined: joined,
                applied,
                gaps,
                guard,
                helper,
            };
            return drive(run, setup, io).await;
        }
        None => {
            sandbox_id = plan::new_sandbox_id();
            helper = HelperSource::Spawn(cfg.resolve_helper()?);
            let ws = Workspace::create(&cfg.resolve_work_root(), req)?;
            guard.workspace = Some(ws.dir);
            workspace_paths = ws.paths;
            cg_plan = plan::cgroup_plan(
                layout,
                &sandbox_id,
                req,
                tier,
                cfg.cgroups != CgroupUsage::Off,
            );
        }
    }
    if cfg.cgroups == CgroupUsage::Required && cg_plan.is_none() {
        return Err(SandboxError::CgroupUnavailable {
            why: "no cgroup hierarchy found in /proc/self/mountinfo".into(),
        });
    }
    if let Some(cg) = &cg_plan {
        match cgroup::create(cg) {
            Ok(a) => {
                applied = Some(a);
                guard.cgroup = Some(cg.clone());
            }
            Err(e) if cfg.cgroups == CgroupUsage::Required => return Err(e),
            Err(e) => {
                gaps.push(crate::cgroup::unavailable_gap(&e));
                cg_plan = None;
            }
        }
    }
    let run = Run {
        req,
        tier,
        cfg,
        cancel,
        started,
    };
    let setup = Setup {
        sandbox_id,
        workspace_paths,
        cgroup: cg_plan,
        cgroup_joined: Vec::new(),
        applied,
        gaps,
        guard,
        helper,
    };
    drive(run, setup, io).await
}

/// What a run was asked to do: the request (limits defaulted), its tier, the configuration,
/// the caller's cancel token, and when the run started.
struct Run<'a> {
    req: &'a ExecRequest,
    tier: IsolationTier,
    cfg: &'a SandboxConfig,
    cancel: Option<CancelToken>,
    started: Instant,
}

/// What a run has prepared before its helper gets the plan.
struct Setup {
    sandbox_id: String,
    workspace_paths: WorkspacePaths,
    /// The sandbox cgroup, created (cold) or with its limits written (warm pool); `None`:
    /// the run goes without one.
    cgroup: Option<CgroupPlan>,
    /// The directories of `cgroup` the helper already sits in (warm pool).
    cgroup_joined: Vec<PathBuf>,
    /// What the cgroup enforces, and its gaps.
    applied: Option<Applied>,
    /// Gaps found so far.
    gaps: Vec<String>,
    /// Everything that must not outlive the run.
    guard: Inflight,
    /// The helper to hand the plan to.
    helper: HelperSource,
}

/// Where a run's helper comes from.
enum HelperSource {
    /// A pooled helper already waiting for its plan (dropping it makes it exit).
    Pooled(HelperProc),
    /// A new helper, to be spawned from this binary (`SandboxConfig::resolve_helper`).
    Spawn(PathBuf),
}

/// Plan, start (or hand the plan to a waiting helper), supervise, collect, clean up.
async fn drive(run: Run<'_>, setup: Setup, io: &mut StreamIo) -> Result<ExecResult, SandboxError> {
    let Run {
        req,
        tier,
        cfg,
        cancel,
        mut started,
    } = run;
    let Setup {
        sandbox_id,
        workspace_paths,
        cgroup: cg_plan,
        cgroup_joined,
        applied,
        mut gaps,
        mut guard,
        helper,
    } = setup;
    if cg_plan.is_none() {
        if cfg.cgroups == CgroupUsage::Off {
            gaps.push("cgroup: disabled by configuration".into());
        }
        if req.limits.memory.bytes() > 0 {
            gaps.push(
                "memory: per-process RLIMIT_DATA only (no memory cgroup): private writable \
                 memory is capped per process, but a tree of processes can use more in total, \
                 shared memory is not counted, and the kernel cannot OOM-kill at the limit"
                    .into(),
            );
        }
        if tier != IsolationTier::Namespace {
            // The namespace tier limits them with RLIMIT_NPROC in its own user namespace.
            gaps.push("pids: not limited (no cgroup)".into());
        }
        gaps.push("cpu quota: not enforced (no cgroup); only RLIMIT_CPU per process".into());
        gaps.push("kill: tree found by /proc walk (subreaper), no cgroup".into());
    }

    let host_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    if tier == IsolationTier::Landlock {
        crate::fallback::check_allowed(cfg)?;
    }
    let mut plan = plan::build(
        &sandbox_id,
        req,
        crate::tier::TierRequest::for_host(tier)?,
        host_env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        workspace_paths,
        cg_plan,
    )?;
    plan.cgroup_joined = cgroup_joined;
    // Process tier with network: advisory only (the program has the host's network), but
    // the proxy variables point at the egress proxy, on a loopback port of the host.
    let mut advisory_proxy = false;
    if tier == IsolationTier::Process && req.network != NetworkMode::None {
        if let Some(to) = io.egress.take() {
            let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| Ok((l.local_addr()?.port(), l)))
                .map_err(|source| crate::ns::NsError::EgressListener {
                    step: "bind a loopback port for the egress proxy",
                    source,
                })?;
            for (k, v) in crate::ns::egress_env(l.0) {
                if v.is_empty() {
                    plan.env.remove(&k);
                } else {
                    plan.env.insert(k, v);
                }
            }
            let _ = to.send(l.1);
            advisory_proxy = true;
        }
    }
    let plan_bytes =
        serde_json::to_vec(&plan).map_err(|source| SandboxError::PlanEncode { source })?;
    if plan_bytes.len() > MAX_PLAN_BYTES {
        return Err(SandboxError::PlanTooLarge {
            size: plan_bytes.len(),
            max: MAX_PLAN_BYTES,
        });
    }

    // Start the helper (cold) or take the one that is already waiting (warm pool). The plan
    // goes into the pipe before the helper needs it whenever it fits the pipe buffer, so the
    // helper never waits for a supervisor task to be scheduled.
    // A task the run owns (aborted when it ends), as the stdin task below.
    let mut resize = None;
    let stdio = if req.tty {
        let (master, slave) = stream::open_pty(io.tty_size.unwrap_or_default())?;
        if let Some(rx) = io.tty_resize.take() {
            if let Ok(m) = master.try_clone() {
                resize = Some(tokio::spawn(stream::resize_pty(rx, m)));
            }
        }
        HelperStdio::Pty { master, slave }
    } else {
        HelperStdio::Pipes {
            stdin: req.stdin.is_some() || req.stdin_stream,
        }
    };
    // Network (namespace tier): a socket pair over which the helper sends the sandbox's
    // egress listener, handed on to whoever serves it (`io.egress`).
    let egress = match plan.tier.namespace().and_then(|n| n.egress_port) {
        None => None,
        Some(_) => {
            let Some(to) = io.egress.take() else {
                return Err(crate::ns::NsError::NetworkUnsupported {
                    mode: match req.network {
                        NetworkMode::Full => "full",
                        _ => "allowlist",
                    },
                }
                .into());
            };
            Some((crate::egress::socketpair()?, to))
        }
    };
    let mut helper = match helper {
        // A pooled helper has pipes and no egress socket: a terminal or network request
        // never reaches here with one (`WarmPool::exec` runs it cold).
        HelperSource::Pooled(h) => h,
        HelperSource::Spawn(helper_path) => spawn_helper(
            &helper_path,
            stdio,
            egress.as_ref().map(|((_, theirs), _)| theirs),
        )?,
    };
    if let Some(((ours, theirs), to)) = egress {
        drop(theirs);
        // Ends with the listener, or at EOF when the helper exits without sending one.
        tokio::spawn(async move {
            let got =
                tokio::task::spawn_blocking(move || crate::egress::recv_listener(&ours)).await;
            if let Ok(Ok(Some(listener))) = got {
                let _ = to.send(listener);
            }
        });
    }
    guard.helper_pid = Some(helper.pid);
    // Everything above is this sandbox's own (its directories, its waiting helper); the
    // plan below is the request. A caller's go-ahead comes in between (`StreamIo::release`).
    if let Some(release) = io.release.take() {
        let waiting = Instant::now();
        if !wait_release(release, cancel.as_ref()).await {
            withdraw(helper, &mut guard).await;
            return Err(SandboxError::NotReleased);
        }
        // The wait was the caller's, not this run's.
        started += waiting.elapsed();
    }
    let rest = match helper.plan_w.take() {
        Some(w) => match write_now(&w, &plan_bytes) {
            Ok(n) if n == plan_bytes.len() => None,
            Ok(n) => Some((w, plan_bytes[n..].to_vec())),
            Err(source) => {
                return Err(SandboxError::HelperIo {
                    what: "plan pipe",
                    source,
                })
            }
        },
        None => None,
    };
    if let Some((w, bytes)) = rest {
        let plan_tx = pipe::Sender::from_owned_fd(w).map_err(|source| SandboxError::HelperIo {
            what: "plan pipe",
            source,
        })?;
        tokio::spawn(write_all_and_close(plan_tx, bytes));
    }
    guard.control = Some(helper.ctl_w);

    // Stdin: fixed bytes, the caller's stream, or (no writer) end of input at once. The
    // task is aborted when the run ends (`StdinTask`), whatever the program read.
    let stdin_task = match (req.stdin.clone(), io.stdin.take(), helper.stdin_w.take()) {
        (Some(data), _, Some(w)) => Some(tokio::spawn(stream::write_stdin(data, w, req.tty))),
        (None, Some(rx), Some(w)) if req.stdin_stream => {
            Some(tokio::spawn(stream::pump_stdin(rx, w, req.tty)))
        }
        // A terminal with no input at all: end of input at once, as a closed pipe would be.
        (None, _, Some(w)) if req.tty => {
            Some(tokio::spawn(stream::write_stdin(Vec::new(), w, true)))
        }
        _ => None,
    };
    let _stdin_task = StdinTask(stdin_task);
    let _resize_task = StdinTask(resize);
    let out_cap = Capture::new(req.limits.stdout_cap.bytes());
    let err_cap = Capture::new(req.limits.stderr_cap.bytes());
    let events = io.events.clone();
    let sinks = OutputSinks {
        stdout: out_cap.clone(),
        stderr: err_cap.clone(),
        events: events.clone(),
        started,
    };
    let pump_state = PumpState::new(helper.stderr_r.is_some());
    let pending = Pending::watch(
        &std::iter::once(&helper.stdout_r)
            .chain(helper.stderr_r.as_ref())
            .collect::<Vec<_>>(),
    );
    let pump = tokio::spawn(stream::pump_output(
        helper.stdout_r,
        helper.stderr_r,
        sinks,
        pump_state.clone(),
    ));

    // Read the helper's reports until it exits (event-driven: woken by the pipe only).
    let rep_rx =
        pipe::Receiver::from_owned_fd(helper.rep_r).map_err(|source| SandboxError::HelperIo {
            what: "report pipe",
            source,
        })?;
    let mut lines = BufReader::new(rep_rx).lines();
    let backstop = tokio::time::sleep(plan.timeout + BACKSTOP_GRACE);
    tokio::pin!(backstop);
    let mut backstop_fired = false;
    let mut final_report: Option<FinalReport> = None;
    let mut setup_error: Option<(String, String)> = None;
    let mut cancel_reason: Option<String> = None;
    let cancel_wait = async {
        match &cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(cancel_wait);
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(l)) => match serde_json::from_str::<HelperMsg>(&l) {
                    Ok(HelperMsg::Payload { .. } | HelperMsg::Prebuilt) => {}
                    Ok(HelperMsg::SetupError { code, message }) => setup_error = Some((code, message)),
                    Ok(HelperMsg::Final(r)) => final_report = Some(*r),
                    Err(e) => {
                        setup_error = Some(("SBX_E1414".into(), format!("the helper broke its protocol: {e}")));
                    }
                },
                Ok(None) | Err(_) => break,
            },
            reason = &mut cancel_wait, if cancel_reason.is_none() => {
                cancel_reason = Some(reason);
                if let Some(fd) = &guard.control {
                    send_cancel(fd);
                }
            }
            _ = &mut backstop, if !backstop_fired => {
                backstop_fired = true;
                tracing::warn!(sandbox_id = %sandbox_id, "helper missed its deadline; killing it");
                hard_kill(guard.helper_pid, guard.cgroup.as_ref());
            }
        }
    }
    // The report pipe ended without a final report: the helper died (killed from outside,
    // or crashed) and no longer supervises the program. Its tree is killed now, while the
    // helper's pid is not reaped yet (so its process group cannot be anybody else's), not
    // at the backstop: a program must not run on unsupervised until its timeout.
    if final_report.is_none() && setup_error.is_none() {
        hard_kill(guard.helper_pid, guard.cgroup.as_ref());
    }
    let status = wait_helper(helper.pid)
        .await
        .map_err(|source| SandboxError::Wait { source })?;
    // Reaped: the cleanup must not signal or wait for this pid any more.
    guard.helper_pid = None;
    guard.control = None;

    // Output: read to the end where the tier guarantees the writers are dead; elsewhere give
    // up on a pipe an outsider holds open, and say so (crate::drain).
    let output_incomplete = drain(
        pump,
        &pump_state,
        &pending,
        Writers::after_exit(tier),
        started + plan.timeout + BACKSTOP_GRACE,
    )
    .await;
    drop(pending);
    let (stdout, stdout_bytes, stdout_truncated) = stream::take_capture(&out_cap);
    let (stderr, stderr_bytes, stderr_truncated) = stream::take_capture(&err_cap);

    // Cleanup before answering: no cgroup and no workspace outlive the run.
    let kept_workspace = guard.finish();
    // The run's own time: everything this crate did for it, its cleanup included.
    let duration = started.elapsed();

    if let Some((code, message)) = setup_error {
        return Err(SandboxError::InHelper {
            code: SandboxError::known_code(&code),
            message,
        });
    }
    let Some(report) = final_report else {
        return Err(SandboxError::HelperDied {
            status: describe_status(status),
        });
    };

    let is_process = tier == IsolationTier::Process;
    let mut enforcement = match report.enforcement.clone() {
        Some(mut e) => {
            e.gaps.extend(gaps);
            e
        }
        None => Enforcement {
            tier: Some(tier),
            namespaces: Vec::new(),
            landlock_abi: None,
            seccomp: false,
            no_new_privs: plan.no_new_privs,
            cgroup: None,
            limits: Vec::new(),
            network: if is_process {
                "full".into()
            } else {
                String::new()
            },
            gaps,
        },
    };
    enforcement.cgroup = plan.cgroup.as_ref().map(|c| c.version.as_str().to_string());
    if let Some(a) = applied {
        enforcement.limits.extend(a.enforced);
        enforcement.gaps.extend(a.gaps);
    }
    enforcement.limits.extend(plan::rlimit_enforcement(&plan));
    enforcement
        .limits
        .push(format!("meter: usage from {}", report.meter));
    if is_process {
        enforcement
            .gaps
            .extend(process_tier_gaps(req, advisory_proxy));
    }

    let timed_out = report.timed_out || (backstop_fired && cancel_reason.is_none());
    if let Some(tx) = &events {
        let _ = tx
            .send(ExecEvent::Exit {
                exit: report.exit,
                elapsed_us: stream::elapsed_us(started),
            })
            .await;
    }
    Ok(ExecResult {
        sandbox_id,
        exit: report.exit,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        stdout_bytes,
        stderr_bytes,
        timed_out,
        oom_killed: report.oom_killed,
        cancelled: cancel_reason.or(report.cancelled),
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
        usage: Usage {
            cpu_time_ms: report.cpu_time_ms,
            peak_memory_bytes: report.peak_memory_bytes,
        },
        enforcement,
        output_dir: if req.output_dir.is_some() || req.keep_workspace {
            Some(plan.paths.output_dir.clone())
        } else {
            None
        },
        workspace: kept_workspace,
        meter: Some(Meter {
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            backend: tier.as_str().into(),
            pool: None,
        }),
        network_denials: 0,
        denied_hosts: Vec::new(),
        output_incomplete,
        copy_out_error: report.copy_out_error,
    })
}

fn describe_status(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        format!("signal: {}", libc::WTERMSIG(status))
    } else {
        format!("exit status: {}", libc::WEXITSTATUS(status))
    }
}

/// What the process tier never enforces, in words (see README).
fn process_tier_gaps(req: &ExecRequest, advisory_proxy: bool) -> Vec<String> {
    let mut g = vec![
        "isolation: the process tier is not a security boundary: same uid, whole host filesystem visible and writable where the uid may write, host processes visible".to_string(),
    ];
    match &req.network {
        NetworkMode::Allowlist { .. } | NetworkMode::Full if advisory_proxy => g.push("network: advisory in the process tier: the proxy variables point at the egress proxy, but the program has the host's network and can go around it".into()),
        NetworkMode::Full => {}
        NetworkMode::None => g.push("network: `none` requested but the process tier cannot restrict network; the program has the host's network".into()),
        NetworkMode::Allowlist { .. } => g.push("network: `allowlist` requested but the process tier has no egress proxy; the program has the host's network".into()),
    }
    if req.input_dir.is_some() {
        g.push("input: the input directory is not made read-only by the process tier".into());
    }
    for m in &req.mounts {
        if m.mode == sandboxio_core::MountMode::Ro {
            g.push(format!(
                "mount: `{}` is not made read-only by the process tier",
                m.host.display()
            ));
        }
    }
    g.push(
        "tmp_size and output_size: not enforced by the process tier (no tmpfs, no quota)".into(),
    );
    if !req.allow_exec_in_writable {
        g.push("noexec: writable places are not mounted noexec by the process tier".into());
    }
    g
}

/// The temporary workspace.
pub(crate) struct Workspace {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) paths: WorkspacePaths,
}

fn mkdir(p: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(p).map_err(|source| SandboxError::WorkspaceWrite {
        path: p.to_path_buf(),
        source,
    })
}

impl Workspace {
    /// `<root>/sandboxio-XXXX` with `tmp/`, and `input/` / `output/` unless given.
    fn create(root: &Path, req: &ExecRequest) -> Result<Workspace, SandboxError> {
        let ws = Self::create_empty(root, req.input_dir.is_none(), req.output_dir.is_none())?;
        let paths = Self::adopt(&ws.paths, req)?;
        Ok(Workspace { dir: ws.dir, paths })
    }

    /// A workspace before its request is known (warm pool: all three directories).
    pub(crate) fn create_empty(
        root: &Path,
        input: bool,
        output: bool,
    ) -> Result<Workspace, SandboxError> {
        // The owner (this process) is in the name, so a sweep can tell a workspace whose
        // supervisor was killed from one in use (crate::sweep).
        // Private (0700): the work root is often shared (`/dev/shm`, `/tmp`), and the
        // workspace holds the caller's code and files.
        let dir = tempfile::Builder::new()
            .prefix(&crate::sweep::owned_prefix(crate::sweep::PREFIX))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(root)
            .map_err(|source| SandboxError::WorkspaceCreate {
                path: root.to_path_buf(),
                source,
            })?;
        let ws = dir.path().to_path_buf();
        let tmp = ws.join("tmp");
        let input_dir = ws.join("input");
        let output_dir = ws.join("output");
        // The fresh directory is empty: plain mkdir, no create_dir_all walk.
        for (d, want) in [(&tmp, true), (&input_dir, input), (&output_dir, output)] {
            if want {
                std::fs::create_dir(d).map_err(|source| SandboxError::WorkspaceWrite {
                    path: d.clone(),
                    source,
                })?;
            }
        }
        Ok(Workspace {
            dir,
            paths: WorkspacePaths {
                workspace: ws,
                tmp,
                input_dir,
                output_dir,
            },
        })
    }

    /// Apply the request to a created workspace: given input/output directories replace the
    /// workspace's own, and `req.files` are written (names relative, no `..`).
    pub(crate) fn adopt(
        base: &WorkspacePaths,
        req: &ExecRequest,
    ) -> Result<WorkspacePaths, SandboxError> {
        let mut paths = base.clone();
        if let Some(d) = &req.input_dir {
            paths.input_dir = d.clone();
        }
        match &req.output_dir {
            // The caller's output directory is taken as given (the gateway resolved and
            // checked it at admission), with no symlink allowed anywhere in it: one that
            // appeared since (a concurrent sandbox with a writable mount of a parent) is
            // refused, never followed. A missing directory (and parents) is made 0700 on
            // the way: it receives whatever the sandboxed program writes. The copy-out walks
            // the same path the same way (`ns::dst`).
            Some(d) => {
                paths.output_dir =
                    make_dir_without_symlinks(d).map_err(|source| SandboxError::OutputDir {
                        path: d.clone(),
                        source,
                    })?;
            }
            // The workspace's own (private, 0700): resolved once, for the copy-out.
            None => {
                paths.output_dir = std::fs::canonicalize(&paths.output_dir).map_err(|source| {
                    SandboxError::OutputDir {
                        path: paths.output_dir.clone(),
                        source,
                    }
                })?;
            }
        }
        let ws = &paths.workspace;
        for (name, contents) in &req.files {
            let rel = plan::validate_file_name(name)?;
            let path = ws.join(rel);
            if let Some(parent) = path.parent() {
                mkdir(parent)?;
            }
            std::fs::write(&path, contents)
                .map_err(|source| SandboxError::WorkspaceWrite { path, source })?;
        }
        Ok(paths)
    }
}

/// Makes directory `d` and its missing parents (mode 0700), component by component from
/// `/`, each opened with no symlink followed (`RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`): a symlink
/// anywhere in the path is refused (`ENOTDIR`/`ELOOP`), a `..` too (`EINVAL`). Returns `d` made absolute.
fn make_dir_without_symlinks(d: &Path) -> std::io::Result<PathBuf> {
    use std::os::fd::AsFd as _;
    use std::os::unix::ffi::OsStrExt as _;
    let abs = std::path::absolute(d)?;
    let err = std::io::Error::from_raw_os_error;
    let flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_BENEATH;
    let mut cur = crate::sys::fs::openat2_cwd(c"/", flags, 0, 0).map_err(err)?;
    for c in abs.components() {
        let name = match c {
            std::path::Component::RootDir | std::path::Component::CurDir => continue,
            std::path::Component::Normal(n) => n,
            _ => return Err(err(libc::EINVAL)),
        };
        let cname = std::ffi::CString::new(name.as_bytes()).map_err(|_| err(libc::EINVAL))?;
        let next = match crate::sys::fs::openat2(cur.as_fd(), &cname, flags, 0, resolve) {
            Ok(fd) => fd,
            Err(libc::ENOENT) => {
                match crate::sys::fs::mkdirat(cur.as_fd(), &cname, 0o700) {
                    Ok(()) | Err(libc::EEXIST) => {}
                    Err(e) => return Err(err(e)),
                }
                crate::sys::fs::openat2(cur.as_fd(), &cname, flags, 0, resolve).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        cur = next;
    }
    Ok(abs)
}

/// A started helper: its pid and the supervisor's ends of its pipes. The helper's fds are
/// fixed: 0 stdin, 1 stdout, 2 stderr, 3 plan, 4 report, 5 control.
pub(crate) struct HelperProc {
    pub(crate) pid: i32,
    plan_w: Option<OwnedFd>,
    rep_r: OwnedFd,
    ctl_w: OwnedFd,
    stdin_w: Option<OwnedFd>,
    /// The stdout pipe, or the terminal master (both streams) under a terminal.
    stdout_r: OwnedFd,
    /// The stderr pipe; `None` under a terminal.
    stderr_r: Option<OwnedFd>,
}

impl HelperProc {
    /// Warm pool, namespace tier: the base plan for a helper spawned with `prebuild`,
    /// framed by its length (the request's plan follows at exec, up to end of file).
    pub(crate) fn send_base_plan(&self, plan: &plan::SandboxPlan) -> Result<(), SandboxError> {
        let json =
            serde_json::to_vec(plan).map_err(|source| SandboxError::PlanEncode { source })?;
        if json.len() > MAX_PLAN_BYTES {
            return Err(SandboxError::PlanTooLarge {
                size: json.len(),
                max: MAX_PLAN_BYTES,
            });
        }
        let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&json);
        let Some(w) = &self.plan_w else {
            return Err(SandboxError::HelperProtocol {
                why: "the plan pipe is gone".into(),
            });
        };
        let mut f =
            std::fs::File::from(w.try_clone().map_err(|source| SandboxError::HelperIo {
                what: "plan pipe",
                source,
            })?);
        std::io::Write::write_all(&mut f, &bytes).map_err(|source| SandboxError::HelperIo {
            what: "plan pipe",
            source,
        })
    }

    /// Waits (asynchronously, at most `limit`) for the helper's `prebuilt` line: its base is
    /// built. Anything else (a setup error, end of file) is an error and the helper is of
    /// no use. Reads nothing past that one line (the helper writes nothing more before it
    /// gets its plan).
    pub(crate) async fn await_prebuilt(&self, limit: Duration) -> Result<(), SandboxError> {
        let fd = self.rep_r.as_fd();
        let _ = sys::fd::set_nonblocking(fd);
        let io = |source| SandboxError::HelperIo {
            what: "report pipe",
            source,
        };
        let afd = sys::fd::async_fd_borrowed(fd, tokio::io::Interest::READABLE)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let mut line = Vec::new();
        let read = async {
            loop {
                let mut g = afd.readable().await.map_err(io)?;
                let mut buf = [0u8; 512];
                let n = match sys::fd::read(fd, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let e = std::io::Error::from_raw_os_error(e);
                        if e.kind() == std::io::ErrorKind::WouldBlock {
                            g.clear_ready();
                            continue;
                        }
                        return Err(io(e));
                    }
                };
                if n == 0 {
                    break;
                }
                line.extend_from_slice(&buf[..n]);
                if line.ends_with(b"\n") {
                    break;
                }
            }
            Ok::<(), SandboxError>(())
        };
        match tokio::time::timeout(limit, read).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(SandboxError::HelperProtocol {
                    why: "the pooled helper did not pre-build its namespaces in time".into(),
                })
            }
        }
        drop(afd);
        match serde_json::from_slice::<HelperMsg>(line.trim_ascii_end()) {
            Ok(HelperMsg::Prebuilt) => Ok(()),
            Ok(HelperMsg::SetupError { code, message }) => Err(SandboxError::InHelper {
                code: SandboxError::known_code(&code),
                message,
            }),
            _ => Err(SandboxError::HelperProtocol {
                why: "the pooled helper ended before its namespaces were built".into(),
            }),
        }
    }
}

/// What the helper's (and so the payload's) fds 0, 1 and 2 are.
pub(crate) enum HelperStdio {
    /// Pipes; with `stdin` a pipe for stdin too (written or closed by the supervisor),
    /// otherwise `/dev/null`.
    Pipes { stdin: bool },
    /// One pseudo-terminal: the slave is 0, 1 and 2; the supervisor keeps the master.
    Pty { master: OwnedFd, slave: OwnedFd },
}

/// Stops feeding stdin when the run ends (the future is dropped or returns).
struct StdinTask(Option<tokio::task::JoinHandle<()>>);

impl Drop for StdinTask {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.abort();
        }
    }
}

/// The helper's fd numbers (see [`HelperProc`]).
const HELPER_FDS: HelperFds = HelperFds {
    plan: 3,
    report: 4,
    control: 5,
    egress: None,
};

/// The helper's egress socket, when the sandbox has network (see [`HelperFds::egress`]).
const HELPER_EGRESS_FD: RawFd = 6;

/// Start the helper with `posix_spawn` (vfork-style `clone(CLONE_VM|CLONE_VFORK)` in
/// glibc): no copy of the supervisor's page tables, whatever its size, and no code of ours
/// runs between fork and exec. Its pipes are placed at fixed fds by spawn file actions
/// (`dup2` clears close-on-exec on the target only), so no `pre_exec` hook is needed and no
/// fd of this run leaks into a child that another thread spawns at the same time.
/// `stdio` says what its fds 0, 1 and 2 are.
pub(crate) fn spawn_helper(
    path: &Path,
    stdio: HelperStdio,
    egress: Option<&OwnedFd>,
) -> Result<HelperProc, SandboxError> {
    spawn_helper_as(path, stdio, egress, false)
}

/// [`spawn_helper`]; with `prebuild` the helper first reads a base plan and pre-builds its
/// namespaces (warm pool, [`HelperProc::send_base_plan`]).
pub(crate) fn spawn_helper_as(
    path: &Path,
    stdio: HelperStdio,
    egress: Option<&OwnedFd>,
    prebuild: bool,
) -> Result<HelperProc, SandboxError> {
    // Parent ends stay close-on-exec; child ends are moved to fds >= HIGH_FD so that the
    // dup2 actions onto 0..=5 can never overwrite a source not yet duplicated.
    let (plan_r, plan_w) = pipe_pair()?;
    let (rep_r, rep_w) = pipe_pair()?;
    let (ctl_r, ctl_w) = pipe_pair()?;
    let (std_child, stdin_w, stdout_r, stderr_r) = match stdio {
        HelperStdio::Pipes { stdin } => {
            let (out_r, out_w) = pipe_pair()?;
            let (err_r, err_w) = pipe_pair()?;
            let (in_child, stdin_w) = if stdin {
                let (r, w) = pipe_pair()?;
                (dup_high(&r)?, Some(w))
            } else {
                let null = std::fs::File::open("/dev/null")
                    .map_err(|source| SandboxError::Pipe { source })?;
                (dup_high(&OwnedFd::from(null))?, None)
            };
            (
                [in_child, dup_high(&out_w)?, dup_high(&err_w)?],
                stdin_w,
                out_r,
                Some(err_r),
            )
        }
        HelperStdio::Pty { master, slave } => {
            let writer = dup_high(&master)?;
            (
                [dup_high(&slave)?, dup_high(&slave)?, dup_high(&slave)?],
                Some(writer),
                master,
                None,
            )
        }
    };
    let [in_child, out_child, err_child] = std_child;
    let mut child_fds = vec![
        (in_child, 0),
        (out_child, 1),
        (err_child, 2),
        (dup_high(&plan_r)?, HELPER_FDS.plan),
        (dup_high(&rep_w)?, HELPER_FDS.report),
        (dup_high(&ctl_r)?, HELPER_FDS.control),
    ];
    let mut fds = HELPER_FDS;
    if let Some(e) = egress {
        child_fds.push((dup_high(e)?, HELPER_EGRESS_FD));
        fds.egress = Some(HELPER_EGRESS_FD);
    }
    drop((plan_r, rep_w, ctl_r));
    let pid = posix_spawn_fds(path, &child_fds, fds, prebuild).map_err(|source| {
        SandboxError::HelperSpawn {
            path: path.to_path_buf(),
            source,
        }
    })?;
    drop(child_fds);
    Ok(HelperProc {
        pid,
        plan_w: Some(plan_w),
        rep_r,
        ctl_w,
        stdin_w,
        stdout_r,
        stderr_r,
    })
}

fn spawn_io(what: &str) -> std::io::Error {
    std::io::Error::other(format!("posix_spawn setup failed: {what}"))
}

/// `posix_spawn(path, [path, HELPER_ARG, "3,4,5"], env = {})` with `fds` dup2'ed onto
/// their targets, signal mask cleared and SIGPIPE at its default.
fn posix_spawn_fds(
    path: &Path,
    fds: &[(OwnedFd, RawFd)],
    numbers: HelperFds,
    prebuild: bool,
) -> std::io::Result<i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let bad = |_| std::io::Error::from_raw_os_error(libc::EINVAL);
    let prog = CString::new(path.as_os_str().as_bytes()).map_err(bad)?;
    let arg1 = CString::new(HELPER_ARG).map_err(bad)?;
    let arg2 = CString::new(numbers.to_arg()).map_err(bad)?;
    let arg3 = CString::new(crate::helper::PREBUILD_ARG).map_err(bad)?;
    let all = [prog.as_c_str(), &arg1, &arg2, &arg3];
    let argv = if prebuild { &all[..] } else { &all[..3] };
    let maps: Vec<_> = fds.iter().map(|(src, dst)| (src.as_fd(), *dst)).collect();
    sys::spawn::spawn(&prog, argv, &[], &maps).map_err(|e| match e {
        sys::spawn::SpawnError::Setup(what, _) => spawn_io(what),
        sys::spawn::SpawnError::Spawn(r) => std::io::Error::from_raw_os_error(r),
    })
}

/// Write as much of `bytes` as fits into the (empty) pipe now, without blocking: raise the
/// pipe buffer to fit the plan where the host allows it. Returns the bytes written.
fn write_now(fd: &OwnedFd, bytes: &[u8]) -> std::io::Result<usize> {
    let fd = fd.as_fd();
    let _ = sys::fd::set_nonblocking(fd);
    if let Ok(cap) = sys::fd::pipe_size(fd) {
        if (cap as usize) < bytes.len() {
            // Best effort (bounded by /proc/sys/fs/pipe-max-size for non-root).
            let want = bytes.len().min(1 << 20);
            let _ = sys::fd::set_pipe_size(fd, want as libc::c_int);
        }
    }
    let mut done = 0;
    while done < bytes.len() {
        match sys::fd::write(fd, &bytes[done..]) {
            Ok(n) => done += n,
            Err(libc::EINTR) => continue,
            Err(libc::EAGAIN) => break,
            // The helper died before reading its plan: the run reports that.
            Err(libc::EPIPE) => return Ok(bytes.len()),
            Err(e) => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
    Ok(done)
}

/// Whether the caller released the run: `true` sent. `false`, a dropped sender or the
/// run's cancellation withdraw it.
async fn wait_release(
    release: tokio::sync::oneshot::Receiver<bool>,
    cancel: Option<&CancelToken>,
) -> bool {
    let cancelled = async {
        match cancel {
            Some(c) => {
                c.cancelled().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        go = release => go.unwrap_or(false),
        () = cancelled => false,
    }
}

/// Ends a run that was never released, in order: the waiting helper sees the end of its
/// plan and exits (killed if it has not within the grace), it is reaped, and the run's
/// cgroup and workspace go before this returns (not on a detached cleanup thread, which a
/// one-shot process could outlive).
async fn withdraw(helper: HelperProc, guard: &mut Inflight) {
    let pid = helper.pid;
    drop(helper);
    guard.control = None;
    if tokio::time::timeout(BACKSTOP_GRACE, wait_helper(pid))
        .await
        .is_err()
    {
        hard_kill(Some(pid), guard.cgroup.as_ref());
        let _ = wait_helper(pid).await;
    }
    guard.helper_pid = None;
    // Nothing ran in it: a workspace the request asked to keep goes too.
    guard.keep = false;
    guard.finish();
}

/// Wait (asynchronously, woken by a pidfd) until the helper exits; reap it and return its
/// raw wait status.
async fn wait_helper(pid: i32) -> std::io::Result<i32> {
    let afd = sys::proc::pidfd_open(pid)
        .ok()
        .and_then(|fd| sys::fd::async_fd(fd, tokio::io::Interest::READABLE).ok());
    loop {
        // Waiting for our own child.
        match sys::proc::wait_nohang(pid) {
            Ok(Some((r, status))) if r == pid => return Ok(status),
            Ok(_) => {}
            Err(libc::EINTR) => continue,
            Err(e) => return Err(std::io::Error::from_raw_os_error(e)),
        }
        match &afd {
            Some(a) => {
                let mut g = a.readable().await?;
                g.clear_ready();
            }
            // No pidfd (old kernel): the helper has closed its report pipe, so it is
            // exiting; poll briefly.
            None => tokio::time::sleep(Duration::from_micros(200)).await,
        }
    }
}

/// Everything a run holds that must not outlive it. Dropped early (the future was dropped),
/// it closes the control pipe (the helper kills the tree) and cleans up on a thread.
struct Inflight {
    workspace: Option<tempfile::TempDir>,
    keep: bool,
    cgroup: Option<CgroupPlan>,
    control: Option<OwnedFd>,
    helper_pid: Option<i32>,
    done: bool,
}

impl Inflight {
    /// Normal end: remove cgroup and workspace now. Returns the kept workspace path.
    fn finish(&mut self) -> Option<PathBuf> {
        self.done = true;
        self.control = None;
        if let Some(cg) = self.cgroup.take() {
            if let Err(e) = cgroup::remove(&cg) {
                tracing::warn!(error = %e, "could not remove sandbox cgroup");
            }
        }
        let ws = self.workspace.take()?;
        if self.keep {
            let kept = ws.keep();
            crate::sweep::mark_kept(&kept);
            Some(kept)
        } else {
            drop(ws);
            None
        }
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // EOF on the control pipe: the helper kills the whole tree and exits.
        self.control = None;
        let cgroup = self.cgroup.take();
        let workspace = self.workspace.take();
        let keep = self.keep;
        let helper = self.helper_pid;
        let cleanup = move || {
            if let Some(pid) = helper {
                // The helper is our child: reap it (or kill, then reap it) so no zombie stays.
                let deadline = Instant::now() + BACKSTOP_GRACE;
                while !reaped(pid) {
                    if Instant::now() >= deadline {
                        hard_kill(Some(pid), cgroup.as_ref());
                        // Blocking wait for our own child after SIGKILL.
                        let _ = sys::proc::waitpid(pid);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            if let Some(cg) = &cgroup {
                let _ = cgroup::remove(cg);
            }
            if let Some(ws) = workspace {
                if keep {
                    crate::sweep::mark_kept(&ws.keep());
                }
            }
        };
        if std::thread::Builder::new()
            .name("sandboxio-cleanup".into())
            .spawn(cleanup)
            .is_err()
        {
            tracing::warn!("could not start the cleanup thread of a dropped sandbox run");
        }
    }
}

/// Reap `pid` if it exited; true when it is gone (reaped now, or not our child any more).
pub(crate) fn reaped(pid: i32) -> bool {
    match sys::proc::wait_nohang(pid) {
        Ok(Some((r, _))) => r == pid,
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Last resort from the supervisor: kill the helper's process group and the cgroup.
fn hard_kill(helper_pid: Option<i32>, cg: Option<&CgroupPlan>) {
    if let Some(cg) = cg {
        cgroup::kill(cg);
    }
    if let Some(pid) = helper_pid.filter(|p| *p > 1) {
        // The helper leads its own session and process group (setsid), so -pid names
        // exactly the helper's group.
        let _ = sys::proc::kill(-pid, libc::SIGKILL);
        let _ = sys::proc::kill(pid, libc::SIGKILL);
    }
}

fn send_cancel(fd: &OwnedFd) {
    // A full or closed pipe only makes write fail, which is fine (the helper is already
    // stopping).
    let _ = sys::fd::write(fd.as_fd(), &[CANCEL_BYTE]);
}

fn pipe_error(e: i32) -> SandboxError {
    SandboxError::Pipe {
        source: std::io::Error::from_raw_os_error(e),
    }
}

fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    sys::fd::pipe().map_err(pipe_error)
}

/// A close-on-exec duplicate of `fd` on the lowest free number >= [`HIGH_FD`].
fn dup_high(fd: &OwnedFd) -> Result<OwnedFd, SandboxError> {
    sys::fd::dup_at_least(fd.as_fd(), HIGH_FD).map_err(pipe_error)
}

async fn write_all_and_close<W: tokio::io::AsyncWrite + Unpin>(mut w: W, data: Vec<u8>) {
    // The helper or program may exit without reading everything (EPIPE): not an error.
    let _ = w.write_all(&data).await;
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod workspace_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// The work root is often shared by every user (`/dev/shm`): a workspace (the caller's
    /// code, its files) is private to its owner. It used to be 0755.
    #[test]
    fn a_workspace_is_private_to_its_owner() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let ws = Workspace::create_empty(root.path(), true, true).unwrap();
        let mode = std::fs::metadata(&ws.paths.workspace)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }

    /// The caller's output directory is made (and later walked) with no symlink followed:
    /// one put in its path after the gateway checked it is refused, never followed.
    #[test]
    fn an_output_directory_is_made_without_following_a_symlink() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let made = make_dir_without_symlinks(&root.join("a/b/out")).unwrap();
        assert!(made.is_dir());
        let mode = std::fs::metadata(root.join("a"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("link")).unwrap();
        let e = make_dir_without_symlinks(&root.join("link/out")).unwrap_err();
        // The link itself, opened as a directory without following it.
        assert!(
            matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{e}"
        );
        assert!(!elsewhere.join("out").exists(), "made through the link");
        let e = make_dir_without_symlinks(&root.join("a/../a/out2")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }
}
