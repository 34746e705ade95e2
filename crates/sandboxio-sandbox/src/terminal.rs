//! The caller's own terminal, for a front end that runs a `tty` request interactively:
//! its window size, and raw input while the sandboxed program owns the keyboard.
//!
//! Only input processing is switched off (no line editing, no echo, no signals from
//! Ctrl-C/Ctrl-Z, bytes as typed): the keys reach the sandbox's pseudo-terminal, whose own
//! line discipline echoes and turns Ctrl-C into SIGINT for the program. Output processing
//! stays on, so the front end's newlines still return the carriage.

use std::os::fd::{AsRawFd, BorrowedFd};

use sandboxio_core::TtySize;

/// The window size of the terminal at `fd`, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<TtySize> {
    // SAFETY: `winsize` is plain data; all-zero is a valid value.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which lives across it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some(TtySize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// The terminal at an fd in raw input mode until dropped (then its settings are put back).
pub struct RawInput {
    fd: i32,
    saved: libc::termios,
}

impl RawInput {
    /// Switches the terminal at `fd` to raw input; `None` when it is not a terminal.
    pub fn enable(fd: BorrowedFd<'_>) -> Option<RawInput> {
        let fd = fd.as_raw_fd();
        // SAFETY: `termios` is plain data; all-zero is a valid value to be overwritten.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills `t`, which lives across the call.
        if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
            return None;
        }
        let saved = t;
        t.c_iflag &= !(libc::IGNBRK
            | libc::BRKINT
            | libc::PARMRK
            | libc::ISTRIP
            | libc::INLCR
            | libc::IGNCR
            | libc::ICRNL
            | libc::IXON);
        t.c_lflag &= !(libc::ECHO | libc::ECHONL | libc::ICANON | libc::ISIG | libc::IEXTEN);
        t.c_cc[libc::VMIN] = 1;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: tcsetattr reads `t`, which lives across the call.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) } != 0 {
            return None;
        }
        Some(RawInput { fd, saved })
    }
}

impl Drop for RawInput {
    fn drop(&mut self) {
        // SAFETY: restoring the settings read in `enable` on the same fd.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}
