//! Records written late. With `on_sink_failure = "warn"` an operation goes on when a sink
//! cannot take its record (a full disk under the trail); the record is then kept in the
//! store, in the same transaction that closes the operation (`close.rs`), and written
//! here: at every start and by a server's sweeper, before interrupted work is recorded. A
//! record that fails again stays for the next try. A record the store could not keep
//! either (the disk that filled holds the database too) leaves the operation's intent
//! open, which recovery records as interrupted: either way the trail gets a record.

use sandboxio_audit::AuditEvent;

use super::Gateway;
use crate::error::GatewayError;
use crate::store::Unrecorded;

impl Gateway {
    /// Writes the records kept since their sinks failed (`kept`, read by the caller in its
    /// own call to the store); returns how many were written to every sink that missed them.
    pub(super) async fn write_late_records(
        &self,
        kept: Vec<Unrecorded>,
    ) -> Result<usize, GatewayError> {
        if kept.is_empty() {
            return Ok(0);
        }
        let auditor = self.auditor.clone();
        self.on_store("writing records late", move |s, _| {
            let mut written = 0;
            for u in &kept {
                let event: AuditEvent = match serde_json::from_str(&u.event) {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(operation_id = %u.operation_id, "a kept record is unreadable ({e}); left in the store");
                        continue;
                    }
                };
                let left = auditor.emit_late(&event, &u.sinks);
                s.settle_unrecorded(&u.operation_id, &left)?;
                if left.is_empty() {
                    written += 1;
                    tracing::info!(operation_id = %u.operation_id, "a record its sinks could not take was written late");
                }
            }
            if written > 0 {
                s.put_heads(&auditor.heads_to_anchor(), chrono::Utc::now())?;
            }
            Ok(written)
        })
        .await
    }
}
