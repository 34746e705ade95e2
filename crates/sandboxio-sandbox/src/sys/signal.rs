//! Signal mask and dispositions. Async-signal-safe (used between fork and exec).

/// An empty signal set (`sigemptyset`).
#[inline]
pub(crate) fn empty_set() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: `set` is writable memory of a `sigset_t`'s size; sigemptyset only writes it.
    unsafe { libc::sigemptyset(set.as_mut_ptr()) };
    // SAFETY: zeroed, then initialised by sigemptyset (all-zero is a valid sigset_t, too).
    unsafe { set.assume_init() }
}

/// `sigprocmask(SIG_SETMASK, set, NULL)`: the calling thread's mask becomes `set`.
#[inline]
pub(crate) fn set_mask(set: &libc::sigset_t) -> Result<(), i32> {
    // SAFETY: `set` is a valid sigset_t that lives across the call; no old mask is asked for.
    super::cvt0(unsafe { libc::sigprocmask(libc::SIG_SETMASK, set, std::ptr::null_mut()) })
}

/// `signal(sig, SIG_DFL)`: the default action for `sig` (no handler of ours is installed).
#[inline]
pub(crate) fn set_default(sig: libc::c_int) -> Result<(), i32> {
    // SAFETY: SIG_DFL is not a function of ours: the kernel's default action runs, so no
    // code can be called asynchronously by this.
    if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(super::errno());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn an_empty_set_has_no_member_and_a_bad_signal_is_refused() {
        let set = super::empty_set();
        // SAFETY: test-only query of a valid set.
        assert_eq!(unsafe { libc::sigismember(&set, libc::SIGINT) }, 0);
        assert_eq!(super::set_default(0), Err(libc::EINVAL));
        assert_eq!(super::set_default(libc::SIGKILL), Err(libc::EINVAL));
    }

    #[test]
    fn setting_the_current_mask_again_changes_nothing() {
        let mut cur = super::empty_set();
        // SAFETY: test-only query of this thread's mask into a valid set.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
        assert_eq!(rc, 0);
        super::set_mask(&cur).unwrap();
    }
}
