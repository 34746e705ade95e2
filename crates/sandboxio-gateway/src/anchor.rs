//! Keeping the audit trail anchored outside itself: after each record the gateway stores
//! the trails' signed heads (see `Finish::heads`); at start it checks that each trail
//! still holds the head stored for it. A trail that does not (deleted, cut, swapped for
//! an older copy) is recorded, in the trail and as a permanent row in the store, and the
//! anchor restarts from the trail as it is, so `sandboxio audit verify` keeps reporting it.

use std::path::Path;

use chrono::Utc;
use sandboxio_core::{Layer, OperationRecord, OperationStatus, Verdict};

use crate::chain::Gateway;
use crate::error::GatewayError;
use crate::store::AnchorBreak;

/// The event of the record written when a trail no longer holds its signed head.
pub const ANCHOR_BROKEN_EVENT: &str = "audit.anchor_broken";

fn record_id() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    hex::encode(b)
}

impl Gateway {
    /// Compares every file trail with its stored signed head; records each break (in the
    /// trail and in the store). Call before this process writes any record.
    pub async fn check_anchor(&self) -> Result<Vec<AnchorBreak>, GatewayError> {
        let stored = self
            .on_store("reading the trail heads", |s, _| s.heads())
            .await?;
        let mut breaks = Vec::new();
        let mut moved_on = false;
        for current in self.auditor().heads() {
            let Some(old) = stored.iter().find(|h| h.trail == current.trail) else {
                // No head kept for this trail: a new one, or a state directory moved or
                // restored elsewhere (heads are kept by the trail's path), maybe with an
                // older database. Every record it holds is then checked against the store.
                moved_on = true;
                if current.size > 0 {
                    let from_start = sandboxio_audit::SignedHead::genesis(current.trail.clone());
                    let files =
                        sandboxio_audit::trail_files(Path::new(&current.trail)).unwrap_or_default();
                    self.check_no_lost_work(&from_start, files).await?;
                }
                continue;
            };
            // The sink opened the trail and found exactly the stored head at its end (the
            // last record's hash, checked against the chain and a checkpoint signed with
            // this key): nothing to read again.
            if current.size == old.size && current.last_hash == old.last_hash {
                continue;
            }
            moved_on = true;
            let files = sandboxio_audit::trail_files(Path::new(&old.trail)).unwrap_or_default();
            let check = sandboxio_audit::check_head(&files, old);
            if check.ok() {
                self.check_no_lost_work(old, files).await?;
                continue;
            }
            let found = check.describe();
            tracing::warn!(
                code = "SBX_E1535",
                trail = %old.trail,
                "the audit trail does not hold its signed head: {found}"
            );
            let mut rec = OperationRecord::new(record_id(), ANCHOR_BROKEN_EVENT);
            rec.backend = "audit".into();
            rec.status = OperationStatus::Warning;
            rec.verdict = Verdict::Allow;
            rec.layer = Layer::Record;
            rec.error_code = Some("SBX_E1535".into());
            rec.path = Some(old.trail.clone());
            rec.reason = format!(
                "the audit trail does not hold the signed head kept for it ({} record(s), last hash {}): {found}",
                old.size, old.last_hash
            );
            self.auditor()
                .record(rec)
                .await
                .map_err(|_| GatewayError::Unrecorded)?;
            let new_head = self
                .auditor()
                .heads_to_anchor()
                .into_iter()
                .find(|h| h.trail == old.trail);
            let b = AnchorBreak {
                trail: old.trail.clone(),
                at: Utc::now(),
                head: old.clone(),
                found,
            };
            let kept = b.clone();
            self.on_store("keeping an anchor break", move |s, _| {
                s.record_anchor_break(&kept, new_head.as_ref())
            })
            .await?;
            breaks.push(b);
        }
        // Trails without a stored head yet (a new trail, or a store from before heads), or
        // ahead of it (a process stopped between its record and storing the head).
        if moved_on {
            self.store_heads_async().await;
        }
        Ok(breaks)
    }

    /// The other direction of the anchor (`store::lost_work`): the trail holds its head
    /// and more after it, and the journal must hold every operation those later records
    /// show as admitted. One it lacks means the store lost committed work: nothing runs
    /// until an operator rebuilds the state from the trail (`SBX_E1533`).
    async fn check_no_lost_work(
        &self,
        head: &sandboxio_audit::SignedHead,
        files: Vec<std::path::PathBuf>,
    ) -> Result<(), GatewayError> {
        let h = head.clone();
        let since = crate::store::not_before(Utc::now(), self.config().journal_retention);
        let lost = self
            .on_store("reading the journal", move |s, _| {
                crate::store::lost_after(s, &h, &files, since)
            })
            .await?;
        let Some(lost) = lost else {
            return Ok(());
        };
        // Nothing this process does may store a head over the loss (an engaged kill
        // switch is still recorded, in the trail): the next start must find it too.
        self.auditor().freeze_heads();
        tracing::error!(
            code = "SBX_E1533",
            trail = %head.trail,
            "the state store lacks work its audit trail records: {}",
            lost.describe()
        );
        Err(GatewayError::StateCorrupt {
            db: format!("the {} state store", self.store().describe().backend),
            why: format!(
                "{} (trail `{}`): committed work was lost (a damaged write-ahead log, or an \
                 older copy of the database)",
                lost.describe(),
                head.trail
            ),
        })
    }

    /// Stores the sinks' current signed heads (after records written outside an
    /// operation). A failure is logged: the next operation stores them again.
    pub fn store_heads(&self) {
        let heads = self.auditor().heads_to_anchor();
        if let Err(e) = self.store().put_heads(&heads, Utc::now()) {
            use sandboxio_core::ErrorCode as _;
            tracing::warn!(code = e.code(), "storing the trail head failed: {e}");
        }
    }

    /// [`Gateway::store_heads`] off the async workers.
    pub async fn store_heads_async(&self) {
        let heads = self.auditor().heads_to_anchor();
        let put = self
            .on_store("storing the trail head", move |s, _| {
                s.put_heads(&heads, Utc::now())
            })
            .await;
        if let Err(e) = put {
            use sandboxio_core::ErrorCode as _;
            tracing::warn!(code = e.code(), "storing the trail head failed: {e}");
        }
    }

    /// Records an administrative event (kill, resume, recovery, key rotation) and anchors
    /// the trail after it.
    pub async fn record_admin(&self, rec: OperationRecord) -> Result<(), GatewayError> {
        self.auditor()
            .record(rec)
            .await
            .map_err(|_| GatewayError::Unrecorded)?;
        self.store_heads_async().await;
        Ok(())
    }
}
