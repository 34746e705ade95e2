//! The other direction of the trail's anchor: a store that has lost committed work.
//!
//! Every operation the chain admits is journalled (durably) before it runs, and its record
//! is written after; the trail's signed head is stored with each operation's outcome. So
//! the records after a trail's stored head that show an admitted operation (a reservation
//! made, not a replay) all name operations the journal holds. One it lacks means the
//! store went back in time: SQLite cut a damaged write-ahead log short, or an older copy
//! of the database was put in place. Its spend, keys and approvals are then not known.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sandboxio_audit::{check_head, records_from, trail_files, AuditEvent, SignedHead};
use sandboxio_core::OperationStatus;

use super::{Store, StoreResult};

/// What the store lacks: how many admitted operations, and the first of them; or an
/// operator's safety action it no longer reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostWork {
    Operations {
        count: usize,
        first: String,
    },
    /// The trail records the kill switch engaged (its last kill or resume) after the
    /// stored head; the store has it released.
    KillSwitch {
        operation: String,
    },
    /// The trail records an API key revoked after the stored head; the store has it live
    /// (or has never heard of it).
    Revocation {
        key: String,
        operation: String,
    },
}

impl LostWork {
    /// For the refusal's text: what the trail records that the store lacks.
    pub fn describe(&self) -> String {
        match self {
            LostWork::Operations { count, first } => format!(
                "it lacks {count} operation(s) that the audit trail records as admitted after \
                 its last signed head, the first `{first}`"
            ),
            LostWork::KillSwitch { operation } => format!(
                "the audit trail records the kill switch engaged after its last signed head \
                 (operation `{operation}`), and the store has it released"
            ),
            LostWork::Revocation { key, operation } => format!(
                "the audit trail records API key `{key}` revoked after its last signed head \
                 (operation `{operation}`), and the store has it live"
            ),
        }
    }
}

/// Of the records `head`'s trail holds after `head`, the admitted operations `store`'s
/// journal lacks, among those recorded since `not_before`. `None` when it lacks none, or
/// when the trail does not extend the head (cut, replaced or unreadable: the anchor's own
/// check reports that).
///
/// `not_before`: the journal keeps a settled operation for its retention only (a replica
/// down for longer finds its last operations, settled by the others, pruned): records older
/// than that prove nothing and are not checked ([`not_before`]).
pub fn lost_work(
    store: &dyn Store,
    head: &SignedHead,
    not_before: DateTime<Utc>,
) -> StoreResult<Option<LostWork>> {
    let files = trail_files(Path::new(&head.trail)).unwrap_or_default();
    if files.is_empty() || !check_head(&files, head).ok() {
        return Ok(None);
    }
    lost_after(store, head, &files, not_before)
}

/// The oldest record [`lost_work`] checks, for a journal kept `retention`: inside it by an
/// hour, for clocks that differ between replicas, or by half a retention shorter than two
/// hours (an hour off a retention under an hour was a cut-off in the future: nothing
/// checked at all).
pub fn not_before(now: DateTime<Utc>, retention: std::time::Duration) -> DateTime<Utc> {
    let kept = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    let slack = std::cmp::min(chrono::Duration::hours(1), kept / 2);
    now.checked_sub_signed(kept)
        .and_then(|t| t.checked_add_signed(slack))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// [`lost_work`] for a trail (`files`, oldest first) already found to extend `head`.
///
/// Besides the admitted operations, the operator's two safety actions, which no journal
/// row stands for: a kill switch the trail last records engaged must be engaged in the
/// store, and a key the trail records revoked must be revoked there. Whatever else an
/// older store forgot (a policy reload, an approval) fails safe or is in the journal.
pub fn lost_after(
    store: &dyn Store,
    head: &SignedHead,
    files: &[PathBuf],
    not_before: DateTime<Utc>,
) -> StoreResult<Option<LostWork>> {
    let Ok(after) = records_from(files, head.size) else {
        return Ok(None);
    };
    let admitted: Vec<String> = after
        .iter()
        .filter(|e| e.cost_reserved.is_some() && !e.replayed && e.ts >= not_before)
        .map(|e| e.operation_id.clone())
        .collect();
    if !admitted.is_empty() {
        let known: std::collections::HashSet<String> =
            store.journal_has(&admitted)?.into_iter().collect();
        let lost: Vec<&String> = admitted.iter().filter(|id| !known.contains(*id)).collect();
        if let Some(first) = lost.first() {
            return Ok(Some(LostWork::Operations {
                count: lost.len(),
                first: (*first).clone(),
            }));
        }
    }
    let done = |e: &&AuditEvent, name: &str| {
        e.event == "admin" && e.tool_name == name && e.status == OperationStatus::Ok
    };
    // The last by time, not by place: an action whose process died before its record is
    // recorded by a later start, with the time it took effect.
    let last_brake = after
        .iter()
        .enumerate()
        .filter(|(_, e)| done(e, "kill") || done(e, "resume"))
        .max_by_key(|(i, e)| (e.ts, *i))
        .map(|(_, e)| e);
    if let Some(e) = last_brake.filter(|e| e.tool_name == "kill") {
        // A resume later in time may sit before the head: it was recorded first, and this
        // kill, whose process died before its record, was recorded by a later start. Read
        // the whole trail for it only here, where the store disagrees.
        if store.kill_state()?.is_none()
            && !resumed_after(files, e.ts)
            && !resume_pending_after(store, e.ts)?
        {
            return Ok(Some(LostWork::KillSwitch {
                operation: e.operation_id.clone(),
            }));
        }
    }
    for e in after.iter().filter(|e| done(e, "key_revoke")) {
        let Some(key) = e
            .arguments
            .as_ref()
            .and_then(|a| a.get("key_id"))
            .and_then(|k| k.as_str())
        else {
            continue;
        };
        let revoked = store
            .credential(key)?
            .is_some_and(|c| c.revoked_at.is_some());
        if !revoked {
            return Ok(Some(LostWork::Revocation {
                key: key.to_string(),
                operation: e.operation_id.clone(),
            }));
        }
    }
    Ok(None)
}

/// Whether a resume committed later than `at` waits for its record (its process died
/// before writing it; recovery, which runs after this check, writes it).
fn resume_pending_after(store: &dyn Store, at: DateTime<Utc>) -> StoreResult<bool> {
    Ok(store.open_intents_since(at)?.iter().any(|j| {
        j.started_at > at
            && serde_json::from_str::<sandboxio_core::Operation>(&j.intent).is_ok_and(|op| {
                matches!(
                    op.args,
                    sandboxio_core::OperationArgs::Admin {
                        action: sandboxio_core::AdminAction::Resume
                    }
                )
            })
    }))
}

/// Whether the trail records the kill switch released later than `at`.
fn resumed_after(files: &[PathBuf], at: DateTime<Utc>) -> bool {
    records_from(files, 0).is_ok_and(|all| {
        all.iter().any(|e| {
            e.event == "admin"
                && e.tool_name == "resume"
                && e.status == OperationStatus::Ok
                && e.ts > at
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_older_than_the_journal_keeps_are_not_checked() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let week = std::time::Duration::from_secs(7 * 24 * 3600);
        assert_eq!(
            not_before(now, week).to_rfc3339(),
            "2026-11-29T11:00:00+00:00"
        );
        // Under two hours the slack is half the retention: 30 minutes checks the last 15
        // (an hour's slack put the cut-off in the future: nothing was checked).
        let half_hour = std::time::Duration::from_secs(30 * 60);
        assert_eq!(
            not_before(now, half_hour).to_rfc3339(),
            "2026-12-06T09:45:00+00:00"
        );
        assert!(not_before(now, std::time::Duration::from_secs(60)) < now);
        // A retention too long to subtract checks everything.
        assert_eq!(
            not_before(now, std::time::Duration::MAX),
            DateTime::<Utc>::MIN_UTC
        );
    }

    /// A resume committed and not yet recorded (its process died before its record) counts
    /// against a kill the trail records earlier: the store's released switch is that resume.
    #[test]
    fn a_committed_resume_waiting_for_its_record_counts() {
        use sandboxio_core::{AdminAction, Operation, OperationArgs, Principal};
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = crate::store::SqliteStore::open(
            &dir.path().join("state.db"),
            crate::store::SyncMode::Full,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let op = Operation::new(
            Principal::tenant("default"),
            OperationArgs::Admin {
                action: AdminAction::Resume,
            },
        );
        let before = Utc::now() - chrono::Duration::seconds(1);
        let commit = store
            .admin_change(
                &crate::store::JournalEntry {
                    operation_id: "r".into(),
                    intent: sandboxio_core::request_view(&op).to_string(),
                    started_at: before,
                    owner: "1:1".into(),
                    idempotent: false,
                    idem: None,
                },
                &crate::store::AdminChange::Resume,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let later = commit.at + chrono::Duration::seconds(1);
        assert!(resume_pending_after(&store, before).unwrap_or(false));
        assert!(!resume_pending_after(&store, later).unwrap_or(true));
    }

    /// A resume counts against a kill only when it is later in time, wherever it sits in
    /// the trail.
    #[tokio::test]
    async fn a_resume_is_later_than_a_kill_by_its_time_not_its_place() {
        use sandboxio_audit::{AuditEvent, AuditKey, AuditSink as _, FileSink, FileSinkOptions};
        use sandboxio_core::{OperationRecord, OperationStatus};
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("audit.jsonl");
        let key = std::sync::Arc::new(AuditKey::generate());
        let sink =
            FileSink::open(FileSinkOptions::new(&path), key).unwrap_or_else(|e| panic!("{e}"));
        let t0 = Utc::now();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        // Written in this order: a resume at +10 s, then a kill of +5 s recorded late.
        for (tool, when) in [("resume", at(10)), ("kill", at(5))] {
            let mut r = OperationRecord::new(format!("op-{tool}"), tool);
            r.event = "admin".into();
            r.status = OperationStatus::Ok;
            r.ts = when;
            sink.emit(&AuditEvent::from_record(&r, false))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        sink.close().await.unwrap_or_else(|e| panic!("{e}"));
        let files = vec![path];
        assert!(
            resumed_after(&files, at(5)),
            "the resume is later than the kill"
        );
        assert!(
            !resumed_after(&files, at(10)),
            "nothing later than the resume"
        );
    }
}
