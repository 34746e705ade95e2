//! Recovery's first look: dead intents whose own record is already in this process's
//! trail. The process running them died between writing the record and its `finish`
//! (or a power loss took the `finish`, which is committed without a sync: the record is
//! the durable half). Such an operation ran and says so in the trail; recording it
//! again as `interrupted` gave it two contradictory final records, and releasing its
//! reservation let it run free of its budget. It is settled from its record instead:
//! charged what the record says, its key done, its journal row closed with its status.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use chrono::{DateTime, Utc};
use sandboxio_audit::{records_from, trail_files, AuditEvent};
use sandboxio_core::{CostCategory, Layer, Money, Operation, OperationRecord, OperationStatus};

use super::{Gateway, Outcome};
use crate::error::GatewayError;
use crate::store::{Finish, IdemEnd, JournalEntry, LedgerLine};

/// The final records `trails` hold for `ids`, reading each trail's files newest first and
/// stopping at the first file that starts before `since` (no intent is older). A
/// recovery's own `interrupted` records (layer `journal`) are not an operation's record.
pub(super) fn final_records(
    trails: &[String],
    ids: &HashSet<String>,
    since: DateTime<Utc>,
) -> HashMap<String, AuditEvent> {
    let mut found = HashMap::new();
    for trail in trails {
        let files = trail_files(Path::new(trail)).unwrap_or_default();
        for file in files.iter().rev() {
            let Ok(events) = records_from(std::slice::from_ref(file), 0) else {
                break;
            };
            let older = events.first().is_some_and(|e| e.ts < since);
            for e in events {
                if ids.contains(&e.operation_id) && e.layer != Layer::Journal && !e.replayed {
                    found.entry(e.operation_id.clone()).or_insert(e);
                }
            }
            if older || found.len() == ids.len() {
                break;
            }
        }
    }
    found
}

/// What `finish` stores for a dead intent settled from its record `ev`.
fn finishing(
    e: &JournalEntry,
    ev: &AuditEvent,
) -> (Option<Money>, LedgerLine, Option<(String, String, IdemEnd)>) {
    let op = serde_json::from_str::<Operation>(&e.intent).ok();
    let tenant = ev
        .tenant_id
        .clone()
        .or_else(|| op.as_ref().map(|o| o.principal.tenant.clone()))
        .unwrap_or_else(|| "default".into());
    let ran = matches!(ev.layer, Layer::Sandbox | Layer::Settle | Layer::Record);
    let charge = if ran { ev.cost_settled } else { None };
    let ledger = LedgerLine {
        operation_id: e.operation_id.clone(),
        tenant,
        category: op
            .as_ref()
            .map(|o| o.cost_category)
            .unwrap_or(CostCategory::Compute),
        amount: charge.unwrap_or(Money::ZERO),
        at: ev.ts,
        description: format!(
            "{} {} (settled from its record after a crash)",
            ev.event, ev.tool_name
        ),
        labels: ev.labels.clone(),
    };
    let idem = e.idem.clone().map(|(tenant, key)| {
        let end = if ran {
            let mut rec = OperationRecord::new(e.operation_id.clone(), ev.event.clone());
            rec.status = ev.status;
            rec.verdict = ev.decision;
            rec.layer = ev.layer;
            rec.exit_code = ev.exit_code;
            rec.cost_settled = ev.cost_settled;
            rec.reason = format!(
                "operation {} ran under this key ({}); the process that ran it stopped after \
                 recording it, and its output is not kept",
                e.operation_id,
                ev.status.as_str()
            );
            IdemEnd::Done(
                serde_json::to_string(&Outcome {
                    record: rec,
                    result: None,
                    tool_output: None,
                })
                .unwrap_or_default(),
            )
        } else {
            IdemEnd::Abandon
        };
        (tenant, key, end)
    });
    (charge, ledger, idem)
}

impl Gateway {
    /// Settles each of `dead` whose record this process's trails hold, from that record;
    /// returns how many, and the others (still to be recorded as interrupted).
    pub(super) async fn settle_recorded(
        &self,
        dead: Vec<JournalEntry>,
    ) -> Result<(usize, Vec<JournalEntry>), GatewayError> {
        let trails: Vec<String> = self
            .auditor()
            .heads()
            .into_iter()
            .map(|h| h.trail)
            .collect();
        if trails.is_empty() || dead.is_empty() {
            return Ok((0, dead));
        }
        let ids: HashSet<String> = dead.iter().map(|e| e.operation_id.clone()).collect();
        let since = dead
            .iter()
            .map(|e| e.started_at)
            .min()
            .unwrap_or_else(Utc::now);
        let records = tokio::task::spawn_blocking(move || final_records(&trails, &ids, since))
            .await
            .unwrap_or_default();
        let (recorded, rest): (Vec<JournalEntry>, Vec<JournalEntry>) = dead
            .into_iter()
            .partition(|e| records.contains_key(&e.operation_id));
        let mut settled = 0;
        for e in recorded {
            let Some(ev) = records.get(&e.operation_id).cloned() else {
                continue;
            };
            let (charge, ledger, idem) = finishing(&e, &ev);
            let status: OperationStatus = ev.status;
            tracing::warn!(
                operation_id = %e.operation_id,
                "settled an operation from its record: its process stopped between the record and its outcome"
            );
            self.on_store("settling a recorded operation", move |s, cfg| {
                s.finish(&Finish {
                    operation_id: &e.operation_id,
                    budget: &cfg.budget,
                    charge,
                    ledger: Some(ledger),
                    idem,
                    journal_status: status.as_str(),
                    heads: &[],
                    unrecorded: None,
                    now: Utc::now(),
                })
            })
            .await?;
            settled += 1;
        }
        Ok((settled, rest))
    }
}
