//! The supervisor side (async): workspace, cgroup, helper process, output capture,
//! timeout backstop, cancellation, cleanup, and the `ExecResult`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio_core::{
    Enforcement, ExecRequest, ExecResult, IsolationTier, Meter, NetworkMode, Usage,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::cgroup::{self, Applied, CgroupPlan};
use crate::config::{CgroupUsage, SandboxConfig};
use crate::error::{last_os_error, SandboxError};
use crate::helper::HELPER_ARG;
use crate::plan::{self, WorkspacePaths, MAX_PLAN_BYTES};
use crate::protocol::{FinalReport, HelperFds, HelperMsg, CANCEL_BYTE};

/// How long after the timeout the supervisor waits for the helper before killing it itself.
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(5);
/// How long output readers may run after the helper exits (a process that escaped the tree
/// could hold the pipes open forever).
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Lowest fd number used for the helper's pipes in the child.
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
    match tier {
        // Landlock: allowed only by `SandboxConfig.landlock_fallback` (fallback::plan_into).
        IsolationTier::Process | IsolationTier::Namespace | IsolationTier::Landlock => {}
        IsolationTier::Microvm | IsolationTier::Remote => {
            return Err(SandboxError::UnsupportedTier {
                tier,
                why: "not built yet",
            })
        }
    }
    let started = Instant::now();
    let sandbox_id = plan::new_sandbox_id();
    let helper_path = cfg.resolve_helper()?;
    let workspace = Workspace::create(&cfg.resolve_work_root(), req)?;
    let mut guard = Inflight {
        workspace: Some(workspace.dir),
        keep: req.keep_workspace,
        cgroup: None,
        control: None,
        helper_pid: None,
        done: false,
    };

    let layout = cgroup::host_layout();
    let mut cg_plan = plan::cgroup_plan(layout, &sandbox_id, req, cfg.cgroups != CgroupUsage::Off);
    let mut gaps: Vec<String> = Vec::new();
    if cfg.cgroups == CgroupUsage::Required && cg_plan.is_none() {
        return Err(SandboxError::CgroupUnavailable {
            why: "no cgroup hierarchy found in /proc/self/mountinfo".into(),
        });
    }
    let mut applied: Option<Applied> = None;
    if let Some(cg) = &cg_plan {
        match cgroup::create(cg) {
            Ok(a) => {
                applied = Some(a);
                guard.cgroup = Some(cg.clone());
            }
            Err(e) if cfg.cgroups == CgroupUsage::Required => return Err(e),
            Err(e) => {
                gaps.push(format!("cgroup: {e}; running without a cgroup"));
                cg_plan = None;
            }
        }
    }
    if cg_plan.is_none() {
        if cfg.cgroups == CgroupUsage::Off {
            gaps.push("cgroup: disabled by configuration".into());
        }
        gaps.push("pids: not limited (no cgroup)".into());
        gaps.push("cpu quota: not enforced (no cgroup); only RLIMIT_CPU per process".into());
        gaps.push("kill: tree found by /proc walk (subreaper), no cgroup".into());
    }

    let host_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut plan = plan::build(
        &sandbox_id,
        req,
        tier,
        host_env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        workspace.paths.clone(),
        cg_plan,
    )?;
    if tier == IsolationTier::Namespace {
        let host = crate::ns::NsHostPaths {
            workspace: plan.paths.workspace.clone(),
            output: plan.paths.output_dir.clone(),
        };
        plan.namespace = Some(crate::ns::plan(req, &host, &plan.env)?);
    }
    if tier == IsolationTier::Landlock {
        crate::fallback::plan_into(req, cfg, &mut plan)?;
    }
    let plan_bytes =
        serde_json::to_vec(&plan).map_err(|source| SandboxError::PlanEncode { source })?;
    if plan_bytes.len() > MAX_PLAN_BYTES {
        return Err(SandboxError::PlanTooLarge {
            size: plan_bytes.len(),
            max: MAX_PLAN_BYTES,
        });
    }

    // Pipes: parent ends stay close-on-exec; child ends are moved to high fds.
    let (plan_r, plan_w) = pipe_pair()?;
    let (rep_r, rep_w) = pipe_pair()?;
    let (ctl_r, ctl_w) = pipe_pair()?;
    let child_plan = dup_high(&plan_r)?;
    let child_rep = dup_high(&rep_w)?;
    let child_ctl = dup_high(&ctl_r)?;
    drop((plan_r, rep_w, ctl_r));
    let fds = HelperFds {
        plan: child_plan.as_raw_fd(),
        report: child_rep.as_raw_fd(),
        control: child_ctl.as_raw_fd(),
    };

    let mut cmd = tokio::process::Command::new(&helper_path);
    cmd.arg(HELPER_ARG)
        .arg(fds.to_arg())
        .env_clear()
        .stdin(if req.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let inherit = [fds.plan, fds.report, fds.control];
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl(2),
    // which is async-signal-safe; it touches no memory besides the copied fd array.
    unsafe {
        cmd.pre_exec(move || {
            for fd in inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| SandboxError::HelperSpawn {
        path: helper_path.clone(),
        source,
    })?;
    drop((child_plan, child_rep, child_ctl));
    guard.helper_pid = child.id().and_then(|p| i32::try_from(p).ok());
    guard.control = Some(ctl_w);

    // Plan and stdin writers.
    let plan_tx = pipe::Sender::from_owned_fd(plan_w).map_err(|source| SandboxError::HelperIo {
        what: "plan pipe",
        source,
    })?;
    tokio::spawn(write_all_and_close(plan_tx, plan_bytes));
    if let (Some(data), Some(stdin)) = (req.stdin.clone(), child.stdin.take()) {
        tokio::spawn(write_all_and_close(stdin, data));
    }
    let out_cap = Arc::new(Mutex::new(Capture::new(req.limits.stdout_cap.bytes())));
    let err_cap = Arc::new(Mutex::new(Capture::new(req.limits.stderr_cap.bytes())));
    let out_task = child
        .stdout
        .take()
        .map(|s| tokio::spawn(capture(s, out_cap.clone())));
    let err_task = child
        .stderr
        .take()
        .map(|s| tokio::spawn(capture(s, err_cap.clone())));

    // Read the helper's reports until it exits.
    let rep_rx = pipe::Receiver::from_owned_fd(rep_r).map_err(|source| SandboxError::HelperIo {
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
                    Ok(HelperMsg::Payload { .. }) => {}
                    Ok(HelperMsg::SetupError { code, message }) => setup_error = Some((code, message)),
                    Ok(HelperMsg::Final(r)) => final_report = Some(r),
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
    let status = child
        .wait()
        .await
        .map_err(|source| SandboxError::Wait { source })?;
    let duration = started.elapsed();
    guard.control = None;

    // Output: the tree is dead, so the pipes are at EOF; bound the wait anyway.
    for task in [out_task, err_task].into_iter().flatten() {
        let abort = task.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, task).await.is_err() {
            abort.abort();
        }
    }
    let (stdout, stdout_bytes, stdout_truncated) = take_capture(&out_cap);
    let (stderr, stderr_bytes, stderr_truncated) = take_capture(&err_cap);

    // Cleanup before answering: no cgroup and no workspace outlive the run.
    let kept_workspace = guard.finish();

    if let Some((code, message)) = setup_error {
        return Err(SandboxError::InHelper {
            code: SandboxError::known_code(&code),
            message,
        });
    }
    let Some(report) = final_report else {
        return Err(SandboxError::HelperDied {
            status: status.to_string(),
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
        enforcement.gaps.extend(process_tier_gaps(req));
    }

    let timed_out = report.timed_out || (backstop_fired && cancel_reason.is_none());
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
        }),
        network_denials: 0,
    })
}

/// What the process tier never enforces, in words (see README).
fn process_tier_gaps(req: &ExecRequest) -> Vec<String> {
    let mut g = vec![
        "isolation: the process tier is not a security boundary: same uid, whole host filesystem visible and writable where the uid may write, host processes visible".to_string(),
    ];
    match &req.network {
        NetworkMode::Full => {}
        NetworkMode::None => g.push("network: `none` requested but the process tier cannot restrict network; the program has the host's network".into()),
        NetworkMode::Allowlist { .. } => g.push("network: `allowlist` requested but the process tier has no egress proxy; the program has the host's network".into()),
    }
    if req.input_dir.is_some() {
        g.push("input: the input directory is not made read-only by the process tier".into());
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
struct Workspace {
    dir: tempfile::TempDir,
    paths: WorkspacePaths,
}

impl Workspace {
    fn create(root: &Path, req: &ExecRequest) -> Result<Workspace, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix("sandboxio-")
            .tempdir_in(root)
            .map_err(|source| SandboxError::WorkspaceCreate {
                path: root.to_path_buf(),
                source,
            })?;
        let ws = dir.path().to_path_buf();
        let mkdir = |p: &Path| {
            std::fs::create_dir_all(p).map_err(|source| SandboxError::WorkspaceWrite {
                path: p.to_path_buf(),
                source,
            })
        };
        let tmp = ws.join("tmp");
        mkdir(&tmp)?;
        let input_dir = match &req.input_dir {
            Some(d) => d.clone(),
            None => {
                let d = ws.join("input");
                mkdir(&d)?;
                d
            }
        };
        let output_dir = match &req.output_dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|source| SandboxError::OutputDir {
                    path: d.clone(),
                    source,
                })?;
                d.clone()
            }
            None => {
                let d = ws.join("output");
                mkdir(&d)?;
                d
            }
        };
        for (name, contents) in &req.files {
            let rel = plan::validate_file_name(name)?;
            let path = ws.join(rel);
            if let Some(parent) = path.parent() {
                mkdir(parent)?;
            }
            std::fs::write(&path, contents)
                .map_err(|source| SandboxError::WorkspaceWrite { path, source })?;
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
            Some(ws.keep())
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
                let deadline = Instant::now() + BACKSTOP_GRACE;
                while process_running(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if process_running(pid) {
                    hard_kill(Some(pid), cgroup.as_ref());
                }
            }
            if let Some(cg) = &cgroup {
                let _ = cgroup::remove(cg);
            }
            if let Some(ws) = workspace {
                if keep {
                    let _ = ws.keep();
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

/// Whether `pid` is alive and not a zombie.
fn process_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Last resort from the supervisor: kill the helper's process group and the cgroup.
fn hard_kill(helper_pid: Option<i32>, cg: Option<&CgroupPlan>) {
    if let Some(cg) = cg {
        cgroup::kill(cg);
    }
    if let Some(pid) = helper_pid.filter(|p| *p > 1) {
        // SAFETY: kill(2) with integers; the helper leads its own session and process group
        // (setsid), so -pid names exactly the helper's group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

fn send_cancel(fd: &OwnedFd) {
    let b = [CANCEL_BYTE];
    // SAFETY: writing one byte from a local array to a pipe we own; a full or closed pipe
    // only makes write fail, which is fine (the helper is already stopping).
    unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1) };
}

fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SandboxError::Pipe {
            source: last_os_error(),
        });
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn dup_high(fd: &OwnedFd) -> Result<OwnedFd, SandboxError> {
    // SAFETY: F_DUPFD_CLOEXEC duplicates an fd we own onto the lowest free number >= 10.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH_FD) };
    if n < 0 {
        return Err(SandboxError::Pipe {
            source: last_os_error(),
        });
    }
    // SAFETY: `n` is a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

async fn write_all_and_close<W: tokio::io::AsyncWrite + Unpin>(mut w: W, data: Vec<u8>) {
    // The helper or program may exit without reading everything (EPIPE): not an error.
    let _ = w.write_all(&data).await;
    let _ = w.shutdown().await;
}

struct Capture {
    buf: Vec<u8>,
    cap: u64,
    total: u64,
}

impl Capture {
    fn new(cap: u64) -> Self {
        Capture {
            buf: Vec::new(),
            cap,
            total: 0,
        }
    }
}

/// Read everything; keep the first `cap` bytes, count and drop the rest.
async fn capture<R: AsyncRead + Unpin>(mut r: R, into: Arc<Mutex<Capture>>) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Ok(mut c) = into.lock() else { break };
        let room = usize::try_from(c.cap.saturating_sub(c.buf.len() as u64)).unwrap_or(usize::MAX);
        let keep = room.min(n);
        c.buf.extend_from_slice(&chunk[..keep]);
        c.total += n as u64;
    }
}

fn take_capture(c: &Arc<Mutex<Capture>>) -> (String, u64, bool) {
    match c.lock() {
        Ok(mut c) => {
            let buf = std::mem::take(&mut c.buf);
            let truncated = c.total > buf.len() as u64;
            (
                String::from_utf8_lossy(&buf).into_owned(),
                c.total,
                truncated,
            )
        }
        Err(_) => (String::new(), 0, false),
    }
}
