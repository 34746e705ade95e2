//! Process calls: ids, signals, reaping, and the few forks whose child runs a fixed
//! sequence of raw calls.

use std::ffi::{CStr, CString};
use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;

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

/// `getpid()`.
#[inline]
pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// Clock ticks per second, the unit of the times in `/proc/<pid>/stat` (100 when unknown).
pub(crate) fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a constant of the C library; no pointer is involved.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// `getrusage(who)` (`RUSAGE_SELF`, `RUSAGE_CHILDREN`).
pub(crate) fn getrusage(who: libc::c_int) -> Result<libc::rusage, i32> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is writable memory of an rusage's size and alignment, living across it.
    super::cvt0(unsafe { libc::getrusage(who, ru.as_mut_ptr()) })?;
    // SAFETY: getrusage succeeded and filled `ru` (all-zero before, a valid value too).
    Ok(unsafe { ru.assume_init() })
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when the process exits.
#[inline]
pub(crate) fn pidfd_open(pid: libc::pid_t) -> Result<std::os::fd::OwnedFd, i32> {
    // SAFETY: pidfd_open takes a pid and flags (integers) and returns a new fd or -1.
    super::owned_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
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

/// `waitpid(pid, &status, WNOHANG)`: `Some((pid, status))` for a child reaped, `None` when
/// the ones `pid` names are all still running.
#[inline]
pub(crate) fn wait_nohang(pid: libc::pid_t) -> Result<Option<(libc::pid_t, libc::c_int)>, i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    let r = super::cvt(unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) })?;
    Ok((r > 0).then_some((r, status)))
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

/// `waitpid(-1, &status, 0)` (blocking, not retried on EINTR): (pid, wait status) of any
/// child.
#[inline]
pub(crate) fn wait_any() -> Result<(libc::pid_t, libc::c_int), i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    let pid = super::cvt(unsafe { libc::waitpid(-1, &mut status, 0) })?;
    Ok((pid, status))
}

/// `_exit(code)`: leaves at once, running no destructor or atexit handler. Async-signal-safe.
#[inline]
pub(crate) fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: _exit takes an integer and ends the process; no code of ours runs after it.
    unsafe { libc::_exit(code) }
}

/// `setsid()`: the new session's id. Async-signal-safe.
#[inline]
pub(crate) fn setsid() -> Result<libc::pid_t, i32> {
    // SAFETY: setsid has no arguments and touches no memory of ours.
    super::cvt(unsafe { libc::setsid() })
}

/// `unshare(flags)`. Async-signal-safe. (`CLONE_NEWUSER` needs a single-threaded caller:
/// the kernel refuses it with EINVAL otherwise.)
#[inline]
pub(crate) fn unshare(flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: unshare takes an integer and touches no memory of ours.
    super::cvt0(unsafe { libc::unshare(flags) })
}

/// `sethostname(name)` (of the caller's UTS namespace). Async-signal-safe.
#[inline]
pub(crate) fn sethostname(name: &CStr) -> Result<(), i32> {
    let bytes = name.to_bytes();
    // SAFETY: the kernel reads `bytes.len()` bytes of `name`, which lives across the call.
    super::cvt0(unsafe { libc::sethostname(bytes.as_ptr().cast(), bytes.len()) })
}

/// `prctl` with an option whose arguments are integers only (no pointer is passed).
#[inline]
pub(super) fn prctl_int(option: libc::c_int, arg: libc::c_ulong) -> Result<libc::c_int, i32> {
    // SAFETY: the options passed by the callers in `sys` (NO_NEW_PRIVS, PDEATHSIG,
    // CHILD_SUBREAPER, DUMPABLE, CAPBSET_READ/DROP, SECUREBITS) take integer arguments only
    // and touch no memory of ours.
    super::cvt(unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`. Async-signal-safe.
#[inline]
pub(crate) fn set_no_new_privs() -> Result<(), i32> {
    prctl_int(libc::PR_SET_NO_NEW_PRIVS, 1).map(|_| ())
}

/// `prctl(PR_SET_PDEATHSIG, sig)`. Async-signal-safe.
#[inline]
pub(crate) fn set_parent_death_signal(sig: libc::c_int) -> Result<(), i32> {
    let sig = libc::c_ulong::try_from(sig).map_err(|_| libc::EINVAL)?;
    prctl_int(libc::PR_SET_PDEATHSIG, sig).map(|_| ())
}

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`: orphaned descendants are reparented to this process.
#[inline]
pub(crate) fn set_child_subreaper() -> Result<(), i32> {
    prctl_int(libc::PR_SET_CHILD_SUBREAPER, 1).map(|_| ())
}

/// `prctl(PR_SET_DUMPABLE, dumpable)`. Async-signal-safe.
#[inline]
pub(crate) fn set_dumpable(dumpable: bool) -> Result<(), i32> {
    prctl_int(libc::PR_SET_DUMPABLE, libc::c_ulong::from(dumpable)).map(|_| ())
}

/// A NULL-terminated array of pointers to C strings borrowed for `'a`, as `execve` takes
/// for argv and envp. Built before fork; the child only reads it.
pub(crate) struct CStrArray<'a> {
    ptrs: Vec<*const libc::c_char>,
    strings: PhantomData<&'a CStr>,
}

impl<'a> CStrArray<'a> {
    /// Points at each of `items` (which outlive the array), then NULL.
    pub(crate) fn new(items: &'a [CString]) -> Self {
        let mut ptrs: Vec<*const libc::c_char> = items.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CStrArray {
            ptrs,
            strings: PhantomData,
        }
    }
}

/// `execve(path, argv, envp)`: returns only on failure, with the errno. Async-signal-safe.
#[inline]
pub(crate) fn execve(path: &CStr, argv: &CStrArray<'_>, envp: &CStrArray<'_>) -> i32 {
    // SAFETY: `path` is a valid C string; `argv` and `envp` are NULL-terminated arrays of
    // pointers to C strings that outlive them (`CStrArray::new`), alive across the call.
    unsafe { libc::execve(path.as_ptr(), argv.ptrs.as_ptr(), envp.ptrs.as_ptr()) };
    super::errno()
}

/// How many threads this process has (the entries of `/proc/self/task`).
pub(crate) fn thread_count() -> Result<usize, i32> {
    let dir =
        std::fs::read_dir("/proc/self/task").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let mut n = 0;
    for e in dir {
        e.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        n += 1;
    }
    Ok(n)
}

/// Forks, runs `child` in the new process (which never returns into the caller) and returns
/// `(pid, cloned_into)` in the parent.
///
/// - `new_namespaces` 0: a plain `fork()` (libc's); else a raw `clone(new_namespaces |
///   SIGCHLD)` without a new stack, which creates those namespaces for the child.
/// - `into_cgroup`: first tries `clone3(CLONE_INTO_CGROUP)` with the same flags into that
///   cgroup2 directory ([`fork_into`]); when the kernel refuses it, forks as above.
///   `cloned_into` (also passed to `child`) says whether that worked.
///
/// `Err(errno)`: no child was created (the last attempt's errno), or `Err(EDEADLK)` when
/// the process has more than one thread (or `/proc/self/task` cannot be read: its errno).
///
/// Safe because it checks that the caller is the process's only thread: the child is then
/// a full copy of a single-threaded process (no lock is held by a thread that is gone), so
/// `child` may run any code, and no other thread exists that could start one between the
/// check and the fork. `child` must end the process (it returns `Infallible`: it cannot return), so
/// the child never returns into the caller's frames, whose destructors would otherwise run
/// twice.
pub(crate) fn fork_child<F>(
    new_namespaces: libc::c_int,
    into_cgroup: Option<RawFd>,
    child: F,
) -> Result<(libc::pid_t, bool), i32>
where
    F: FnOnce(bool) -> std::convert::Infallible,
{
    if thread_count()? != 1 {
        return Err(libc::EDEADLK);
    }
    let flags = u64::try_from(new_namespaces).map_err(|_| libc::EINVAL)?;
    let mut cloned_into = false;
    let mut pid = -1;
    if let Some(fd) = into_cgroup {
        // SAFETY: the process is single-threaded (checked above) and the child runs `child`,
        // which never returns.
        if let Ok(p) = unsafe { fork_into(flags, fd) } {
            pid = p;
            cloned_into = true;
        }
    }
    if !cloned_into {
        pid = if new_namespaces == 0 {
            // SAFETY: as above.
            super::cvt(unsafe { libc::fork() })?
        } else {
            let flags = libc::c_ulong::try_from(new_namespaces | libc::SIGCHLD)
                .map_err(|_| libc::EINVAL)?;
            // SAFETY: as above; clone without a new stack behaves like fork, the child runs
            // on its copy of the caller's stack.
            let r = super::cvt_long(unsafe {
                libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize)
            })?;
            libc::pid_t::try_from(r).map_err(|_| libc::EOVERFLOW)?
        };
    }
    if pid == 0 {
        // Returns `Infallible`: the child ends in there. A panic must not unwind into the
        // caller's frames either (the child would go on as a copy of the parent): it ends
        // the child with status 127 instead.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(cloned_into)));
        // SAFETY: `_exit` ends the process without running destructors or atexit handlers.
        unsafe { libc::_exit(127) }
    }
    Ok((pid, cloned_into))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

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
    fn forking_is_refused_with_other_threads_running() {
        // The test harness runs this on a thread of its own: two threads at least.
        assert!(thread_count().unwrap() > 1);
        assert_eq!(
            fork_child(0, None, |_| exit_now(0)).map(|_| ()),
            Err(libc::EDEADLK)
        );
    }

    #[test]
    fn a_panic_in_the_forked_child_ends_that_child_with_127() {
        // fork_child refuses in the harness (other threads), so a plain fork first gives a
        // single-threaded process; there, fork_child's child panics. Without the guard the
        // panic would unwind back into this function in the grandchild, which would then
        // exit 0 below like its parent.
        // SAFETY: the child only calls alarm, fork_child (single-threaded now: the other
        // threads of the harness are not copied), waitpid and _exit; `alarm` ends it should
        // anything it calls wait on a lock another harness thread held at fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: as above.
            unsafe { libc::alarm(10) };
            let code = match fork_child(0, None, |_| panic!("the child's body panicked")) {
                Ok((grandchild, _)) => match waitpid(grandchild) {
                    Ok(st) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
                    _ => 90,
                },
                Err(_) => 91,
            };
            // SAFETY: leaving the forked child without running the harness's code.
            unsafe { libc::_exit(code) }
        }
        let st = waitpid(pid).unwrap();
        assert!(libc::WIFEXITED(st), "the probe did not exit: status {st}");
        assert_eq!(libc::WEXITSTATUS(st), 127);
    }

    #[test]
    fn a_c_string_array_ends_in_null() {
        let items = [CString::new("a").unwrap(), CString::new("bc").unwrap()];
        let arr = CStrArray::new(&items);
        assert_eq!(arr.ptrs.len(), 3);
        assert_eq!(arr.ptrs[1], items[1].as_ptr());
        assert!(arr.ptrs[2].is_null());
        // A path that cannot exist: execve returns with its errno.
        assert_eq!(execve(c"/nonexistent/sandboxio", &arr, &arr), libc::ENOENT);
    }

    #[test]
    fn signals_and_waits_report_the_errno() {
        assert_eq!(kill(libc::pid_t::MAX, 0), Err(libc::ESRCH));
        assert_eq!(waitpid(libc::pid_t::MAX), Err(libc::ECHILD));
        assert_eq!(set_parent_death_signal(-1), Err(libc::EINVAL));
        assert_eq!(wait_nohang(libc::pid_t::MAX), Err(libc::ECHILD));
        assert_eq!(pidfd_open(-1).map(|_| ()), Err(libc::EINVAL));
    }

    #[test]
    fn the_pid_and_the_usage_of_children() {
        assert!(getpid() > 1);
        assert!(getrusage(libc::RUSAGE_CHILDREN).is_ok());
        assert_eq!(getrusage(-7).map(|_| ()), Err(libc::EINVAL));
    }

    #[test]
    fn a_child_pidfd_turns_readable_when_it_exits_and_it_is_reaped() {
        use std::os::fd::{AsFd, AsRawFd};
        let (r, w) = super::super::fd::pipe().unwrap();
        // A child that waits for the end of its stdin, then exits.
        let pid = super::super::spawn::spawn(
            c"/bin/sh",
            &[c"sh", c"-c", c"read x; exit 3"],
            &[],
            &[(r.as_fd(), 0)],
        )
        .unwrap();
        drop(r);
        let pidfd = pidfd_open(pid).unwrap();
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(super::super::fd::poll(&mut fds, 0), Ok(0));
        assert_eq!(wait_nohang(pid), Ok(None));
        drop(w);
        assert_eq!(super::super::fd::poll(&mut fds, -1), Ok(1));
        let (got, st) = wait_nohang(pid).unwrap().unwrap();
        assert_eq!(got, pid);
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 3, "{st}");
    }
}
