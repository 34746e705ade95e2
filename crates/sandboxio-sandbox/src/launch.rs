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
use std::os::fd::AsRawFd;
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
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
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
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = envs.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
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

    let mut errpipe = [0i32; 2];
    // SAFETY: `errpipe` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(errpipe.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SandboxError::Pipe {
            source: last_os_error(),
        });
    }
    let [err_r, err_w] = errpipe;

    let mut cloned_into = false;
    let mut pid = -1;
    if let Some(fd) = &into {
        // SAFETY: as for fork below: the helper is single-threaded and the child ends in
        // execve or _exit (`child`).
        if let Ok(p) = unsafe { cgroup::fork_into(0, fd.as_raw_fd()) } {
            pid = p;
            cloned_into = true;
        }
    }
    if !cloned_into {
        // SAFETY: the helper is single-threaded, so the child may run any code; it only
        // uses memory prepared above and ends in execve or _exit.
        pid = unsafe { libc::fork() };
    }
    if pid < 0 {
        let source = last_os_error();
        // SAFETY: closing the two fds this function just created.
        unsafe {
            libc::close(err_r);
            libc::close(err_w);
        }
        return Err(SandboxError::Fork { source });
    }
    if pid == 0 {
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
        // SAFETY: we are in the freshly forked child of the single-threaded helper; `c`
        // only borrows memory prepared before fork, and `child` never returns.
        unsafe { child(&c, err_w) }
    }
    // SAFETY: closing our copy of the write end; the child holds its own.
    unsafe { libc::close(err_w) };
    let mut buf = [0u8; 5];
    let mut got = 0usize;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of `buf`, within its bounds.
        let n = unsafe { libc::read(err_r, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 && last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += usize::try_from(n).unwrap_or(0);
    }
    // SAFETY: closing the read end created above.
    unsafe { libc::close(err_r) };
    if got == 0 {
        return Ok(pid);
    }
    // The child failed before exec: reap it and say why.
    let mut status = 0;
    // SAFETY: waiting for our own child; `status` is a valid int.
    unsafe { libc::waitpid(pid, &mut status, 0) };
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
fn fail_errno(err_w: i32, stage: Stage, errno: i32) -> ! {
    let e = errno.to_ne_bytes();
    let msg = [stage.code(), e[0], e[1], e[2], e[3]];
    // SAFETY: writing 5 bytes from a local array to our error pipe, then leaving the child
    // without running any destructor or atexit handler of the helper.
    unsafe {
        libc::write(err_w, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// [`fail_errno`] with the errno the last failed syscall left.
fn fail(err_w: i32, stage: Stage) -> ! {
    fail_errno(
        err_w,
        stage,
        last_os_error().raw_os_error().unwrap_or(libc::EINVAL),
    )
}

fn prctl(option: libc::c_int, arg: libc::c_ulong) -> libc::c_int {
    // SAFETY: the prctl options used here (CAPBSET_READ/DROP, NO_NEW_PRIVS) take integer
    // arguments only and touch no memory of ours.
    unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    }
}

/// The payload side of fork. Never returns.
///
/// # Safety
/// Must be called only in the child right after `fork()`/`clone3()` of the single-threaded
/// helper, with `c` borrowing memory prepared before it: the function makes raw syscalls
/// only and ends in `execve` or `_exit`.
unsafe fn child(c: &Child<'_>, err_w: i32) -> ! {
    let s = c.steps;
    // SAFETY: restoring the signal state inherited from the helper with valid values; the
    // tty calls take integer arguments.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, c.old_mask, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if c.tty {
            // Its own session, with the pseudo-terminal on fd 0 as controlling terminal.
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
        }
    }
    for path in c.cgroup_procs {
        // SAFETY: valid C string; writing "0" (this single-threaded process) to its v1
        // `tasks` or cgroup2 `cgroup.procs` file, from a static buffer.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            fail(err_w, Stage::JoinCgroup);
        }
        // SAFETY: as above; `fd` was just opened.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            fail(err_w, Stage::JoinCgroup);
        }
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(fd) };
    }
    if crate::rlimit::lower_all(s.rlimits).is_err() {
        fail(err_w, Stage::SetRlimit);
    }
    // SAFETY: valid C string.
    if unsafe { libc::chdir(c.cwd.as_ptr()) } < 0 {
        fail(err_w, Stage::Chdir);
    }
    if let Some(confine) = &s.confine {
        if let Some(id) = confine.run_as {
            // Root: empty the bounding set while we still may (CAP_SETPCAP), then become the
            // fresh id; leaving uid 0 clears permitted/effective capabilities (no KEEP_CAPS).
            for cap in 0..64 {
                if prctl(libc::PR_CAPBSET_READ, cap) < 0 {
                    break;
                }
                if prctl(libc::PR_CAPBSET_DROP, cap) < 0 {
                    fail(err_w, Stage::DropBoundingSet);
                }
            }
            // SAFETY: setgroups with an empty list (no pointer is read).
            if unsafe { libc::setgroups(0, std::ptr::null()) } < 0 {
                fail(err_w, Stage::SetGroups);
            }
            // SAFETY: integer arguments only.
            if unsafe { libc::setresgid(id, id, id) } < 0 {
                fail(err_w, Stage::SetResGid);
            }
            // SAFETY: integer arguments only.
            if unsafe { libc::setresuid(id, id, id) } < 0 {
                fail(err_w, Stage::SetResUid);
            }
        }
        // Ambient set cleared, then effective/permitted/inheritable set to zero (allowed
        // for any process: it only lowers).
        if let Err(e) = crate::caps::clear_ambient() {
            fail_errno(err_w, Stage::ClearAmbient, e);
        }
        if let Err(e) = crate::caps::zero_sets() {
            fail_errno(err_w, Stage::CapSet, e);
        }
    }
    if s.no_new_privs && prctl(libc::PR_SET_NO_NEW_PRIVS, 1) < 0 {
        fail(err_w, Stage::NoNewPrivs);
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
        // Everything but stdio and the (close-on-exec) error pipe closes at exec.
        let cloexec = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
        // SAFETY: integer arguments only.
        if unsafe { libc::close_range(3, u32::MAX, cloexec) } < 0 {
            fail(err_w, Stage::CloseFds);
        }
        if let Err(e) = seccomp::install(confine.filter) {
            fail_errno(err_w, Stage::Seccomp, e);
        }
    }
    // The most telling errno: one other than "not there" if any candidate gave one; a
    // single candidate's own errno otherwise.
    let mut best = None;
    let mut last = libc::ENOENT;
    for cand in s.candidates {
        // SAFETY: NUL-terminated argv/envp arrays of valid C strings, prepared before fork.
        unsafe { libc::execve(cand.as_ptr(), c.argv.as_ptr(), c.envp.as_ptr()) };
        last = last_os_error().raw_os_error().unwrap_or(libc::ENOENT);
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
