//! Lowering resource limits in a freshly forked child. Only syscalls, no allocation: safe
//! between fork and exec.

use crate::sys;

/// Sets each limit (soft and hard) to its value, or to the current hard limit when that is
/// lower: limits are only ever lowered. On failure returns `Err` with `errno` still set by
/// the failing `setrlimit`.
pub(crate) fn lower_all(rlimits: &[(libc::__rlimit_resource_t, u64)]) -> Result<(), ()> {
    for &(res, v) in rlimits {
        let v = match sys::rlimit::get(res) {
            Ok(cur) => v.min(cur.rlim_max),
            Err(_) => v,
        };
        let lim = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        if sys::rlimit::set(res, &lim).is_err() {
            return Err(());
        }
    }
    Ok(())
}
