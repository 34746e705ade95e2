//! Records written late. With `on_sink_failure = "warn"` an operation goes on when a sink
//! cannot take its record (a full disk under the trail); the record is then kept in the
//! store, in the same transaction that closes the operation (`close.rs`), and written
//! here: at every start and by a server's sweeper, before interrupted work is recorded. A
//! record that fails again stays for the next try. A record the store could not keep
//! either (the disk that filled holds the database too) leaves the operation's intent
//! open, which recovery records as interrupted: either way the trail gets a record.

use std::collections::HashSet;

use sandboxio_audit::AuditEvent;

use super::Gateway;
use crate::error::GatewayError;
use crate::store::Unrecorded;

/// The most kept records one pass writes (the rest wait for the next pass), so that a
/// start after a long outage of a sink stays short.
pub(super) const PER_PASS: usize = 1000;

impl Gateway {
    /// Writes the records kept since their sinks failed (`kept`, read by the caller in its
    /// own call to the store); returns how many were written to every sink that missed them.
    /// A sink that fails again is not tried for the rest of the pass: a sink that is still
    /// down costs one timeout per pass, not one per record.
    pub(super) async fn write_late_records(
        &self,
        kept: Vec<Unrecorded>,
    ) -> Result<usize, GatewayError> {
        if kept.is_empty() {
            return Ok(0);
        }
        let auditor = self.auditor.clone();
        self.on_store("writing records late", move |s, _| {
            let mut down: HashSet<String> = HashSet::new();
            let mut written = 0;
            for u in &kept {
                let event: AuditEvent = match serde_json::from_str(&u.event) {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(operation_id = %u.operation_id, "a kept record is unreadable ({e}); left in the store");
                        continue;
                    }
                };
                let (now, later): (Vec<String>, Vec<String>) =
                    u.sinks.iter().cloned().partition(|n| !down.contains(n));
                if now.is_empty() {
                    continue;
                }
                let failed = auditor.emit_late(&event, &now);
                down.extend(failed.iter().cloned());
                let left: Vec<String> = failed.into_iter().chain(later).collect();
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
