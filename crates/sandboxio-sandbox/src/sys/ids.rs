//! User and group ids of the calling process (only ever switched to fixed ids, in a forked
//! child). Async-signal-safe.

/// `setgroups(0, NULL)`: no supplementary groups.
#[inline]
pub(crate) fn setgroups_empty() -> Result<(), i32> {
    // SAFETY: with a size of 0 the kernel reads no list; the pointer is NULL.
    super::cvt0(unsafe { libc::setgroups(0, std::ptr::null()) })
}

/// `setresgid(gid, gid, gid)`.
#[inline]
pub(crate) fn setresgid(gid: libc::gid_t) -> Result<(), i32> {
    // SAFETY: integer arguments only.
    super::cvt0(unsafe { libc::setresgid(gid, gid, gid) })
}

/// `setresuid(uid, uid, uid)`.
#[inline]
pub(crate) fn setresuid(uid: libc::uid_t) -> Result<(), i32> {
    // SAFETY: integer arguments only.
    super::cvt0(unsafe { libc::setresuid(uid, uid, uid) })
}
