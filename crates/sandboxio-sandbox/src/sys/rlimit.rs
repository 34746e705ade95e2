//! Resource limits. Async-signal-safe.

/// `getrlimit(res)`.
#[inline]
pub(crate) fn get(res: libc::__rlimit_resource_t) -> Result<libc::rlimit, i32> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `cur` is a valid, writable rlimit for the duration of the call.
    super::cvt0(unsafe { libc::getrlimit(res, &mut cur) })?;
    Ok(cur)
}

/// `setrlimit(res, lim)`. On failure `errno` is also left as the call set it.
#[inline]
pub(crate) fn set(res: libc::__rlimit_resource_t, lim: &libc::rlimit) -> Result<(), i32> {
    // SAFETY: `lim` is a valid rlimit; the kernel only reads it.
    super::cvt0(unsafe { libc::setrlimit(res, lim) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn the_current_limit_can_be_set_again() {
        let cur = super::get(libc::RLIMIT_CORE).unwrap();
        assert!(cur.rlim_cur <= cur.rlim_max);
        super::set(libc::RLIMIT_CORE, &cur).unwrap();
    }
}
