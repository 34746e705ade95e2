//! Process calls: ids, signals, reaping, and the few forks whose child runs a fixed
//! sequence of raw calls.

use std::io;

/// `geteuid()`.
#[inline]
pub(crate) fn geteuid() -> libc::uid_t {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `getegid()`.
#[inline]
pub(crate) fn getegid() -> libc::gid_t {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// `getuid()`.
#[inline]
pub(crate) fn getuid() -> libc::uid_t {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// `kill(pid, sig)`. Async-signal-safe.
#[inline]
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<(), i32> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    super::cvt0(unsafe { libc::kill(pid, sig) })
}

/// `waitpid(pid, &status, 0)` (blocking, not retried on EINTR): the wait status.
#[inline]
pub(crate) fn waitpid(pid: libc::pid_t) -> Result<libc::c_int, i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    super::cvt(unsafe { libc::waitpid(pid, &mut status, 0) })?;
    Ok(status)
}

/// Forks a child that only calls `unshare(flags)` and `_exit`s with 0 or the errno (1..=255),
/// and reaps it: the child's wait status (0 when the wait itself failed). `Err(errno)`: the
/// fork failed. Sound from a multi-threaded process (the child makes raw calls only).
pub(crate) fn unshare_in_child(flags: libc::c_int) -> Result<libc::c_int, i32> {
    // SAFETY: the child below only calls unshare(2) and _exit(2), both async-signal-safe,
    // and never returns into the caller's code, so forking from a multi-threaded process is
    // sound.
    let pid = super::cvt(unsafe { libc::fork() })?;
    if pid == 0 {
        // SAFETY: in the forked child; see above.
        unsafe {
            let code = if libc::unshare(flags) == 0 {
                0
            } else {
                (*libc::__errno_location()).clamp(1, 255)
            };
            libc::_exit(code)
        }
    }
    Ok(waitpid(pid).unwrap_or(0))
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Fork (with `flags`, e.g. namespace flags) straight into the cgroup2 directory open as
/// `cgroup_fd`: `clone3(CLONE_INTO_CGROUP)` places the child at fork, without the
/// `cgroup.procs` migration. Returns like fork: the child's pid in the parent, 0 in the
/// child. `Err(ENOSYS/E2BIG/EINVAL/...)`: no child was created; the caller forks the old way.
///
/// # Safety
/// Same as `fork()`: the calling process must be single-threaded (or the child must only
/// call async-signal-safe functions), and the child must end in execve or `_exit`.
pub(crate) unsafe fn fork_into(flags: u64, cgroup_fd: i32) -> io::Result<i32> {
    let fd = u64::try_from(cgroup_fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let args = CloneArgs {
        flags: flags | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: fd,
        ..CloneArgs::default()
    };
    // SAFETY: `args` is a valid clone_args of the size passed; no stack is given, so the
    // child runs on a copy of the caller's stack like after fork (the caller's contract).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_unshare_child_reports_success_and_failure() {
        // unshare(0) changes nothing and succeeds.
        let st = unshare_in_child(0).unwrap();
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "{st}");
        // An unknown flag is refused with EINVAL.
        let st = unshare_in_child(1).unwrap();
        assert!(libc::WIFEXITED(st), "{st}");
        assert_eq!(libc::WEXITSTATUS(st), libc::EINVAL);
    }

    #[test]
    fn signals_and_waits_report_the_errno() {
        assert_eq!(kill(libc::pid_t::MAX, 0), Err(libc::ESRCH));
        assert_eq!(waitpid(libc::pid_t::MAX), Err(libc::ECHILD));
    }
}
