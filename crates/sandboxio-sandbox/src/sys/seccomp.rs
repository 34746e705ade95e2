//! seccomp(2). The filter instructions are built by `ns::seccomp`.

use crate::ns::seccomp::SockFilter;

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)` on the calling thread. Async-signal-safe.
#[inline]
pub(crate) fn set_mode_filter(prog: &[SockFilter]) -> Result<(), i32> {
    let len = u16::try_from(prog.len()).map_err(|_| libc::EINVAL)?;
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points at `len` instructions of `prog`, which outlives the call; the
    // kernel copies the program and does not keep the pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u64,
            &fprog as *const SockFprog,
        )
    };
    super::cvt_long(rc).map(|_| ())
}

const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action)`: whether the kernel supports `action`.
pub(crate) fn action_available(action: u32) -> Result<(), i32> {
    // SAFETY: SECCOMP_GET_ACTION_AVAIL only reads the u32 we point to, which lives across
    // the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    super::cvt_long(r).map(|_| ())
}

/// Tests: runs the raw syscall `nr(args)` in a forked child, first under `prog` (with
/// `no_new_privs`) when given; returns 0 on success or the errno (at most 250), 254 when
/// the filter could not be installed.
#[cfg(test)]
pub(crate) fn syscall_in_child(prog: Option<&[SockFilter]>, nr: i64, a: [u64; 6]) -> i32 {
    // SAFETY: the child only makes raw syscalls (prctl, seccomp, `nr`, _exit), which are
    // async-signal-safe, and never returns into the caller, so forking from the
    // multi-threaded test harness is sound. Whatever `nr(args)` does with its (test-chosen,
    // harmless) arguments happens in the child's own copy of the address space, which it
    // leaves at once.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: raw syscalls in the forked child, then _exit; see above.
        unsafe {
            if let Some(p) = prog {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1u64, 0u64, 0u64, 0u64);
                if set_mode_filter(p).is_err() {
                    libc::_exit(254);
                }
            }
            let r = libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
            let code = if r < 0 { *libc::__errno_location() } else { 0 };
            libc::_exit(code.min(250));
        }
    }
    let st = super::proc::waitpid(pid).unwrap_or(0);
    assert!(libc::WIFEXITED(st), "probe of {nr} died: {st}");
    libc::WEXITSTATUS(st)
}
