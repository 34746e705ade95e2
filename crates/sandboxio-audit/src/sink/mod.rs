//! Audit sinks: where rendered [`AuditEvent`]s go.
//!
//! `emit` must return promptly; buffering is the sink's job (see [`QueueSink`]). The
//! `Auditor` awaits every sink inline, bounded by its timeout.

mod file;
pub mod file_mode;
pub(crate) mod file_paths;
pub(crate) mod file_repair;
mod file_writer;
mod logging;
mod queue;

use async_trait::async_trait;

pub use file::{FileSinkOptions, FsyncPolicy};
pub use file_repair::REPAIR_EVENT;
pub use file_writer::FileSink;
pub use logging::{LoggingSink, AUDIT_TARGET};
pub use queue::QueueSink;

use crate::error::AuditError;
use crate::event::AuditEvent;
use crate::head::SignedHead;

/// What [`AuditSink::emit_blocking`] did.
#[derive(Debug)]
pub enum BlockingEmit {
    /// The sink has no blocking path: the caller awaits [`AuditSink::emit`] instead.
    Unsupported,
    /// Written (or refused) on the calling thread.
    Done(Result<(), AuditError>),
    /// Not written: the sink could not start its write within the timeout (another
    /// process held the trail's lock). Nothing of the event reached the sink.
    TimedOut,
}

/// A destination for audit events.
#[async_trait]
pub trait AuditSink: Send + Sync {
    /// Records one event. Must return promptly.
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError>;
    /// Records one event on the calling thread, which may block and is never an async
    /// worker ([`Auditor::record_blocking`](crate::Auditor::record_blocking)): a sink that
    /// writes to a file does it here without handing the event to another thread. A wait
    /// for someone else (a lock) is bounded by `timeout`. The default has no blocking path.
    fn emit_blocking(&self, _event: &AuditEvent, _timeout: std::time::Duration) -> BlockingEmit {
        BlockingEmit::Unsupported
    }
    /// Whether [`AuditSink::emit_blocking`] writes (true for a sink that overrides it).
    /// A sink without it (one that must run on its caller's task, like an embedding's
    /// sink bound to an event loop) keeps every record on the awaited `emit`.
    fn has_blocking_emit(&self) -> bool {
        false
    }
    /// A short name for warnings, metrics and errors.
    fn name(&self) -> &str;
    /// Flushes and closes the sink (the file sink writes its closing checkpoint).
    async fn close(&self) -> Result<(), AuditError> {
        Ok(())
    }
    /// The signed head of the trail this sink writes, when it keeps one (the file sink).
    fn head(&self) -> Option<SignedHead> {
        None
    }
}

/// Discards every event. The default sink.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopSink;

#[async_trait]
impl AuditSink for NoopSink {
    async fn emit(&self, _event: &AuditEvent) -> Result<(), AuditError> {
        Ok(())
    }
    fn emit_blocking(&self, _event: &AuditEvent, _timeout: std::time::Duration) -> BlockingEmit {
        BlockingEmit::Done(Ok(()))
    }
    fn has_blocking_emit(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "noop"
    }
}
