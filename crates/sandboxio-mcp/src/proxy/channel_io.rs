//! A stdio upstream's protocol streams as `AsyncRead`/`AsyncWrite` over the sandbox's own
//! channels: [`EventReader`] reads the program's stdout straight from its `ExecEvent`s
//! (keeping a tail of stderr), [`ChunkWriter`] sends what the MCP client writes as stdin
//! chunks. The client's transport polls them itself, so a message crosses no relay task
//! and no in-memory pipe between the MCP client and the sandbox's pumps: one task wake-up
//! fewer each way, and one or two copies fewer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use sandboxio_core::{ExecEvent, OutputStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

/// The program's stdout as a byte stream: ends at its `Exit` event or when the run's
/// sender is gone. Stderr is not part of the protocol: its last `tail_max` bytes are kept
/// in `stderr_tail` for diagnostics.
pub struct EventReader {
    rx: mpsc::Receiver<ExecEvent>,
    /// Stdout bytes received and not yet read, from `pos`.
    pending: Vec<u8>,
    pos: usize,
    ended: bool,
    stdout_bytes: Arc<AtomicU64>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    tail_max: usize,
    /// The longest message (line) the upstream may send, and the length of the line being
    /// read. A longer one ends the stream with an error and says so in `cut`: the calls in
    /// flight fail at once with that reason (they waited out their timeout while the
    /// transport dropped the line), and the upstream is started again.
    max_line: usize,
    line: usize,
    cut: Arc<Mutex<Option<String>>>,
}

impl EventReader {
    pub fn new(
        rx: mpsc::Receiver<ExecEvent>,
        stdout_bytes: Arc<AtomicU64>,
        stderr_tail: Arc<Mutex<Vec<u8>>>,
        tail_max: usize,
    ) -> EventReader {
        EventReader {
            rx,
            pending: Vec::new(),
            pos: 0,
            ended: false,
            stdout_bytes,
            stderr_tail,
            tail_max,
            max_line: usize::MAX,
            line: 0,
            cut: Arc::default(),
        }
    }

    /// Ends the stream at a line longer than `max`, saying why in `cut`.
    pub fn with_max_line(mut self, max: usize, cut: Arc<Mutex<Option<String>>>) -> EventReader {
        self.max_line = max;
        self.cut = cut;
        self
    }

    /// Counts the line lengths of `data`; `Err` once a line is longer than the maximum.
    fn measure(&mut self, data: &[u8]) -> io::Result<()> {
        for part in data.split_inclusive(|b| *b == b'\n') {
            self.line = self.line.saturating_add(part.len());
            if self.line > self.max_line.saturating_add(1) {
                let why = format!(
                    "it sent a message longer than its max_message ({} bytes)",
                    self.max_line
                );
                if let Ok(mut c) = self.cut.lock() {
                    *c = Some(why.clone());
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
            if part.ends_with(b"\n") {
                self.line = 0;
            }
        }
        Ok(())
    }

    fn keep_stderr(&self, data: &[u8]) {
        if let Ok(mut t) = self.stderr_tail.lock() {
            t.extend_from_slice(data);
            let over = t.len().saturating_sub(self.tail_max);
            t.drain(..over);
        }
    }
}

impl AsyncRead for EventReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.pos >= this.pending.len() {
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.rx.poll_recv(cx)) {
                Some(ExecEvent::Output {
                    stream: OutputStream::Stdout,
                    data,
                    ..
                }) => {
                    this.stdout_bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    if let Err(e) = this.measure(&data) {
                        this.ended = true;
                        this.rx.close();
                        return Poll::Ready(Err(e));
                    }
                    this.pending = data;
                    this.pos = 0;
                }
                Some(ExecEvent::Output { data, .. }) => this.keep_stderr(&data),
                // The program is gone (or the run ended): end of the protocol stream.
                Some(ExecEvent::Exit { .. }) | None => {
                    this.ended = true;
                    this.rx.close();
                }
            }
        }
        let rest = this.pending.get(this.pos..).unwrap_or_default();
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// What the client writes, sent to the program's stdin as chunks; shutting it down (or
/// dropping it) closes the channel, which the sandbox reads as end of input.
pub struct ChunkWriter {
    tx: PollSender<Vec<u8>>,
}

impl ChunkWriter {
    pub fn new(tx: mpsc::Sender<Vec<u8>>) -> ChunkWriter {
        ChunkWriter {
            tx: PollSender::new(tx),
        }
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the upstream's standard input is closed",
    )
}

impl AsyncWrite for ChunkWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| gone())?;
        self.tx.send_item(buf.to_vec()).map_err(|_| gone())?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tx.close();
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn out(stream: OutputStream, data: &[u8]) -> ExecEvent {
        ExecEvent::Output {
            stream,
            data: data.to_vec(),
            elapsed_us: 0,
        }
    }

    #[tokio::test]
    async fn reader_yields_stdout_in_order_keeps_a_stderr_tail_and_ends_at_exit() {
        let (tx, rx) = mpsc::channel(8);
        let (count, tail) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(Mutex::new(Vec::new())),
        );
        let mut r = EventReader::new(rx, count.clone(), tail.clone(), 4);
        tx.send(out(OutputStream::Stdout, b"{\"a\":"))
            .await
            .unwrap();
        tx.send(out(OutputStream::Stderr, b"warning: x"))
            .await
            .unwrap();
        tx.send(out(OutputStream::Stdout, b"1}\n")).await.unwrap();
        tx.send(ExecEvent::Exit {
            exit: sandboxio_core::ExitStatus::Code(0),
            elapsed_us: 0,
        })
        .await
        .unwrap();
        // Sent after the exit: never read.
        let _ = tx.send(out(OutputStream::Stdout, b"late")).await;
        // Reads smaller than a chunk take it in pieces.
        let mut small = [0u8; 3];
        let n = r.read(&mut small).await.unwrap();
        assert_eq!(&small[..n], b"{\"a");
        let mut got = small[..n].to_vec();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"{\"a\":1}\n");
        assert_eq!(count.load(Ordering::Relaxed), 8);
        assert_eq!(tail.lock().unwrap().as_slice(), b"g: x");
        // Ended: reads stay at end of stream.
        assert_eq!(r.read(&mut small).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn reader_ends_when_the_run_drops_its_sender() {
        let (tx, rx) = mpsc::channel(8);
        let mut r = EventReader::new(
            rx,
            Arc::new(AtomicU64::new(0)),
            Arc::new(Mutex::new(Vec::new())),
            16,
        );
        tx.send(out(OutputStream::Stdout, b"partial"))
            .await
            .unwrap();
        drop(tx);
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"partial");
    }

    #[tokio::test]
    async fn writer_sends_each_write_as_a_chunk_and_shutdown_is_end_of_input() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut w = ChunkWriter::new(tx);
        w.write_all(b"{\"jsonrpc\":\"2.0\"}\n").await.unwrap();
        w.write_all(b"second\n").await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), b"{\"jsonrpc\":\"2.0\"}\n");
        assert_eq!(rx.recv().await.unwrap(), b"second\n");
        w.shutdown().await.unwrap();
        assert!(rx.recv().await.is_none(), "shutdown closes stdin");
        // Writing after the other side is gone is an error, not a hang.
        let (tx, rx) = mpsc::channel(1);
        let mut w = ChunkWriter::new(tx);
        drop(rx);
        let e = w.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
