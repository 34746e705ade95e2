//! Live output leaving the gateway: every chunk is redacted before the caller sees it.
//!
//! Each stream has its own [`StreamRedactor`], which holds back a short tail that could be
//! the start of a secret split across two chunks. What is held back goes out with the next
//! chunk of the same stream, before any chunk of the other stream (so the interleaving of
//! stdout and stderr is kept), before the exit event, and when the stream stays idle for
//! [`IDLE_FLUSH`] (so a prompt without a newline still shows).

use std::sync::Arc;
use std::time::Duration;

use sandboxio_audit::{Redactor, StreamRedactor};
use sandboxio_core::{ExecEvent, OutputStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long a held-back tail may wait for more output before it is sent as it is.
pub const IDLE_FLUSH: Duration = Duration::from_millis(50);
/// Events buffered between the sandbox and the redactor.
const CHANNEL: usize = 64;

/// A sender for the sandbox's raw events, and the task that redacts them into `out`.
/// The task ends when the sender (and its clones) are dropped, after flushing.
pub(crate) fn redacting_forwarder(
    redactor: Arc<Redactor>,
    out: mpsc::Sender<ExecEvent>,
) -> (mpsc::Sender<ExecEvent>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(CHANNEL);
    let task = tokio::spawn(forward(redactor, rx, out));
    (tx, task)
}

struct Held {
    r: StreamRedactor,
    /// Time of the newest chunk taken in (the held tail leaves with it).
    elapsed_us: u64,
}

impl Held {
    fn new() -> Self {
        Held {
            r: StreamRedactor::new(),
            elapsed_us: 0,
        }
    }
}

async fn forward(
    redactor: Arc<Redactor>,
    mut rx: mpsc::Receiver<ExecEvent>,
    out: mpsc::Sender<ExecEvent>,
) {
    let mut held = [Held::new(), Held::new()];
    let idx = |s: OutputStream| match s {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    };
    let streams = [OutputStream::Stdout, OutputStream::Stderr];
    loop {
        let pending = held.iter().any(|h| h.r.pending() > 0);
        let next = if pending {
            match tokio::time::timeout(IDLE_FLUSH, rx.recv()).await {
                Ok(ev) => ev,
                Err(_idle) => {
                    for s in streams {
                        if !flush(&redactor, &mut held[idx(s)], s, &out).await {
                            return;
                        }
                    }
                    continue;
                }
            }
        } else {
            rx.recv().await
        };
        match next {
            Some(ExecEvent::Output {
                stream,
                data,
                elapsed_us,
            }) => {
                let other = match stream {
                    OutputStream::Stdout => OutputStream::Stderr,
                    OutputStream::Stderr => OutputStream::Stdout,
                };
                if !flush(&redactor, &mut held[idx(other)], other, &out).await {
                    return;
                }
                let h = &mut held[idx(stream)];
                h.elapsed_us = elapsed_us;
                let data = h.r.push(&redactor, &data);
                if !data.is_empty() {
                    let ev = ExecEvent::Output {
                        stream,
                        data,
                        elapsed_us,
                    };
                    if out.send(ev).await.is_err() {
                        return;
                    }
                }
            }
            Some(exit @ ExecEvent::Exit { .. }) => {
                for s in streams {
                    if !flush(&redactor, &mut held[idx(s)], s, &out).await {
                        return;
                    }
                }
                if out.send(exit).await.is_err() {
                    return;
                }
            }
            None => {
                for s in streams {
                    if !flush(&redactor, &mut held[idx(s)], s, &out).await {
                        return;
                    }
                }
                return;
            }
        }
    }
}

/// Sends what `h` holds, redacted; false when the caller is gone.
async fn flush(
    redactor: &Redactor,
    h: &mut Held,
    stream: OutputStream,
    out: &mpsc::Sender<ExecEvent>,
) -> bool {
    if h.r.pending() == 0 {
        return true;
    }
    let data = h.r.flush(redactor);
    out.send(ExecEvent::Output {
        stream,
        data,
        elapsed_us: h.elapsed_us,
    })
    .await
    .is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sandboxio_audit::Secret;
    use sandboxio_core::ExitStatus;

    fn out(stream: OutputStream, data: &[u8]) -> ExecEvent {
        ExecEvent::Output {
            stream,
            data: data.to_vec(),
            elapsed_us: 1,
        }
    }

    #[tokio::test]
    async fn split_secret_is_redacted_and_interleaving_is_kept() {
        let r = Arc::new(
            Redactor::builder()
                .secret(&Secret::new("hunter2-correct-horse"))
                .build()
                .unwrap(),
        );
        let (caller_tx, mut caller_rx) = mpsc::channel(64);
        let (tx, task) = redacting_forwarder(r, caller_tx);
        tx.send(out(OutputStream::Stdout, b"one hunter2-cor"))
            .await
            .unwrap();
        tx.send(out(OutputStream::Stdout, b"rect-horse\n"))
            .await
            .unwrap();
        tx.send(out(OutputStream::Stderr, b"two\n")).await.unwrap();
        tx.send(out(OutputStream::Stdout, b"three\n"))
            .await
            .unwrap();
        tx.send(ExecEvent::Exit {
            exit: ExitStatus::Code(0),
            elapsed_us: 2,
        })
        .await
        .unwrap();
        drop(tx);
        task.await.unwrap();
        let mut seen = Vec::new();
        while let Some(ev) = caller_rx.recv().await {
            seen.push(ev);
        }
        let text: Vec<(Option<OutputStream>, String)> = seen
            .iter()
            .map(|e| match e {
                ExecEvent::Output { stream, data, .. } => {
                    (Some(*stream), String::from_utf8_lossy(data).into_owned())
                }
                ExecEvent::Exit { .. } => (None, String::new()),
            })
            .collect();
        assert_eq!(text.len(), 4, "{text:?}");
        assert_eq!(text[0].0, Some(OutputStream::Stdout));
        assert!(text[0].1.starts_with("one [REDACTED:"), "{text:?}");
        assert!(!text[0].1.contains("hunter2"));
        assert_eq!(text[1], (Some(OutputStream::Stderr), "two\n".to_string()));
        assert_eq!(text[2], (Some(OutputStream::Stdout), "three\n".to_string()));
        assert_eq!(text[3].0, None);
    }
}
