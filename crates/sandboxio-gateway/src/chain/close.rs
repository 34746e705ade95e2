//! The closing phase of an operation, as one call off the async workers: the record to
//! every audit sink (the file trail writes and fsyncs on this thread, not its writer
//! thread), the trails' signed heads, then either the `finish` transaction (settle or
//! release, the key's outcome, the journal's outcome, the heads) or, for an operation
//! that was never admitted, the heads alone; then the budget scopes for the metrics.
//!
//! When a sink has no blocking path (an embedding's sink that must run on its caller's
//! task and event loop), the record is awaited on the operation's task first, as before,
//! and the closing call does the rest.
//!
//! One hand-off to the blocking pool serves all of it: each hand-off wakes a parked thread
//! and then the waiting task (tens to hundreds of microseconds each on a small VM), which
//! cost more than the work when the record, `finish` and the metrics read were three.
//! The order is the one the chain always had: the record is durable before `finish`
//! closes the journal, so a crash between them leaves an open intent that recovery
//! records as interrupted, and no operation that ran is missing from the trail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use sandboxio_audit::{AuditError, Auditor, RecordOutcome, RedactedRecord};
use sandboxio_budget::{ScopeKey, Settlement, Summary};
use sandboxio_core::{ErrorCode, Money};

use crate::config::GatewayConfig;
use crate::store::{Finish, IdemEnd, LedgerLine, Store, StoreResult, Unrecorded};

/// What the closing call needs.
pub(super) struct Closing {
    /// The redacted record (the auditor takes that pass as its own) and the caller's span,
    /// its span's parent; `None` when it was recorded already.
    pub record: Option<(RedactedRecord, opentelemetry::Context)>,
    /// For an admitted operation: what `finish` writes.
    pub finish: Option<Finishing>,
    /// Budget scopes whose spend goes to the metrics after `finish` (empty: none).
    pub scopes: Vec<ScopeKey>,
    /// The record, when it was written before this call and a sink could not take it.
    pub unrecorded: Option<Unrecorded>,
}

/// The record to keep in the store when a sink could not take it (warn mode), else `None`.
pub(super) fn unrecorded_of(recorded: &Result<RecordOutcome, AuditError>) -> Option<Unrecorded> {
    let out = recorded.as_ref().ok()?;
    if out.failures.is_empty() {
        return None;
    }
    Some(Unrecorded {
        operation_id: out.event.operation_id.clone(),
        event: serde_json::to_string(&out.event).ok()?,
        sinks: out.failures.iter().map(|f| f.sink.clone()).collect(),
        at: Utc::now(),
    })
}

/// The inputs of [`Finish`] that outlive the call.
pub(super) struct Finishing {
    pub operation_id: String,
    pub charge: Option<Money>,
    pub ledger: LedgerLine,
    pub idem: Option<(String, String, IdemEnd)>,
    pub journal_status: &'static str,
}

/// What the closing call did; each part failed or not on its own.
pub(super) struct Closed {
    /// `None` when the record was not this call's to write.
    pub recorded: Option<Result<RecordOutcome, AuditError>>,
    /// `Ok(None)` when nothing was admitted (or nothing was reserved).
    pub finished: StoreResult<Option<Settlement>>,
    /// For an operation never admitted: storing the trail heads.
    pub heads_stored: StoreResult<()>,
    pub summaries: Option<StoreResult<Vec<Summary>>>,
}

/// How long a `finish` the store could not take (a database restarting, a connection
/// lost) is tried again before the operation is left open for recovery.
pub(super) const FINISH_PATIENCE: Duration = Duration::from_secs(60);

/// `finish`, tried again while the store is unavailable (transient errors only), for up
/// to [`FINISH_PATIENCE`]. The record is already in the trail: an operation left open
/// would be recorded a second time, as interrupted, by whichever process recovers it, and
/// on a shared store that is usually another replica, which cannot see this one's trail.
/// While this process is alive and keeps its lease nobody else touches the operation, so
/// waiting for the store here settles it once, with its real outcome.
fn finish_patiently(
    store: &dyn Store,
    cfg: &GatewayConfig,
    f: &Finishing,
    heads: &[sandboxio_audit::SignedHead],
    unrecorded: Option<&Unrecorded>,
) -> StoreResult<Option<Settlement>> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let r = store.finish(&Finish {
            operation_id: &f.operation_id,
            budget: &cfg.budget,
            charge: f.charge,
            ledger: Some(f.ledger.clone()),
            idem: f.idem.clone(),
            journal_status: f.journal_status,
            heads,
            unrecorded,
            now: Utc::now(),
        });
        match r {
            Err(e) if e.is_transient() && started.elapsed() + pause < FINISH_PATIENCE => {
                tracing::warn!(operation_id = %f.operation_id, code = e.code(), "finishing in the store failed; trying again in {pause:?}: {e}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Runs on the blocking pool (see `offload.rs`); never on an async worker.
pub(super) fn close(
    auditor: &Arc<Auditor>,
    store: &dyn Store,
    cfg: &GatewayConfig,
    c: Closing,
) -> Closed {
    let recorded = c
        .record
        .map(|(rec, parent)| auditor.record_redacted_blocking(rec, &parent));
    // A record a sink could not take stays in the store until it is written (`late.rs`).
    let unrecorded = recorded.as_ref().and_then(unrecorded_of).or(c.unrecorded);
    // The trail's signed head after this record, kept in the store (the trail anchored
    // outside itself): in the closing transaction, or on its own when nothing was admitted.
    let heads = auditor.heads_to_anchor();
    let (finished, heads_stored) = match c.finish {
        Some(f) => {
            let finished = finish_patiently(store, cfg, &f, &heads, unrecorded.as_ref());
            (finished, Ok(()))
        }
        None => {
            if let Some(u) = &unrecorded {
                if let Err(e) = store.keep_unrecorded(u) {
                    tracing::warn!(operation_id = %u.operation_id, "keeping a record its sinks could not take failed: {e}");
                }
            }
            (Ok(None), store.put_heads(&heads, Utc::now()))
        }
    };
    let summaries = match &finished {
        Ok(Some(_)) if !c.scopes.is_empty() => Some(store.budget_summary(&cfg.budget, &c.scopes)),
        _ => None,
    };
    Closed {
        recorded,
        finished,
        heads_stored,
        summaries,
    }
}
