//! The caller's own terminal, for a front end that runs a `tty` request interactively:
//! its window size, and raw input while the sandboxed program owns the keyboard.
//!
//! Only input processing is switched off (no line editing, no echo, no signals from
//! Ctrl-C/Ctrl-Z, bytes as typed): the keys reach the sandbox's pseudo-terminal, whose own
//! line discipline echoes and turns Ctrl-C into SIGINT for the program. Output processing
//! stays on, so the front end's newlines still return the carriage.

use std::os::fd::{AsRawFd, BorrowedFd};

use sandboxio_core::TtySize;

use crate::sys;

/// The window size of the terminal at `fd`, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<TtySize> {
    let ws = sys::pty::window_size(fd).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some(TtySize {
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
        let mut t = sys::pty::tcgetattr(fd).ok()?;
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
        sys::pty::tcsetattr(fd, &t).ok()?;
        Some(RawInput { fd, saved })
    }
}

impl Drop for RawInput {
    fn drop(&mut self) {
        // Restoring the settings read in `enable` on the same fd.
        let _ = sys::pty::tcsetattr(self.fd, &self.saved);
    }
}
