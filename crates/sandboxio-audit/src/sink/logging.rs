use async_trait::async_trait;

use super::{AuditSink, BlockingEmit};
use crate::error::AuditError;
use crate::event::AuditEvent;

/// The `tracing` target audit lines are written to.
pub const AUDIT_TARGET: &str = "sandboxio::audit";

/// Writes one JSON line per event as an INFO event on the `tracing` facade, target
/// `sandboxio::audit`. It installs no subscriber: the host decides where lines go.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoggingSink;

impl LoggingSink {
    pub fn new() -> Self {
        LoggingSink
    }
}

#[async_trait]
impl AuditSink for LoggingSink {
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let line = event.as_json()?;
        tracing::info!(target: AUDIT_TARGET, "{line}");
        Ok(())
    }
    fn emit_blocking(&self, event: &AuditEvent, _timeout: std::time::Duration) -> BlockingEmit {
        BlockingEmit::Done(event.as_json().map(|line| {
            tracing::info!(target: AUDIT_TARGET, "{line}");
        }))
    }
    fn has_blocking_emit(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "logging"
    }
}
