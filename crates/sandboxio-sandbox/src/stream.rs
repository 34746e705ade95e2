//! Live I/O of one run: output read as the program writes it (kept up to its cap, sent as
//! [`ExecEvent`]s), standard input streamed from the caller, and a pseudo-terminal.
//!
//! Order: one task reads both output pipes (or the terminal), so events leave in the order
//! the supervisor read them. Across stdout and stderr that is the order in which the two
//! pipes became readable; within one stream it is exact. Under a terminal both streams are
//! the terminal and the order is exact.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sandboxio_core::{ExecEvent, OutputStream, TtySize};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::drain::PumpState;
use crate::error::SandboxError;
use crate::sys;

/// The live side of a run. Everything is optional: the default is a run without events,
/// with the request's own stdin.
#[derive(Debug, Default)]
pub struct StreamIo {
    /// Receives the program's output as it is read (up to the caps), then one `Exit`.
    /// A slow receiver slows the program down (the pipes fill); a dropped one is ignored.
    pub events: Option<mpsc::Sender<ExecEvent>>,
    /// Standard input chunks, for a request with `stdin_stream`; the channel closing is
    /// end of input. Without it a streaming request reads end of input at once.
    pub stdin: Option<mpsc::Receiver<Vec<u8>>>,
    /// Window size of the pseudo-terminal of a `tty` request (default 24x80).
    pub tty_size: Option<TtySize>,
    /// New window sizes for that pseudo-terminal while the program runs (the caller's
    /// terminal was resized); the program gets `SIGWINCH` from its terminal.
    pub tty_resize: Option<mpsc::Receiver<TtySize>>,
    /// Network `allowlist` or `full` in the namespace tier: receives the sandbox's egress
    /// listener (a TCP socket listening on 127.0.0.1 inside the sandbox's own network
    /// namespace) for the egress proxy to serve. Without it such a request is refused
    /// (`SBX_E1450`): nothing would serve the listener.
    pub egress: Option<tokio::sync::oneshot::Sender<std::net::TcpListener>>,
    /// The caller's go-ahead. With it, the run prepares everything of its own (workspace,
    /// cgroup, the helper started and waiting for its plan) and then waits: `true` sends the
    /// plan and the run goes on; `false`, or the sender dropped, ends it before anything of
    /// the request has run (`SBX_E1444`), its helper reaped and its directories removed.
    /// The wait is not counted in the result's duration. The gateway starts a sandbox this
    /// way while its admission is being made durable.
    pub release: Option<tokio::sync::oneshot::Receiver<bool>>,
}

/// Bytes kept from one output stream, and how many the program wrote in all.
pub(crate) struct Capture {
    buf: Vec<u8>,
    cap: u64,
    total: u64,
}

impl Capture {
    pub(crate) fn new(cap: u64) -> Arc<Mutex<Capture>> {
        Arc::new(Mutex::new(Capture {
            buf: Vec::new(),
            cap,
            total: 0,
        }))
    }

    /// Counts `chunk`, keeps what fits under the cap; returns how many bytes were kept.
    fn take_in(&mut self, chunk: &[u8]) -> usize {
        let room =
            usize::try_from(self.cap.saturating_sub(self.buf.len() as u64)).unwrap_or(usize::MAX);
        let keep = room.min(chunk.len());
        self.buf.extend_from_slice(&chunk[..keep]);
        self.total += chunk.len() as u64;
        keep
    }
}

/// The kept bytes, the total written, and whether anything was dropped.
pub(crate) fn take_capture(c: &Arc<Mutex<Capture>>) -> (Vec<u8>, u64, bool) {
    match c.lock() {
        Ok(mut c) => {
            let buf = std::mem::take(&mut c.buf);
            let truncated = c.total > buf.len() as u64;
            (buf, c.total, truncated)
        }
        Err(_) => (Vec::new(), 0, false),
    }
}

/// A non-blocking fd driven by the runtime: a pipe end or a terminal master.
struct FdIo(AsyncFd<OwnedFd>);

impl FdIo {
    fn new(fd: OwnedFd) -> io::Result<FdIo> {
        sys::fd::set_nonblocking(fd.as_fd()).map_err(io::Error::from_raw_os_error)?;
        let interest = tokio::io::Interest::READABLE.add(tokio::io::Interest::WRITABLE);
        Ok(FdIo(sys::fd::async_fd(fd, interest)?))
    }

    /// One read; `Ok(0)` at end of file. A terminal master reports the other side closed
    /// with EIO: that is end of file too. The syscall runs inside one poll, so dropping
    /// this future (a `select!` that chose another branch) never loses bytes.
    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.0.readable().await?;
            let r = guard.try_io(|fd| {
                sys::fd::read(fd.get_ref().as_fd(), buf).map_err(io::Error::from_raw_os_error)
            });
            match r {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.0.writable().await?;
            let r = guard.try_io(|fd| {
                sys::fd::write(fd.get_ref().as_fd(), data).map_err(io::Error::from_raw_os_error)
            });
            match r {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }
}

async fn read_opt(fd: Option<&FdIo>, buf: &mut [u8]) -> io::Result<usize> {
    match fd {
        Some(f) => f.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Microseconds since `started`.
pub(crate) fn elapsed_us(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Where the output pump delivers.
pub(crate) struct OutputSinks {
    pub(crate) stdout: Arc<Mutex<Capture>>,
    pub(crate) stderr: Arc<Mutex<Capture>>,
    pub(crate) events: Option<mpsc::Sender<ExecEvent>>,
    pub(crate) started: Instant,
}

impl OutputSinks {
    async fn deliver(&mut self, stream: OutputStream, chunk: &[u8]) {
        let cap = match stream {
            OutputStream::Stdout => &self.stdout,
            OutputStream::Stderr => &self.stderr,
        };
        let kept = match cap.lock() {
            Ok(mut c) => c.take_in(chunk),
            Err(_) => 0,
        };
        if kept == 0 {
            return;
        }
        if let Some(tx) = &self.events {
            let ev = ExecEvent::Output {
                stream,
                data: chunk[..kept].to_vec(),
                elapsed_us: elapsed_us(self.started),
            };
            if tx.send(ev).await.is_err() {
                // The receiver is gone: keep capturing for the result, stop sending.
                self.events = None;
            }
        }
    }
}

/// Reads `stdout` (and `stderr`, absent under a terminal) until both are at end of file.
/// Output past a cap is read, counted and dropped, so it never blocks the program.
/// `state` tells the drain ([`crate::drain`]) which streams reached their end and whether
/// the pump is waiting for input (not reading or delivering).
pub(crate) async fn pump_output(
    stdout: OwnedFd,
    stderr: Option<OwnedFd>,
    mut sinks: OutputSinks,
    state: Arc<PumpState>,
) {
    let (Ok(out), err) = (FdIo::new(stdout), stderr.map(FdIo::new).transpose()) else {
        return;
    };
    let Ok(err) = err else { return };
    let mut out_open = true;
    let mut err_open = err.is_some();
    let mut b_out = vec![0u8; 64 * 1024];
    let mut b_err = vec![0u8; 64 * 1024];
    while out_open || err_open {
        state.set_waiting(true);
        tokio::select! {
            r = out.read(&mut b_out), if out_open => {
                state.set_waiting(false);
                match r {
                    Ok(0) | Err(_) => {
                        out_open = false;
                        state.stdout_done();
                    }
                    Ok(n) => sinks.deliver(OutputStream::Stdout, &b_out[..n]).await,
                }
            },
            r = read_opt(err.as_ref(), &mut b_err), if err_open => {
                state.set_waiting(false);
                match r {
                    Ok(0) | Err(_) => {
                        err_open = false;
                        state.stderr_done();
                    }
                    Ok(n) => sinks.deliver(OutputStream::Stderr, &b_err[..n]).await,
                }
            },
        }
    }
    state.set_waiting(false);
}

/// Writes the caller's stdin chunks to the program until the channel closes, then ends
/// the input: closes the pipe, or under a terminal sends end-of-file (Ctrl-D).
pub(crate) async fn pump_stdin(mut rx: mpsc::Receiver<Vec<u8>>, fd: OwnedFd, tty: bool) {
    let Ok(w) = FdIo::new(fd) else { return };
    let mut last = None;
    while let Some(chunk) = rx.recv().await {
        // The program may exit without reading (EPIPE): not an error of the run.
        if w.write_all(&chunk).await.is_err() {
            return;
        }
        last = chunk.last().copied().or(last);
    }
    if tty {
        let _ = w.write_all(end_of_input(last)).await;
    }
}

/// What ends input under a terminal, after input whose last byte was `last`: one Ctrl-D at
/// the start of a line, two after a line left open (the first only hands that line to the
/// program; the second, at an empty line, is end of file).
fn end_of_input(last: Option<u8>) -> &'static [u8] {
    match last {
        None | Some(b'\n') => &[0x04],
        Some(_) => &[0x04, 0x04],
    }
}

/// Writes fixed bytes to the program's stdin, then ends it (as [`pump_stdin`]).
pub(crate) async fn write_stdin(data: Vec<u8>, fd: OwnedFd, tty: bool) {
    let Ok(w) = FdIo::new(fd) else { return };
    if w.write_all(&data).await.is_err() {
        return;
    }
    if tty {
        let _ = w.write_all(end_of_input(data.last().copied())).await;
    }
}

/// Applies each new window size to the pseudo-terminal's master until the sender goes
/// (or the run ends and the task is dropped).
pub(crate) async fn resize_pty(mut rx: mpsc::Receiver<TtySize>, master: OwnedFd) {
    while let Some(size) = rx.recv().await {
        let ws = libc::winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let _ = sys::pty::set_window_size(master.as_fd(), &ws);
    }
}

/// A new pseudo-terminal: (master, slave), both close-on-exec, the slave without becoming
/// anyone's controlling terminal, the window set to `size`. The program gets the slave as
/// stdin, stdout and stderr; the supervisor keeps the master. A fresh terminal, never the
/// caller's own: what the program does to it (TIOCSTI, modes) stays inside.
pub(crate) fn open_pty(size: TtySize) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let err = |what: &'static str, e: i32| SandboxError::Pty {
        what,
        source: io::Error::from_raw_os_error(e),
    };
    let (master, slave) = sys::pty::open_pair().map_err(|(what, e)| err(what, e))?;
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    sys::pty::set_window_size(master.as_fd(), &ws).map_err(|e| err("TIOCSWINSZ", e))?;
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn capture_keeps_up_to_the_cap_and_counts_everything() {
        let c = Capture::new(5);
        {
            let mut g = c.lock().unwrap();
            assert_eq!(g.take_in(b"abc"), 3);
            assert_eq!(g.take_in(b"defg"), 2);
            assert_eq!(g.take_in(b"h"), 0);
        }
        assert_eq!(take_capture(&c), (b"abcde".to_vec(), 8, true));
    }
}
