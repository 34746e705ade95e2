//! Lowering resource limits in a freshly forked child. Only syscalls, no allocation: safe
//! between fork and exec.

/// Sets each limit (soft and hard) to its value, or to the current hard limit when that is
/// lower: limits are only ever lowered. On failure returns `Err` with `errno` still set by
/// the failing `setrlimit`.
pub(crate) fn lower_all(rlimits: &[(libc::__rlimit_resource_t, u64)]) -> Result<(), ()> {
    for &(res, v) in rlimits {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `cur` is a valid, writable rlimit for the duration of the call.
        let have = unsafe { libc::getrlimit(res, &mut cur) } == 0;
        let v = if have { v.min(cur.rlim_max) } else { v };
        let lim = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: `lim` is a valid rlimit; the kernel only reads it.
        if unsafe { libc::setrlimit(res, &lim) } < 0 {
            return Err(());
        }
    }
    Ok(())
}
