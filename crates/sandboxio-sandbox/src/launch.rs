//! The payload launcher of the process and landlock tiers (helper side): one fork, one child
//! function, one error pipe. The namespace tier starts its own init instead (`ns::apply`), a
//! different process tree, but reports failures with the same [`Stage`].
//!
//! Fixed order in the payload child; the bracketed steps run only when [`Steps`] asks:
//! signal mask and SIGPIPE reset, [`setsid` + controlling tty], join cgroups, rlimits, chdir,
//! [confine: empty the bounding set and switch to the fresh ids (root only), clear ambient
//! and zero the capability sets], [`no_new_privs`], [confine: Landlock, close fds, seccomp],
//! execve of each candidate path in turn.
//!
//! Everything the child touches is prepared here before fork ([`Child`]); the child makes
//! raw syscalls only (no allocation, no locks) and ends in `execve` or `_exit`. A failed step
//! writes 5 bytes over the close-on-exec pipe: the [`Stage`] code and the errno (native
//! endian); an empty read means `execve` succeeded.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::cgroup;
use crate::error::{last_os_error, SandboxError};
use crate::helper::{attach_dirs, clone_into_fd};
use crate::ns::landlock;
use crate::ns::restriction;
use crate::ns::seccomp;
use crate::ns::NsError;
use crate::plan::{cstring, SandboxPlan};
use crate::stage::Stage;
use crate::sys;
use crate::sys::proc::CStrArray;

/// The landlock tier's extra steps, prepared before fork.
pub(crate) struct Confine<'a> {
    /// uid and gid to switch to (the helper is root), after emptying the bounding set.
    pub run_as: Option<u32>,
    pub landlock: &'a landlock::Prepared,
    pub filter: &'a [seccomp::SockFilter],
}

/// What differs between the tiers: plain data prepared before fork.
pub(crate) struct Steps<'a> {
    /// Paths to `execve`, in order (the process tier resolves one; the landlock tier tries
    /// each PATH entry because it cannot look into the host tree first).
    pub candidates: &'a [CString],
    /// Limits to lower (never raise), soft and hard.
    pub rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    pub no_new_privs: bool,
    /// `None`: the process tier (nothing past `no_new_privs`).
    pub confine: Option<Confine<'a>>,
}

/// Everything the payload child reads, borrowed from memory prepared before fork.
struct Child<'a> {
    old_mask: &'a libc::sigset_t,
    tty: bool,
    cgroup_procs: &'a [CString],
    cwd: &'a CString,
    argv: &'a CStrArray<'a>,
    envp: &'a CStrArray<'a>,
    steps: &'a Steps<'a>,
}

/// Forks the payload of the process or landlock tier (from the single-threaded helper) and
/// returns its pid once `execve` succeeded. `old_mask` is the signal mask to restore in it.
pub(crate) fn spawn_payload(
    plan: &SandboxPlan,
    old_mask: &libc::sigset_t,
    steps: &Steps<'_>,
) -> Result<i32, SandboxError> {
    let args = plan.argv_cstrings()?;
    let envs = plan.env_cstrings()?;
    let argv = CStrArray::new(&args);
    let envp = CStrArray::new(&envs);
    let cwd = cstring(plan.cwd.as_os_str().as_bytes())?;
    let procs_files = |dirs: Vec<PathBuf>| -> Result<Vec<CString>, SandboxError> {
        dirs.iter()
            .map(|d| cstring(cgroup::self_join_file(d).as_os_str().as_bytes()))
            .collect()
    };
    // The payload moves itself (writes "0": v1 `tasks`, cgroup2 `cgroup.procs`) into only
    // what it neither inherits from the helper nor gets from clone3(CLONE_INTO_CGROUP); the
    // second list is the fallback when the kernel refuses clone3.
    let into = clone_into_fd(plan);
    let procs_if_cloned_into = procs_files(attach_dirs(plan, true))?;
    let procs_if_forked = procs_files(attach_dirs(plan, false))?;

    let (err_r, err_w) = sys::fd::pipe().map_err(|e| SandboxError::Pipe {
        source: std::io::Error::from_raw_os_error(e),
    })?;

    // The helper is single-threaded (`fork_child` checks it): the child may use the memory
    // prepared above; `child` ends in execve or _exit. On failure both pipe ends close.
    let forked = sys::proc::fork_child(0, into.as_ref().map(|fd| fd.as_raw_fd()), |cloned_into| {
        let c = Child {
            old_mask,
            tty: plan.tty,
            cgroup_procs: if cloned_into {
                &procs_if_cloned_into
            } else {
                &procs_if_forked
            },
            cwd: &cwd,
            argv: &argv,
            envp: &envp,
            steps,
        };
        child(&c, err_w.as_fd())
    });
    let pid = match forked {
        Ok((pid, _)) => pid,
        Err(e) => {
            drop(err_r);
            drop(err_w);
            return Err(SandboxError::Fork {
                source: std::io::Error::from_raw_os_error(e),
            });
        }
    };
    // Our copy of the write end; the child holds its own.
    drop(err_w);
    let mut buf = [0u8; 5];
    let mut got = 0usize;
    while got < buf.len() {
        match sys::fd::read(err_r.as_fd(), &mut buf[got..]) {
            Err(libc::EINTR) => continue,
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    drop(err_r);
    if got == 0 {
        return Ok(pid);
    }
    // The child failed before exec: reap it and say why.
    let _ = sys::proc::waitpid(pid);
    if got < buf.len() {
        return Err(SandboxError::HelperProtocol {
            why: format!("the payload child wrote {got} of its 5 failure bytes"),
        });
    }
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    match Stage::from_u8(buf[0]) {
        Some(stage) => Err(child_error(plan, steps.confine.is_some(), stage, errno)),
        None => Err(SandboxError::HelperProtocol {
            why: format!("the payload child reported unknown stage code {}", buf[0]),
        }),
    }
}

/// The error a user sees for a payload child that failed at `stage` with `errno`. The
/// landlock tier (`confined`) names the stage in `SBX_E1434`; the process tier keeps the
/// error of the step's syscall.
fn child_error(plan: &SandboxPlan, confined: bool, stage: Stage, errno: i32) -> SandboxError {
    let source = std::io::Error::from_raw_os_error(errno);
    match stage {
        Stage::Exec => {
            return SandboxError::Exec {
                program: plan.argv.first().cloned().unwrap_or_default(),
                source,
            }
        }
        Stage::NoLandlock => return NsError::LandlockRequired.into(),
        Stage::Seccomp => {
            let step = restriction::Step::InstallSeccomp;
            if let Some(restriction) =
                restriction::diagnose(step, errno, &restriction::HostFacts::read())
            {
                return NsError::HostRestricted {
                    restriction,
                    step,
                    errno,
                }
                .into();
            }
        }
        _ => {}
    }
    if confined {
        return SandboxError::FallbackSetup {
            stage: stage.describe(),
            source,
        };
    }
    match stage {
        Stage::JoinCgroup => SandboxError::CgroupWrite {
            path: PathBuf::from("cgroup.procs"),
            value: "0".into(),
            source,
        },
        Stage::SetRlimit => SandboxError::Setrlimit {
            resource: "payload limits",
            source,
        },
        Stage::Chdir => SandboxError::Chdir {
            path: plan.cwd.clone(),
            source,
        },
        Stage::NoNewPrivs => SandboxError::Prctl {
            option: "PR_SET_NO_NEW_PRIVS",
            source,
        },
        // Steps the process tier does not take; named like the landlock tier's.
        other => SandboxError::FallbackSetup {
            stage: other.describe(),
            source,
        },
    }
}

/// Writes the stage and `errno` to the error pipe and leaves. Async-signal-safe.
fn fail_errno(err_w: BorrowedFd<'_>, stage: Stage, errno: i32) -> ! {
    let e = errno.to_ne_bytes();
    let msg = [stage.code(), e[0], e[1], e[2], e[3]];
    // Then leave the child without running any destructor or atexit handler of the helper.
    let _ = sys::fd::write(err_w, &msg);
    sys::proc::exit_now(127)
}

/// [`fail_errno`] with the errno the last failed syscall left.
fn fail(err_w: BorrowedFd<'_>, stage: Stage) -> ! {
    fail_errno(
        err_w,
        stage,
        last_os_error().raw_os_error().unwrap_or(libc::EINVAL),
    )
}

/// The payload side of fork, in the child of the single-threaded helper, with `c`
/// borrowing memory prepared before it: raw syscalls only (no allocation, no lock), ends
/// in `execve` or `_exit`. Never returns.
fn child(c: &Child<'_>, err_w: BorrowedFd<'_>) -> ! {
    let s = c.steps;
    // Restore the signal state inherited from the helper.
    let _ = sys::signal::set_mask(c.old_mask);
    let _ = sys::signal::set_default(libc::SIGPIPE);
    if c.tty {
        // Its own session, with the pseudo-terminal on fd 0 as controlling terminal.
        let _ = sys::proc::setsid();
        let _ = sys::pty::set_controlling_tty(0);
    }
    for path in c.cgroup_procs {
        // Writing "0" (this single-threaded process) to its v1 `tasks` or cgroup2
        // `cgroup.procs` file; the fd closes when dropped.
        let fd = match sys::fd::open(path, libc::O_WRONLY | libc::O_CLOEXEC, 0) {
            Ok(fd) => fd,
            Err(e) => fail_errno(err_w, Stage::JoinCgroup, e),
        };
        match sys::fd::write(fd.as_fd(), b"0") {
            Ok(1) => {}
            Err(e) => fail_errno(err_w, Stage::JoinCgroup, e),
            Ok(_) => fail(err_w, Stage::JoinCgroup),
        }
    }
    if crate::rlimit::lower_all(s.rlimits).is_err() {
        fail(err_w, Stage::SetRlimit);
    }
    if let Err(e) = sys::fs::chdir(c.cwd) {
        fail_errno(err_w, Stage::Chdir, e);
    }
    if let Some(confine) = &s.confine {
        if let Some(id) = confine.run_as {
            // Root: empty the bounding set while we still may (CAP_SETPCAP), then become the
            // fresh id; leaving uid 0 clears permitted/effective capabilities (no KEEP_CAPS).
            for cap in 0..64 {
                if sys::caps::capbset_read(cap).is_err() {
                    break;
                }
                if let Err(e) = sys::caps::capbset_drop(cap) {
                    fail_errno(err_w, Stage::DropBoundingSet, e);
                }
            }
            if let Err(e) = sys::ids::setgroups_empty() {
                fail_errno(err_w, Stage::SetGroups, e);
            }
            if let Err(e) = sys::ids::setresgid(id) {
                fail_errno(err_w, Stage::SetResGid, e);
            }
            if let Err(e) = sys::ids::setresuid(id) {
                fail_errno(err_w, Stage::SetResUid, e);
            }
        }
    }
    // The program dies with the helper that supervises it (set after the change of ids
    // above, which clears it; kept across exec). A helper that died before this is seen
    // by its end of the error pipe, closed.
    if let Err(e) = sys::proc::set_parent_death_signal(libc::SIGKILL) {
        fail_errno(err_w, Stage::SetParentDeathSignal, e);
    }
    if sys::fd::peer_closed(err_w) {
        sys::proc::exit_now(1);
    }
    if s.confine.is_some() {
        // Ambient set cleared, then effective/permitted/inheritable set to zero (allowed
        // for any process: it only lowers).
        if let Err(e) = crate::caps::clear_ambient() {
            fail_errno(err_w, Stage::ClearAmbient, e);
        }
        if let Err(e) = crate::caps::zero_sets() {
            fail_errno(err_w, Stage::CapSet, e);
        }
    }
    if s.no_new_privs {
        if let Err(e) = sys::proc::set_no_new_privs() {
            fail_errno(err_w, Stage::NoNewPrivs, e);
        }
    }
    if let Some(confine) = &s.confine {
        match landlock::apply(confine.landlock) {
            Ok(Some(_)) => {}
            Ok(None) => fail_errno(err_w, Stage::NoLandlock, libc::ENOSYS),
            Err(
                landlock::Failure::CreateRuleset(e)
                | landlock::Failure::OpenPath(_, e)
                | landlock::Failure::AddRule(_, e)
                | landlock::Failure::RestrictSelf(e),
            ) => fail_errno(err_w, Stage::Landlock, e),
        }
    }
    // In every tier, everything but stdio and the (close-on-exec) error pipe closes at exec:
    // no descriptor the caller's shell or harness left open reaches the program.
    if let Err(e) = sys::fd::set_cloexec_from(3) {
        fail_errno(err_w, Stage::CloseFds, e);
    }
    if let Some(confine) = &s.confine {
        if let Err(e) = seccomp::install(confine.filter) {
            fail_errno(err_w, Stage::Seccomp, e);
        }
    }
    // The most telling errno: one other than "not there" if any candidate gave one; a
    // single candidate's own errno otherwise.
    let mut best = None;
    let mut last = libc::ENOENT;
    for cand in s.candidates {
        last = sys::proc::execve(cand, c.argv, c.envp);
        if last != libc::ENOENT && last != libc::ENOTDIR {
            best = Some(last);
        }
    }
    let errno = match best {
        Some(e) => e,
        None if s.candidates.len() == 1 => last,
        None => libc::ENOENT,
    };
    fail_errno(err_w, Stage::Exec, errno)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::tier::TierRequest;
    use sandboxio_core::{ErrorCode, ExecRequest};

    fn plan() -> SandboxPlan {
        let paths = crate::plan::WorkspacePaths {
            workspace: "/tmp/ws".into(),
            tmp: "/tmp/ws/tmp".into(),
            input_dir: "/tmp/ws/input".into(),
            output_dir: "/srv/out".into(),
        };
        let req = ExecRequest::new(["prog"]);
        crate::plan::build("id", &req, TierRequest::Process, [], paths, None).unwrap()
    }

    #[test]
    fn process_tier_keeps_the_error_of_each_step() {
        let p = plan();
        let code = |s| child_error(&p, false, s, libc::EPERM).code();
        assert_eq!(code(Stage::JoinCgroup), "SBX_E1419");
        assert_eq!(code(Stage::SetRlimit), "SBX_E1424");
        assert_eq!(code(Stage::Chdir), "SBX_E1428");
        assert_eq!(code(Stage::NoNewPrivs), "SBX_E1425");
        assert_eq!(code(Stage::Exec), "SBX_E1422");
        let e = child_error(&p, false, Stage::Exec, libc::ENOENT);
        assert!(e.to_string().contains("prog"), "{e}");
    }

    #[test]
    fn landlock_tier_names_the_stage() {
        let p = plan();
        let e = child_error(&p, true, Stage::SetRlimit, libc::EPERM);
        assert_eq!(e.code(), "SBX_E1434");
        assert_eq!(
            e.to_string(),
            "landlock tier: payload setup failed at setrlimit"
        );
        let e = child_error(&p, true, Stage::SetResUid, libc::EPERM);
        assert!(e.to_string().ends_with("at setresuid"), "{e}");
        assert_eq!(
            child_error(&p, true, Stage::NoLandlock, 0).code(),
            "SBX_E1469"
        );
        assert_eq!(
            child_error(&p, true, Stage::Exec, libc::ENOENT).code(),
            "SBX_E1422"
        );
    }
}
