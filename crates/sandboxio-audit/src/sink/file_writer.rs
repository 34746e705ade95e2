//! The file sink: the trail ([`FileTrail`]) behind one writer thread.
//!
//! Appending a record blocks: on the trail's cross-process lock (another process writing
//! its record), on `write`, on `fsync`. Done on an async worker it would stall every other
//! task of that worker (a server's other requests, health checks, approval polls). So one
//! OS thread per sink owns the trail and does every append and the close; `emit` sends
//! the record down a channel and awaits the thread's answer, which comes after the write
//! and its `fsync`: the record is as durable when `emit` returns as when the write was
//! done inline. [`AuditSink::emit_blocking`] writes on the caller's thread instead, for a
//! caller already off the async workers (the gateway's closing store call), which saves
//! the hand-off. The thread runs no Python and no async code, so it has nothing to do with
//! an embedding interpreter's shutdown; it ends when the sink is closed or dropped.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;

use super::file::{FileSinkOptions, FileTrail};
use super::{AuditSink, BlockingEmit};
use crate::checkpoint::AuditKey;
use crate::error::AuditError;
use crate::event::AuditEvent;
use crate::head::SignedHead;

type Answer = Box<dyn FnOnce(Result<(), AuditError>) + Send>;

enum Job {
    /// One record's JSON, answered after it is written (and synced per the policy).
    Append(String, Answer),
    /// The closing checkpoint; the thread ends after answering.
    Close(Answer),
}

/// Appends one hash-chained JSON line per event to a file, from its own writer thread.
/// See the crate README for the format, the tamper evidence it gives, and its limits.
/// One writer per trail: two sinks (or processes) appending to the same path fork the
/// chain, which `verify` reports.
pub struct FileSink {
    trail: Arc<FileTrail>,
    name: String,
    writer: Mutex<Writer>,
}

/// The writer thread, started by the first record handed to it: a process that writes
/// only on its own threads (`emit_blocking`, as the gateway's closing call does) never
/// starts one, and closes the trail on the thread that closes the sink.
enum Writer {
    NotStarted,
    Running {
        jobs: mpsc::Sender<Job>,
        thread: JoinHandle<()>,
    },
    Closed,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<FileSink {}>", self.trail.path().display())
    }
}

impl FileSink {
    /// Opens (or creates) the trail at `opts.path` and writes an `open` checkpoint.
    ///
    /// An existing trail is continued: the state is recovered from the last checkpoint of
    /// the active file and the records after it (which must chain). A torn or garbage last
    /// line (a write cut by a crash, never acknowledged, or bytes appended by something
    /// else) is moved to a sibling file `<path>.torn-<time>` and a record saying so is
    /// written; anything wrong before the last line is an error. Every trail file is made
    /// private (0600).
    pub fn open(opts: FileSinkOptions, key: Arc<AuditKey>) -> Result<FileSink, AuditError> {
        Self::start(FileTrail::open(opts, key)?)
    }

    /// Starts a new signing key: the active file is closed (with a `rotate` checkpoint when
    /// the old private key is given) and renamed like a rotated file, and a new active file
    /// starts with an `open` checkpoint signed by `new_key` that continues the chain. The
    /// old file's last checkpoint is checked against `old_public` (skipped when empty: the
    /// chain is still checked). Record the rotation through an `Auditor` on the returned sink.
    pub fn open_rotating_key(
        opts: FileSinkOptions,
        new_key: Arc<AuditKey>,
        old_private: Option<Arc<AuditKey>>,
        old_public: &[ed25519_dalek::VerifyingKey],
    ) -> Result<FileSink, AuditError> {
        Self::start(FileTrail::open_rotating_key(
            opts,
            new_key,
            old_private,
            old_public,
        )?)
    }

    /// The sink of an open trail (its writer thread starts with the first handed record).
    fn start(trail: FileTrail) -> Result<FileSink, AuditError> {
        let trail = Arc::new(trail);
        Ok(FileSink {
            name: trail.name().to_string(),
            trail,
            writer: Mutex::new(Writer::NotStarted),
        })
    }

    /// The signed head of the trail as this sink last saw it: records so far and the last
    /// record's hash. Keep it outside the trail (the gateway keeps it in its store).
    pub fn head(&self) -> Option<SignedHead> {
        self.trail.head()
    }

    pub fn path(&self) -> &std::path::Path {
        self.trail.path()
    }

    /// Records written to the whole trail so far (the next record's `seq`).
    pub fn tree_size(&self) -> u64 {
        self.trail.tree_size()
    }

    fn closed(&self) -> AuditError {
        AuditError::SinkClosed {
            sink: self.name.clone(),
        }
    }

    /// Hands a record to the writer thread (started here the first time); `Err` (the
    /// sink's closed error) when the sink is closed.
    fn send(&self, job: Job) -> Result<(), AuditError> {
        let mut w = self.writer.lock().map_err(|_| self.closed())?;
        if matches!(*w, Writer::NotStarted) {
            let (jobs, rx) = mpsc::channel::<Job>();
            let owned = self.trail.clone();
            let thread = std::thread::Builder::new()
                .name("sandboxio-audit-writer".into())
                .spawn(move || write_loop(&owned, rx))
                .map_err(|e| AuditError::io(self.trail.path(), e))?;
            *w = Writer::Running { jobs, thread };
        }
        match &*w {
            Writer::Running { jobs, .. } => jobs.send(job).map_err(|_| self.closed()),
            _ => Err(self.closed()),
        }
    }

    /// Writes the closing checkpoint and syncs (on the writer thread when there is one,
    /// waited for here, after every record handed to it), then ends the thread. Later
    /// emits fail with `SinkClosed`. Idempotent.
    pub fn close_sync(&self) -> Result<(), AuditError> {
        let was = match self.writer.lock() {
            Ok(mut w) => std::mem::replace(&mut *w, Writer::Closed),
            Err(_) => return Err(self.closed()),
        };
        match was {
            Writer::Closed => Ok(()),
            Writer::NotStarted => self.trail.close_sync(),
            Writer::Running { jobs, thread } => {
                let (tx, rx) = mpsc::channel();
                let answer = match jobs.send(Job::Close(Box::new(move |r| {
                    let _ = tx.send(r);
                }))) {
                    Ok(()) => rx.recv().unwrap_or_else(|_| Err(self.closed())),
                    // The thread is gone (it closed the trail on its way out).
                    Err(_) => Ok(()),
                };
                drop(jobs);
                let _ = thread.join();
                answer
            }
        }
    }
}

/// The writer thread: every append and the close, in the order they were sent.
fn write_loop(trail: &FileTrail, jobs: mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Append(json, answer) => answer(trail.append(&json)),
            Job::Close(answer) => {
                answer(trail.close_sync());
                return;
            }
        }
    }
    // Every sender is gone without a close (cannot happen while the sink lives: its drop
    // closes first); close anyway so the trail ends with a checkpoint.
    let _ = trail.close_sync();
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if let Err(e) = self.close_sync() {
            tracing::warn!(target: "sandboxio::audit", "closing audit file failed: {e}");
        }
    }
}

#[async_trait]
impl AuditSink for FileSink {
    /// One `write(2)` of the line to a file opened with `O_APPEND` (plus `fsync` per the
    /// policy), done by the writer thread; answered once written. Not cancelled by the
    /// Auditor's timeout once sent: a dropped `emit` leaves the write to finish.
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let json = event.as_json()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Append(
            json,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        ))?;
        rx.await.unwrap_or_else(|_| Err(self.closed()))
    }
    /// The same write as `emit`, done on the calling thread (no hand-off to the writer
    /// thread; both take the trail's state lock, so records stay in one chain). A lock held
    /// by another process past `timeout` leaves the event unwritten.
    fn emit_blocking(&self, event: &AuditEvent, timeout: std::time::Duration) -> BlockingEmit {
        let json = match event.as_json() {
            Ok(j) => j,
            Err(e) => return BlockingEmit::Done(Err(e)),
        };
        match self.trail.append_within(&json, timeout) {
            Ok(true) => BlockingEmit::Done(Ok(())),
            Ok(false) => BlockingEmit::TimedOut,
            Err(e) => BlockingEmit::Done(Err(e)),
        }
    }
    fn has_blocking_emit(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        &self.name
    }
    async fn close(&self) -> Result<(), AuditError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job::Close(Box::new(move |r| {
            let _ = tx.send(r);
        }));
        {
            let mut w = self.writer.lock().map_err(|_| self.closed())?;
            match &*w {
                // No thread was ever needed: close here (one write, synced per the policy).
                Writer::NotStarted => {
                    *w = Writer::Closed;
                    drop(w);
                    return self.trail.close_sync();
                }
                Writer::Closed => return Ok(()),
                Writer::Running { jobs, .. } => {
                    if jobs.send(job).is_err() {
                        return Ok(());
                    }
                }
            }
        }
        rx.await.unwrap_or_else(|_| Err(self.closed()))
    }
    fn head(&self) -> Option<SignedHead> {
        FileSink::head(self)
    }
}
