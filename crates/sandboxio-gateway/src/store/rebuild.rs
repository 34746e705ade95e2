//! Rebuilding a lost or damaged state database from the audit trail, on an operator's
//! command (`sandboxio state recover --from-trail`).
//!
//! What the trail can give back, it does: the settled spend of every scope (and the cost
//! ledger), and every idempotency key an operation ran under (replayed afterwards as
//! "ran before; not run again", since the trail keeps no output). What it cannot (pending
//! approvals, open reservations, rate-limit windows) starts empty. The kill switch is
//! engaged by the rebuild whatever it was, so nothing runs until an operator has looked
//! and runs `sandboxio resume`. The damaged database is moved aside, never deleted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::params;
use sandboxio_audit::TrailEntry;
use sandboxio_budget::{ReserveRequest, ScopeKey, ScopeState};
use sandboxio_core::{CostCategory, Layer, Money, OperationRecord, OperationStatus};
use serde::Serialize;

use super::guard::StateFiles;
use super::{SqliteStore, Store, SyncMode};
use crate::chain::Outcome;
use crate::error::{db, GatewayError};

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Rebuilt {
    /// Where the damaged database was moved (none when it was missing).
    pub moved_to: Option<PathBuf>,
    /// Records read from the trail.
    pub records: u64,
    /// Ledger lines (settled costs) restored.
    pub ledger_lines: u64,
    /// Total settled spend restored (global scope).
    pub spend: Money,
    /// Idempotency keys restored.
    pub keys: u64,
    /// The reason the kill switch was engaged with.
    pub kill_reason: String,
}

/// Whether the operation of this record went past the idempotency claim (so its key is
/// taken): it ran, was interrupted, or was about to run.
fn claimed_key(e: &TrailEntry) -> bool {
    !e.event.replayed
        && matches!(
            e.event.layer,
            Layer::Sandbox | Layer::Settle | Layer::Record | Layer::Journal
        )
}

fn category_of(event: &str) -> CostCategory {
    if event == "tool_call" {
        CostCategory::Api
    } else {
        CostCategory::Compute
    }
}

/// Moves the database aside, creates a new one and fills it from `entries` (one trail,
/// oldest first). The kill switch is engaged (and committed) first, so a rebuild that fails
/// half way leaves a database that runs nothing; it can be run again.
pub fn rebuild_from_trail(
    files: &StateFiles,
    entries: &[TrailEntry],
    idempotency_retention: Duration,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Rebuilt, GatewayError> {
    files.prepare_dir()?;
    let moved_to = files.move_db_aside()?;
    let store = SqliteStore::open(&files.db, SyncMode::Full)?;
    let kill_reason = format!(
        "state rebuilt from the audit trail by {by}: review `sandboxio costs` and the trail, then run `sandboxio resume`"
    );
    let mut out = Rebuilt {
        moved_to,
        records: entries.len() as u64,
        kill_reason: kill_reason.clone(),
        ..Rebuilt::default()
    };
    let now_ms = now.timestamp_millis();
    let retention_ms = i64::try_from(idempotency_retention.as_millis()).unwrap_or(i64::MAX);
    store.set_kill(&kill_reason, by, now)?;
    store.with_tx("rebuilding state from the audit trail", |tx| {
        let mut scopes: BTreeMap<ScopeKey, ScopeState> = BTreeMap::new();
        for e in entries {
            let ev = &e.event;
            let tenant = ev.tenant_id.clone().unwrap_or_else(|| "default".into());
            if let Some(cost) = ev.cost_settled.filter(|c| !c.is_zero() && !c.is_negative()) {
                let category = category_of(&ev.event);
                let req = ReserveRequest {
                    id: ev.operation_id.clone(),
                    tenant: tenant.clone(),
                    session: ev.session_id.clone(),
                    category,
                    estimate: None,
                    agent: None,
                    at: None,
                };
                for key in req.scopes() {
                    let st = scopes.entry(key).or_default();
                    let cat = st.spent.entry(category).or_insert(Money::ZERO);
                    *cat = cat.checked_add(cost).map_err(|_| GatewayError::RecoverRefused {
                        why: "the spend in the trail overflows".into(),
                    })?;
                }
                tx.execute(
                    "INSERT INTO ledger (operation_id, tenant, category, amount, at_ms, description, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        ev.operation_id,
                        tenant,
                        category.as_str(),
                        cost.to_string(),
                        ev.ts.timestamp_millis(),
                        format!("{} {} (rebuilt from the audit trail)", ev.event, ev.tool_name),
                        serde_json::to_string(&ev.labels).unwrap_or_else(|_| "{}".into())
                    ],
                )
                .map_err(db("restoring the ledger"))?;
                out.ledger_lines += 1;
                out.spend = out.spend.checked_add(cost).unwrap_or(out.spend);
            }
            // An operation recorded interrupted at recovery carries its key but not its
            // request's fingerprint: its key answers any request with that outcome
            // ([`ANY_REQUEST`]): it may have run, so it is not run again.
            let fp = ev.fingerprint.clone().or_else(|| {
                (ev.status == OperationStatus::Interrupted).then(|| super::ANY_REQUEST.to_string())
            });
            if let (Some(key), Some(fp)) = (&ev.idempotency_key, &fp) {
                let expires = ev.ts.timestamp_millis().saturating_add(retention_ms);
                if claimed_key(e) && expires > now_ms {
                    let mut rec = OperationRecord::new(ev.operation_id.clone(), ev.event.clone());
                    rec.status = OperationStatus::Interrupted;
                    rec.layer = Layer::Journal;
                    rec.reason = format!(
                        "the state was rebuilt from the audit trail: operation {} ran under this key ({}); its output is not kept there, so it is not run again",
                        ev.operation_id,
                        ev.status.as_str()
                    );
                    let outcome = serde_json::to_string(&Outcome {
                        record: rec,
                        result: None,
                        tool_output: None,
                    })
                    .unwrap_or_default();
                    tx.execute(
                        "INSERT INTO idempotency (tenant, key, fingerprint, operation_id, state, outcome, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, 'done', ?5, ?6, ?7)
                         ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, operation_id = excluded.operation_id, outcome = excluded.outcome, created_ms = excluded.created_ms, expires_ms = excluded.expires_ms",
                        params![tenant, key, fp, ev.operation_id, outcome, ev.ts.timestamp_millis(), expires],
                    )
                    .map_err(db("restoring idempotency keys"))?;
                }
            }
        }
        for (key, st) in &scopes {
            let json = serde_json::to_string(st).map_err(|e| GatewayError::Corrupt {
                table: "budget_scopes",
                column: "state",
                value: e.to_string(),
            })?;
            tx.execute(
                "INSERT INTO budget_scopes (scope, state) VALUES (?1, ?2) ON CONFLICT (scope) DO UPDATE SET state = excluded.state",
                params![key.to_string(), json],
            )
            .map_err(db("restoring budget scopes"))?;
        }
        out.keys = tx
            .query_row("SELECT COUNT(*) FROM idempotency", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(db("counting restored keys"))?;
        Ok(())
    })?;
    Ok(out)
}
