//! Signals: signal sets, the signal mask, default dispositions, and signals read from a
//! signalfd. The mask and disposition calls are async-signal-safe (used between fork and
//! exec).

use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

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

/// A signal set holding exactly `signals` (`Err(EINVAL)`: not a signal number).
pub(crate) fn sigset(signals: &[libc::c_int]) -> Result<libc::sigset_t, i32> {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: `set` is writable memory of a sigset_t's size and alignment, living across the
    // call; sigemptyset initialises it.
    super::cvt0(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
    for &s in signals {
        // SAFETY: `set` was initialised by sigemptyset above; sigaddset checks `s`.
        super::cvt0(unsafe { libc::sigaddset(set.as_mut_ptr(), s) })?;
    }
    // SAFETY: sigemptyset initialised `set` (and it was all-zero before, a valid value too).
    Ok(unsafe { set.assume_init() })
}

/// `sigprocmask(how, set)` for the calling thread: the previous mask. Async-signal-safe.
pub(crate) fn sigprocmask(how: libc::c_int, set: &libc::sigset_t) -> Result<libc::sigset_t, i32> {
    let mut old = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: `set` is a valid sigset_t and `old` writable memory of one, both living across
    // the call.
    super::cvt0(unsafe { libc::sigprocmask(how, set, old.as_mut_ptr()) })?;
    // SAFETY: sigprocmask succeeded and filled `old` (all-zero before, a valid value too).
    Ok(unsafe { old.assume_init() })
}

/// A new signalfd for the signals of `set` (`flags`: `SFD_CLOEXEC`, `SFD_NONBLOCK`).
pub(crate) fn signalfd(set: &libc::sigset_t, flags: libc::c_int) -> Result<OwnedFd, i32> {
    // SAFETY: `set` is a valid sigset_t living across the call; -1 asks for a new fd.
    super::owned(unsafe { libc::signalfd(-1, set, flags) })
}

/// Reads one signal from the signalfd `fd` (`Err(EAGAIN)`: none pending on a non-blocking
/// one; `Err(EIO)`: a short read).
pub(crate) fn read_signal(fd: BorrowedFd<'_>) -> Result<libc::signalfd_siginfo, i32> {
    let mut info = MaybeUninit::<libc::signalfd_siginfo>::zeroed();
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: the kernel writes at most `size` bytes into `info`, which is exactly that big
    // and exclusively borrowed for the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), info.as_mut_ptr().cast(), size) };
    let n = usize::try_from(n).map_err(|_| super::errno())?;
    if n != size {
        return Err(libc::EIO);
    }
    // SAFETY: signalfd_siginfo is plain integers (any bytes are a valid value); it was zeroed
    // and then filled by the read.
    Ok(unsafe { info.assume_init() })
}

/// `raise(sig)`: sends `sig` to the calling thread.
#[cfg(test)]
pub(crate) fn raise(sig: libc::c_int) -> Result<(), i32> {
    // SAFETY: raise(3) takes an integer and touches no memory of ours.
    super::cvt0(unsafe { libc::raise(sig) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_empty_set_has_no_member_and_a_bad_signal_is_refused() {
        let set = empty_set();
        // SAFETY: test-only query of a valid set.
        assert_eq!(unsafe { libc::sigismember(&set, libc::SIGINT) }, 0);
        assert_eq!(set_default(0), Err(libc::EINVAL));
        assert_eq!(set_default(libc::SIGKILL), Err(libc::EINVAL));
    }

    #[test]
    fn setting_the_current_mask_again_changes_nothing() {
        let mut cur = empty_set();
        // SAFETY: test-only query of this thread's mask into a valid set.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
        assert_eq!(rc, 0);
        set_mask(&cur).unwrap();
    }

    #[test]
    fn a_blocked_signal_sent_to_this_thread_arrives_on_the_signalfd() {
        // On a thread of its own: the mask is per thread, and nothing else runs there.
        std::thread::spawn(|| {
            let set = sigset(&[libc::SIGUSR2]).unwrap();
            let old = sigprocmask(libc::SIG_BLOCK, &set).unwrap();
            let fd = signalfd(&set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK).unwrap();
            assert_eq!(read_signal(fd.as_fd()).map(|_| ()), Err(libc::EAGAIN));
            raise(libc::SIGUSR2).unwrap();
            let info = read_signal(fd.as_fd()).unwrap();
            assert_eq!(info.ssi_signo, libc::SIGUSR2 as u32);
            assert_eq!(read_signal(fd.as_fd()).map(|_| ()), Err(libc::EAGAIN));
            let blocked = sigprocmask(libc::SIG_SETMASK, &old).unwrap();
            // SAFETY: `blocked` is a valid, initialised sigset_t.
            assert_eq!(unsafe { libc::sigismember(&blocked, libc::SIGUSR2) }, 1);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn an_invalid_signal_number_is_refused() {
        assert_eq!(sigset(&[0x4000]).map(|_| ()), Err(libc::EINVAL));
    }
}
