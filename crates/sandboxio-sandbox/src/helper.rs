//! The helper: a small single-threaded process that the supervisor starts by re-executing
//! a binary with [`HELPER_ARG`]. It reads the plan from fd 3, becomes a subreaper in its own
//! session, forks the payload, waits for it, and kills the whole tree on timeout, cancel or
//! supervisor death, and after the payload exits. It reports over fd 4.
//!
//! The payload of the process and landlock tiers is started by [`crate::launch`]; the
//! namespace tier's init by [`crate::ns`].

use std::collections::{BTreeMap, VecDeque};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sandboxio_core::{ErrorCode, ExitStatus};

use crate::cgroup;
use crate::error::SandboxError;
use crate::plan::cstring;
use crate::plan::{SandboxPlan, MAX_PLAN_BYTES};
use crate::protocol::{FinalReport, HelperFds, HelperMsg, CANCEL_BYTE};
use crate::sys;
use crate::tier::TierPlan;

/// The first argument that turns a binary into the helper.
pub const HELPER_ARG: &str = "__sandboxio-helper";

/// `argv[3]` of a pooled namespace helper: it reads the pool's base plan first (framed by
/// its length) and pre-builds its namespaces before the request's plan arrives.
pub const PREBUILD_ARG: &str = "prebuild";

/// Whether this process was started as the helper (`argv[1] == HELPER_ARG`).
pub fn is_helper_invocation() -> bool {
    crate::build_id::keep_section();
    std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(HELPER_ARG))
}

/// Run the helper and exit. Call it first thing in `main`, before any runtime or thread
/// starts, when [`is_helper_invocation`] is true.
pub fn main() -> ! {
    let mut rep = Reporter::new();
    let code = match run(&mut rep) {
        Ok(()) => 0,
        Err(e) => {
            rep.send(&HelperMsg::SetupError {
                code: e.code().to_string(),
                message: with_causes(&e),
            });
            1
        }
    };
    std::process::exit(code)
}

/// The error's message followed by its causes (`could not execute `x`: No such file or
/// directory (os error 2)`): the supervisor gets a string, not the error value, so the
/// causes would otherwise be lost at the process boundary.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

struct Reporter {
    out: Option<File>,
}

impl Reporter {
    fn new() -> Self {
        Reporter { out: None }
    }
    fn send(&mut self, msg: &HelperMsg) {
        if let Some(f) = self.out.as_mut() {
            if let Ok(mut line) = serde_json::to_vec(msg) {
                line.push(b'\n');
                // The supervisor may be gone (EPIPE); nothing else to tell then.
                let _ = f.write_all(&line);
            }
        }
    }
}

/// Takes the inherited descriptor `fd` (one of the fixed fds the supervisor gave the helper)
/// and makes it close-on-exec, so the payload never inherits the helper's pipes.
fn claim_fd(fd: i32) -> Result<OwnedFd, SandboxError> {
    sys::fd::claim_inherited(fd).map_err(|_| SandboxError::HelperFds { fd })
}

/// The error of the `prctl` option `name` that failed with `errno`.
fn prctl_failed(name: &'static str) -> impl FnOnce(i32) -> SandboxError {
    move |e| SandboxError::Prctl {
        option: name,
        source: std::io::Error::from_raw_os_error(e),
    }
}

fn run(rep: &mut Reporter) -> Result<(), SandboxError> {
    let fds = std::env::args()
        .nth(2)
        .and_then(|a| HelperFds::parse(&a))
        .ok_or(SandboxError::HelperFds { fd: -1 })?;
    rep.out = Some(File::from(claim_fd(fds.report)?));
    let plan_fd = claim_fd(fds.plan)?;
    let control = claim_fd(fds.control)?;
    // Kept open until the run ends: the namespace tier hands its number to the init.
    let egress = fds.egress.map(claim_fd).transpose()?;
    // Learn when the supervisor thread that spawned us dies (handled like a cancel).
    sys::proc::set_parent_death_signal(libc::SIGTERM).map_err(prctl_failed("PR_SET_PDEATHSIG"))?;

    let mut plan_in = File::from(plan_fd);
    let prebuild = std::env::args().nth(3).as_deref() == Some(PREBUILD_ARG);
    let warm = if prebuild {
        let base = read_framed_plan(&mut plan_in)?;
        session_and_subreaper()?;
        let into = clone_into_fd(&base);
        let join = self_join(&base)?;
        let w = crate::ns::prebuild(
            &base,
            into.as_ref().map(AsRawFd::as_raw_fd),
            &join,
            |pid, c| attach_cgroups(&base, pid, c),
        )?;
        drop((into, join));
        rep.send(&HelperMsg::Prebuilt);
        Some(w)
    } else {
        None
    };

    let plan = read_plan(plan_in)?;
    if warm.is_none() {
        session_and_subreaper()?;
    }
    let signals = Signals::block()?;

    let (pid, ns_child) = match (&plan.tier, warm) {
        (TierPlan::Namespace(_), Some(w)) => {
            let child = w.exec(&plan, crate::ns::rlimits_from(&plan.rlimits))?;
            (child.pid(), Some(child))
        }
        (tier, Some(_)) => {
            return Err(SandboxError::UnsupportedTier {
                tier: tier.tier(),
                why: "a pre-built helper serves only the namespace tier",
            })
        }
        (TierPlan::Process, None) => (spawn_process(&plan, &signals)?, None),
        (TierPlan::Namespace(_), None) => {
            let into = clone_into_fd(&plan);
            let join = self_join(&plan)?;
            let child = crate::ns::spawn_plan(
                &plan,
                into.as_ref().map(AsRawFd::as_raw_fd),
                &join,
                egress.as_ref().map(AsRawFd::as_raw_fd),
                |pid, cloned_into| attach_cgroups(&plan, pid, cloned_into),
            )?;
            drop((into, join));
            (child.pid(), Some(child))
        }
        (TierPlan::Landlock(_), None) => (crate::fallback::spawn(&plan, &signals.old_mask)?, None),
    };
    // No `payload` message here: the supervisor has no use for the pid, and waking it while
    // the payload starts costs a context switch on the hot path.
    let mut report = supervise(&plan, pid, &signals, control.as_fd())?;
    if let Some(child) = ns_child {
        // The init was reaped in `supervise`; its report holds the payload's own status.
        let outcome = child.finish()?;
        if let Some(exit) = outcome.exit {
            report.exit = exit;
        }
        report.enforcement = Some(outcome.enforcement);
        report.copy_out_error = outcome.copy_error;
    }
    if matches!(plan.tier, TierPlan::Landlock(_)) {
        // The whole tree is dead (supervise waits for ECHILD): copy the output out.
        let (enforcement, copy_error) = crate::fallback::finish(&plan)?;
        report.enforcement = Some(enforcement);
        report.copy_out_error = copy_error;
    }
    rep.send(&HelperMsg::Final(Box::new(report)));
    Ok(())
}

/// Move `pid` (the namespace init, before it is released) into the cgroup2 sandbox
/// directory it was not cloned into, if any. The v1 ones it enters by itself ([`self_join`]);
/// none when a pooled helper already sits in them (no migration at all).
fn attach_cgroups(plan: &SandboxPlan, pid: i32, cloned_into: bool) -> Result<(), SandboxError> {
    let by_pid: Vec<PathBuf> = attach_dirs(plan, cloned_into)
        .into_iter()
        .filter(|d| !cgroup::is_v1_dir(d))
        .collect();
    cgroup::join(&by_pid, pid)
}

/// The `tasks` files of the v1 sandbox cgroups a new namespace init has to enter, opened
/// here for it to move itself in as soon as it is released (a pid written from outside
/// waits out an RCU grace period; see `cgroup::self_join_file`).
fn self_join(plan: &SandboxPlan) -> Result<Vec<(OwnedFd, CString)>, SandboxError> {
    cgroup::open_self_join(&attach_dirs(plan, true))?
        .into_iter()
        .map(|(fd, path)| Ok((fd, cstring(path.as_os_str().as_bytes())?)))
        .collect()
}

/// The sandbox cgroup directories a new child of the helper must still be moved into: all
/// of them except those the helper already sits in (inherited at fork) and, when the child
/// was cloned into it, the cgroup2 leaf.
pub(crate) fn attach_dirs(plan: &SandboxPlan, cloned_into: bool) -> Vec<PathBuf> {
    let Some(cg) = &plan.cgroup else {
        return Vec::new();
    };
    let into = if cloned_into {
        cgroup::clone_into_dir(cg)
    } else {
        None
    };
    cg.dirs
        .iter()
        .filter(|d| !plan.cgroup_joined.contains(d) && Some(d.as_path()) != into)
        .cloned()
        .collect()
}

/// The cgroup2 leaf of the sandbox, opened for `clone3(CLONE_INTO_CGROUP)` (`None`: no such
/// leaf, or it cannot be opened; the child is then attached by a `cgroup.procs` write).
pub(crate) fn clone_into_fd(plan: &SandboxPlan) -> Option<OwnedFd> {
    let dir = cgroup::clone_into_dir(plan.cgroup.as_ref()?)?;
    cgroup::open_dir(dir).ok()
}

/// `setsid` (a session and process group of its own) and `PR_SET_CHILD_SUBREAPER`.
fn session_and_subreaper() -> Result<(), SandboxError> {
    // setsid fails (EPERM) only if we already lead a process group.
    match sys::proc::setsid() {
        Ok(_) | Err(libc::EPERM) => {}
        Err(e) => {
            return Err(SandboxError::Setsid {
                source: std::io::Error::from_raw_os_error(e),
            })
        }
    }
    sys::proc::set_child_subreaper().map_err(prctl_failed("PR_SET_CHILD_SUBREAPER"))
}

/// The pool's base plan: its length (4 bytes, little endian), then that much JSON.
fn read_framed_plan(f: &mut File) -> Result<SandboxPlan, SandboxError> {
    let io = |source| SandboxError::HelperIo {
        what: "reading the base plan",
        source,
    };
    let mut len = [0u8; 4];
    f.read_exact(&mut len).map_err(io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_PLAN_BYTES {
        return Err(SandboxError::PlanTooLarge {
            size: len,
            max: MAX_PLAN_BYTES,
        });
    }
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(io)?;
    serde_json::from_slice(&buf).map_err(|e| SandboxError::PlanDecode { why: e.to_string() })
}

fn read_plan(f: File) -> Result<SandboxPlan, SandboxError> {
    let mut buf = Vec::new();
    f.take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|source| SandboxError::HelperIo {
            what: "reading the plan",
            source,
        })?;
    if buf.len() > MAX_PLAN_BYTES {
        return Err(SandboxError::PlanTooLarge {
            size: buf.len(),
            max: MAX_PLAN_BYTES,
        });
    }
    serde_json::from_slice(&buf).map_err(|e| SandboxError::PlanDecode { why: e.to_string() })
}

/// Blocked signals delivered through a signalfd instead of handlers.
struct Signals {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl Signals {
    fn block() -> Result<Signals, SandboxError> {
        let failed = |what| {
            move |e| SandboxError::Signals {
                what,
                source: std::io::Error::from_raw_os_error(e),
            }
        };
        let set = sys::signal::sigset(&[
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])
        .map_err(failed("sigprocmask"))?;
        let old = sys::signal::sigprocmask(libc::SIG_BLOCK, &set).map_err(failed("sigprocmask"))?;
        let fd = sys::signal::signalfd(&set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
            .map_err(failed("signalfd"))?;
        Ok(Signals { fd, old_mask: old })
    }

    /// Drain pending signals; returns the terminating ones seen.
    fn drain(&self) -> Vec<u32> {
        let mut out = Vec::new();
        while let Ok(info) = sys::signal::read_signal(self.fd.as_fd()) {
            if info.ssi_signo != libc::SIGCHLD as u32 {
                out.push(info.ssi_signo);
            }
        }
        out
    }
}

/// Find `argv[0]` the way execvp would, but in the plan's PATH (not the helper's).
fn resolve_program(plan: &SandboxPlan) -> Result<PathBuf, SandboxError> {
    let prog = &plan.argv[0];
    if prog.contains('/') {
        let p = Path::new(prog);
        return Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            plan.cwd.join(p)
        });
    }
    let path = plan.env.get("PATH").map(String::as_str).unwrap_or("");
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let dir = Path::new(dir);
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            plan.cwd.join(dir)
        };
        let cand = dir.join(prog);
        if let Ok(m) = std::fs::metadata(&cand) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(cand);
            }
        }
    }
    Err(SandboxError::CommandNotFound {
        program: prog.clone(),
    })
}

/// Fork and exec the payload of the process tier. Returns its pid once execve succeeded.
fn spawn_process(plan: &SandboxPlan, signals: &Signals) -> Result<i32, SandboxError> {
    let prog = resolve_program(plan)?;
    let candidates = [cstring(prog.as_os_str().as_bytes())?];
    let rlimits = crate::ns::rlimits_from(&plan.rlimits);
    let steps = crate::launch::Steps {
        candidates: &candidates,
        rlimits: &rlimits,
        no_new_privs: plan.no_new_privs,
        confine: None,
    };
    crate::launch::spawn_payload(plan, &signals.old_mask, &steps)
}

/// Every descendant of this process, found through /proc (children before grandchildren).
fn descendants() -> Vec<(i32, u64)> {
    let me = sys::proc::getpid();
    let mut children: BTreeMap<i32, Vec<(i32, u64)>> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(ppid) = parse_ppid(&stat) {
                let ticks = parse_cpu_ticks(&stat).unwrap_or(0);
                children.entry(ppid).or_default().push((pid, ticks));
            }
        }
    }
    let mut out = Vec::new();
    let mut queue = VecDeque::from([me]);
    while let Some(p) = queue.pop_front() {
        if let Some(kids) = children.get(&p) {
            for &(k, ticks) in kids {
                out.push((k, ticks));
                queue.push_back(k);
            }
        }
    }
    out
}

/// The CPU a process and its reaped children used, in clock ticks: utime, stime, cutime
/// and cstime of `/proc/<pid>/stat` (fields 14 to 17).
pub(crate) fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is f[n - 3].
    let mut sum = 0u64;
    for n in 14..=17 {
        sum = sum.saturating_add(f.get(n - 3)?.parse::<u64>().ok()?);
    }
    Some(sum)
}

/// The ppid field of `/proc/<pid>/stat` (the comm field may contain spaces and parens).
pub(crate) fn parse_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let _state = it.next()?;
    it.next()?.parse().ok()
}

/// Kill the whole tree: cgroup first (atomic where cgroup.kill exists), then every
/// descendant found in /proc. Returns how many descendants were signalled, and the CPU
/// time (ms) they had used: a tree killed at once is never waited for by its own
/// processes, so without a cgroup this is the only count of it (`RUSAGE_CHILDREN` sees
/// only what was waited for).
fn kill_tree(plan: &SandboxPlan) -> (u32, u64) {
    if let Some(cg) = &plan.cgroup {
        cgroup::kill(cg);
    }
    let mut n = 0;
    let mut ticks = 0u64;
    for (pid, t) in descendants() {
        ticks = ticks.saturating_add(t);
        // `pid` is a descendant of this helper.
        if sys::proc::kill(pid, libc::SIGKILL).is_ok() {
            n += 1;
        }
    }
    (n, ticks.saturating_mul(1000) / sys::proc::clock_ticks())
}

fn exit_status(status: i32) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    }
}

fn supervise(
    plan: &SandboxPlan,
    pid: i32,
    signals: &Signals,
    control: BorrowedFd<'_>,
) -> Result<FinalReport, SandboxError> {
    let deadline = Instant::now() + plan.timeout;
    let mut payload_status: Option<i32> = None;
    let mut killing = false;
    let mut timed_out = false;
    let mut cancelled: Option<String> = None;
    let mut leftovers = 0u32;
    // CPU the tree had used when it was killed (see `kill_tree`).
    let mut killed_cpu_ms = 0u64;
    let mut control_open = true;
    loop {
        // Reap everything that exited; orphans of the tree come to us (subreaper).
        let mut no_children = false;
        loop {
            match sys::proc::wait_nohang(-1) {
                Ok(Some((r, status))) => {
                    if r == pid {
                        payload_status = Some(status);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(libc::EINTR) => continue,
                Err(libc::ECHILD) => no_children = true,
                Err(e) => {
                    return Err(SandboxError::Wait {
                        source: std::io::Error::from_raw_os_error(e),
                    })
                }
            }
            break;
        }
        if no_children {
            break;
        }
        if payload_status.is_some() && !killing {
            // The command is done; anything it left behind dies now.
            killing = true;
            let (n, ms) = kill_tree(plan);
            leftovers = n;
            killed_cpu_ms = killed_cpu_ms.max(ms);
        } else if killing {
            killed_cpu_ms = killed_cpu_ms.max(kill_tree(plan).1);
        }
        let now = Instant::now();
        if !killing && now >= deadline {
            timed_out = true;
            killing = true;
            killed_cpu_ms = killed_cpu_ms.max(kill_tree(plan).1);
        }
        let timeout_ms: i32 = if killing {
            5
        } else {
            let left = deadline.saturating_duration_since(now).as_millis() + 1;
            i32::try_from(left).unwrap_or(i32::MAX)
        };
        let mut fds = [
            libc::pollfd {
                fd: signals.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if control_open {
                    control.as_raw_fd()
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        match sys::fd::poll(&mut fds, timeout_ms) {
            Ok(_) => {}
            Err(libc::EINTR) => continue,
            Err(e) => {
                return Err(SandboxError::Poll {
                    source: std::io::Error::from_raw_os_error(e),
                })
            }
        }
        if fds[0].revents != 0 {
            for signo in signals.drain() {
                if cancelled.is_none() {
                    cancelled = Some(format!("helper received signal {signo}"));
                }
                if !killing {
                    killing = true;
                    killed_cpu_ms = killed_cpu_ms.max(kill_tree(plan).1);
                }
            }
        }
        if control_open && fds[1].revents != 0 {
            let mut b = [0u8; 1];
            let r = sys::fd::read(control, &mut b);
            let why = if r == Ok(1) && b[0] == CANCEL_BYTE {
                Some("cancelled by the supervisor")
            } else if r == Ok(0) || fds[1].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                control_open = false;
                Some("the supervisor went away")
            } else {
                None
            };
            if let Some(why) = why {
                if cancelled.is_none() && payload_status.is_none() {
                    cancelled = Some(why.to_string());
                }
                if !killing {
                    killing = true;
                    killed_cpu_ms = killed_cpu_ms.max(kill_tree(plan).1);
                }
            }
        }
    }
    let status = payload_status.ok_or_else(|| SandboxError::HelperProtocol {
        why: "the payload was reaped without its status".into(),
    })?;
    let exit = exit_status(status);
    // Zero when getrusage fails (it cannot for RUSAGE_CHILDREN). A tree killed at its
    // timeout (or cancelled) was not waited for by its own processes: what it had used when
    // it was killed is counted too, never less (the two may overlap, so not their sum).
    let (ru_cpu_ms, ru_peak) = match sys::proc::getrusage(libc::RUSAGE_CHILDREN) {
        Ok(ru) => (
            ((ru.ru_utime.tv_sec as u64 * 1000 + ru.ru_utime.tv_usec as u64 / 1000)
                + (ru.ru_stime.tv_sec as u64 * 1000 + ru.ru_stime.tv_usec as u64 / 1000))
                .max(killed_cpu_ms),
            (ru.ru_maxrss as u64).saturating_mul(1024),
        ),
        Err(_) => (killed_cpu_ms, 0),
    };
    let (cpu, peak, oom, meter) = match &plan.cgroup {
        Some(cg) => {
            let u = cgroup::read_usage(cg);
            let oom = match u.oom_kills {
                Some(n) => n > 0,
                None => {
                    exit == ExitStatus::Signal(libc::SIGKILL) && u.memory_failcnt.unwrap_or(0) > 0
                }
            };
            (
                u.cpu_time_ms.or(Some(ru_cpu_ms)),
                u.peak_memory_bytes.or(Some(ru_peak)),
                oom,
                if u.cpu_time_ms.is_some() {
                    "cgroup"
                } else {
                    "rusage"
                },
            )
        }
        None => (Some(ru_cpu_ms), Some(ru_peak), false, "rusage"),
    };
    Ok(FinalReport {
        exit,
        timed_out,
        cancelled,
        oom_killed: oom,
        cpu_time_ms: cpu,
        peak_memory_bytes: peak,
        meter: meter.to_string(),
        leftovers_killed: leftovers,
        enforcement: None,
        copy_out_error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_the_sum_of_own_and_reaped_childrens_times() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let stat = "42 (a b) c) R 7 42 42 0 -1 4194560 10 0 0 0 150 25 300 5 20 0 1";
        assert_eq!(parse_cpu_ticks(stat), Some(480));
        assert_eq!(parse_cpu_ticks("42 (x) R 7"), None);
    }

    #[test]
    fn ppid_parsing_survives_odd_comm() {
        assert_eq!(parse_ppid("123 (sh) S 45 123 123 0"), Some(45));
        assert_eq!(parse_ppid("123 (a) b) c) R 7 1 1"), Some(7));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn a_setup_error_keeps_its_causes_once() {
        let e = SandboxError::Exec {
            program: "prog".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        let m = with_causes(&e);
        assert!(m.starts_with("could not execute `prog`: "), "{m}");
        assert!(m.ends_with("(os error 13)"), "{m}");
        // A transparent wrapper's message is its cause's: not said twice.
        let inner = std::io::Error::other("boom");
        let ns = SandboxError::from(crate::ns::NsError::Pipe { source: inner });
        let m = with_causes(&ns);
        assert_eq!(m.matches("boom").count(), 1, "{m}");
    }
}
