use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{AuditSink, BlockingEmit};
use crate::error::AuditError;
use crate::event::AuditEvent;

/// A bounded buffer in front of another sink. `emit` enqueues at once and never waits;
/// the host runs [`QueueSink::drain`] in its own task (the library starts none). When the
/// queue is full the OLDEST event is dropped, a warning is logged and the drop is counted.
pub struct QueueSink {
    inner: Arc<dyn AuditSink>,
    capacity: usize,
    queue: Mutex<VecDeque<AuditEvent>>,
    notify: Notify,
    dropped: AtomicU64,
    inner_failures: AtomicU64,
    closed: AtomicBool,
    name: String,
}

impl std::fmt::Debug for QueueSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<QueueSink {} len={} cap={} dropped={}>",
            self.inner.name(),
            self.len(),
            self.capacity,
            self.dropped()
        )
    }
}

impl QueueSink {
    /// A queue of at most `capacity` events (at least 1) in front of `inner`.
    pub fn new(inner: Arc<dyn AuditSink>, capacity: usize) -> Self {
        let name = format!("queue({})", inner.name());
        QueueSink {
            inner,
            capacity: capacity.max(1),
            queue: Mutex::new(VecDeque::with_capacity(capacity.clamp(1, 4096))),
            notify: Notify::new(),
            dropped: AtomicU64::new(0),
            inner_failures: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            name,
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events the inner sink refused while draining (each also logged as a warning).
    pub fn inner_failures(&self) -> u64 {
        self.inner_failures.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.queue.lock().map(|q| q.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pop(&self) -> Option<AuditEvent> {
        self.queue.lock().ok().and_then(|mut q| q.pop_front())
    }

    /// Sends every event queued now to the inner sink; returns how many were taken.
    pub async fn drain_available(&self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.pop() {
            n += 1;
            if let Err(e) = self.inner.emit(&ev).await {
                self.inner_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "sandboxio::audit", sink = %self.inner.name(), code = %sandboxio_core::ErrorCode::code(&e), "queued audit event lost: {e}");
            }
        }
        n
    }

    /// Runs until [`AuditSink::close`] is called on this queue, forwarding events as they
    /// arrive. Run it in the host's own task; after close it drains what is left, closes the
    /// inner sink (the file sink writes its closing checkpoint) and returns.
    pub async fn drain(&self) {
        loop {
            let notified = self.notify.notified();
            self.drain_available().await;
            if self.closed.load(Ordering::Acquire) {
                self.drain_available().await;
                if let Err(e) = self.inner.close().await {
                    tracing::warn!(target: "sandboxio::audit", sink = %self.inner.name(), "closing audit sink failed: {e}");
                }
                return;
            }
            notified.await;
        }
    }
}

impl QueueSink {
    /// Queues `event` (never waits): what both `emit` and `emit_blocking` do.
    fn enqueue(&self, event: &AuditEvent) -> Result<(), AuditError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(AuditError::SinkClosed {
                sink: self.name.clone(),
            });
        }
        let dropped = {
            let mut q = self.queue.lock().map_err(|_| AuditError::SinkFailed {
                sink: self.name.clone(),
                why: "queue lock poisoned".into(),
                timed_out: false,
            })?;
            q.push_back(event.clone());
            if q.len() > self.capacity {
                q.pop_front()
            } else {
                None
            }
        };
        if let Some(old) = dropped {
            let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                target: "sandboxio::audit",
                sink = %self.name,
                dropped_operation_id = %old.operation_id,
                dropped_total = total,
                "audit queue full: dropped the oldest event"
            );
        }
        self.notify.notify_one();
        Ok(())
    }
}

#[async_trait]
impl AuditSink for QueueSink {
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.enqueue(event)
    }

    fn emit_blocking(&self, event: &AuditEvent, _timeout: std::time::Duration) -> BlockingEmit {
        BlockingEmit::Done(self.enqueue(event))
    }

    fn has_blocking_emit(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn close(&self) -> Result<(), AuditError> {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_one();
        Ok(())
    }
}
