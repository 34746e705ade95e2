//! Terminals: window sizes, termios, and a new pseudo-terminal pair.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// `ioctl(TIOCGWINSZ)`.
pub(crate) fn window_size(fd: BorrowedFd<'_>) -> Result<libc::winsize, i32> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which lives across it.
    super::cvt0(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok(ws)
}

/// `ioctl(TIOCSWINSZ)`.
pub(crate) fn set_window_size(fd: BorrowedFd<'_>, ws: &libc::winsize) -> Result<(), i32> {
    // SAFETY: TIOCSWINSZ reads a `winsize` that lives across the call.
    super::cvt0(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, ws) })
}

/// `tcgetattr(fd)`. Takes a raw fd (the caller keeps the number to restore the settings
/// later); a stale number only makes the call fail or act on another terminal, it cannot
/// touch our memory.
pub(crate) fn tcgetattr(fd: RawFd) -> Result<libc::termios, i32> {
    let mut t = std::mem::MaybeUninit::<libc::termios>::zeroed();
    // SAFETY: tcgetattr fills `t`, writable memory of a `termios`'s size living across it.
    super::cvt0(unsafe { libc::tcgetattr(fd, t.as_mut_ptr()) })?;
    // SAFETY: tcgetattr succeeded and filled `t` (all-zero before, a valid value too).
    Ok(unsafe { t.assume_init() })
}

/// `tcsetattr(fd, TCSANOW, t)` (raw fd: see [`tcgetattr`]).
pub(crate) fn tcsetattr(fd: RawFd, t: &libc::termios) -> Result<(), i32> {
    // SAFETY: tcsetattr reads `t`, which lives across the call.
    super::cvt0(unsafe { libc::tcsetattr(fd, libc::TCSANOW, t) })
}

/// Which call of [`open_pair`] failed, with its errno.
pub(crate) type PtyFailure = (&'static str, i32);

/// A new pseudo-terminal: (master, slave), both close-on-exec and not the controlling
/// terminal of this process.
pub(crate) fn open_pair() -> Result<(OwnedFd, OwnedFd), PtyFailure> {
    // SAFETY: open(2) of a constant NUL-terminated path with integer flags.
    let m = unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    let master = super::owned(m).map_err(|e| ("open /dev/ptmx", e))?;
    // SAFETY: unlockpt on the master fd we own.
    super::cvt0(unsafe { libc::unlockpt(master.as_raw_fd()) }).map_err(|e| ("unlockpt", e))?;
    // SAFETY: TIOCGPTPEER takes open flags as an integer and returns a new fd for the slave
    // of this master (no path lookup, so no race on /dev/pts).
    let s = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    let slave = super::owned(s).map_err(|e| ("TIOCGPTPEER", e))?;
    Ok((master, slave))
}

/// `ioctl(fd, TIOCSCTTY, 0)`: the terminal on `fd` becomes the controlling terminal of the
/// calling session leader. Async-signal-safe.
#[inline]
pub(crate) fn set_controlling_tty(fd: RawFd) -> Result<(), i32> {
    // SAFETY: TIOCSCTTY takes an integer argument; no memory of ours is passed.
    super::cvt0(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_new_pair_keeps_its_window_size_and_is_a_terminal() {
        let (master, slave) = open_pair().unwrap();
        let ws = libc::winsize {
            ws_row: 33,
            ws_col: 101,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        set_window_size(master.as_fd(), &ws).unwrap();
        let got = window_size(slave.as_fd()).unwrap();
        assert_eq!((got.ws_row, got.ws_col), (33, 101));
        let t = tcgetattr(slave.as_raw_fd()).unwrap();
        tcsetattr(slave.as_raw_fd(), &t).unwrap();
    }

    #[test]
    fn a_pipe_is_not_a_terminal() {
        let (r, _w) = super::super::fd::pipe().unwrap();
        assert_eq!(window_size(r.as_fd()).map(|_| ()), Err(libc::ENOTTY));
        assert_eq!(tcgetattr(r.as_raw_fd()).map(|_| ()), Err(libc::ENOTTY));
    }
}
