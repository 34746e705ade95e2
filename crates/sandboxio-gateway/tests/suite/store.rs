//! The SQLite store: budget ceilings, approvals, idempotency and recovery.

use chrono::{Duration, Utc};
use rust_decimal::Decimal;
use sandboxio_core::{CostCategory, Money};
use sandboxio_gateway::store::*;

fn m(s: &str) -> Money {
    s.parse().unwrap()
}

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("state.db"), SyncMode::Full).unwrap();
    (dir, s)
}

fn scopes(ceiling: &str) -> Vec<ScopeCeiling> {
    vec![
        ScopeCeiling {
            scope: "global".into(),
            ceiling: m("100"),
        },
        ScopeCeiling {
            scope: "tenant:acme".into(),
            ceiling: m(ceiling),
        },
    ]
}

#[test]
fn reservation_past_ceiling_is_denied_with_numbers() {
    let (_d, s) = store();
    let now = Utc::now();
    assert_eq!(
        s.reserve(
            "op1",
            &scopes("1.00"),
            CostCategory::Compute,
            m("0.60"),
            now
        )
        .unwrap(),
        ReserveOutcome::Reserved
    );
    match s
        .reserve(
            "op2",
            &scopes("1.00"),
            CostCategory::Compute,
            m("0.50"),
            now,
        )
        .unwrap()
    {
        ReserveOutcome::Denied {
            scope,
            reserved,
            ceiling,
            ..
        } => {
            assert_eq!(scope, "tenant:acme");
            assert_eq!(reserved, m("0.60"));
            assert_eq!(ceiling, m("1.00"));
        }
        other => panic!("expected denial, got {other:?}"),
    }
    // Denied reservation changed nothing.
    assert_eq!(s.live_counts().unwrap().reservations, 1);
}

#[test]
fn settle_never_charges_more_than_reserved_and_releases_rest() {
    let (_d, s) = store();
    let now = Utc::now();
    s.reserve(
        "op1",
        &scopes("1.00"),
        CostCategory::Compute,
        m("0.50"),
        now,
    )
    .unwrap();
    let out = s
        .settle("op1", m("0.80"), Decimal::new(8, 1), None)
        .unwrap();
    assert_eq!(out.charged, m("0.50"));
    let out2 = s
        .reserve("op2", &scopes("1.00"), CostCategory::Api, m("0.20"), now)
        .unwrap();
    assert_eq!(out2, ReserveOutcome::Reserved);
    let out2 = s
        .settle("op2", m("0.05"), Decimal::new(8, 1), None)
        .unwrap();
    assert_eq!(out2.charged, m("0.05"));
    assert_eq!(out2.released, m("0.15"));
    let sum = s.summary(&scopes("1.00")).unwrap();
    assert_eq!(sum[1].spent, m("0.55"));
    assert_eq!(sum[1].reserved, Money::ZERO);
    assert_eq!(s.live_counts().unwrap().reservations, 0);
}

#[test]
fn warn_fraction_crossing_fires_once() {
    let (_d, s) = store();
    let now = Utc::now();
    let mut crossings = 0;
    for i in 0..10 {
        let id = format!("op{i}");
        s.reserve(&id, &scopes("1.00"), CostCategory::Compute, m("0.10"), now)
            .unwrap();
        crossings += s
            .settle(&id, m("0.10"), Decimal::new(8, 1), None)
            .unwrap()
            .warn_crossed
            .iter()
            .filter(|w| w.0 == "tenant:acme")
            .count();
    }
    assert_eq!(crossings, 1);
}

#[test]
fn release_returns_budget() {
    let (_d, s) = store();
    let now = Utc::now();
    s.reserve(
        "op1",
        &scopes("1.00"),
        CostCategory::Compute,
        m("1.00"),
        now,
    )
    .unwrap();
    assert!(matches!(
        s.reserve(
            "op2",
            &scopes("1.00"),
            CostCategory::Compute,
            m("0.01"),
            now
        )
        .unwrap(),
        ReserveOutcome::Denied { .. }
    ));
    assert_eq!(s.release("op1").unwrap(), m("1.00"));
    assert_eq!(
        s.reserve(
            "op2",
            &scopes("1.00"),
            CostCategory::Compute,
            m("1.00"),
            now
        )
        .unwrap(),
        ReserveOutcome::Reserved
    );
}

fn approval(id: &str, fp: &str, expires_in: i64) -> Approval {
    let now = Utc::now();
    Approval {
        id: id.into(),
        tenant: "acme".into(),
        fingerprint: fp.into(),
        operation: "{}".into(),
        rationale: "because".into(),
        reason: "ask rule".into(),
        state: ApprovalState::Pending,
        created_at: now,
        expires_at: now + Duration::seconds(expires_in),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    }
}

#[test]
fn approval_is_single_use_and_bound_to_fingerprint() {
    let (_d, s) = store();
    s.create_approval(&approval("a1", "fp-1", 60)).unwrap();
    let now = Utc::now();
    // Not yet approved: cannot be used.
    assert!(!s.consume_approval("a1", "fp-1", now).unwrap());
    s.decide_approval("a1", true, "alice", None, now).unwrap();
    // Different request: refused.
    assert!(!s.consume_approval("a1", "fp-2", now).unwrap());
    assert!(s.consume_approval("a1", "fp-1", now).unwrap());
    // Repeated use: refused.
    assert!(!s.consume_approval("a1", "fp-1", now).unwrap());
    // Deciding again is an error with a code.
    let e = s
        .decide_approval("a1", false, "bob", None, now)
        .unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1508");
}

#[test]
fn expired_approval_cannot_be_used_or_decided() {
    let (_d, s) = store();
    s.create_approval(&approval("a2", "fp", -1)).unwrap();
    let now = Utc::now();
    assert!(s.decide_approval("a2", true, "alice", None, now).is_err());
    assert!(!s.consume_approval("a2", "fp", now).unwrap());
}

#[test]
fn idempotency_replay_conflict_in_progress() {
    let (_d, s) = store();
    let now = Utc::now();
    assert_eq!(
        s.idem_begin("t", "k", "fp1", "op1", now, 3600).unwrap(),
        IdemBegin::New
    );
    assert_eq!(
        s.idem_begin("t", "k", "fp1", "op2", now, 3600).unwrap(),
        IdemBegin::InProgress
    );
    assert_eq!(
        s.idem_begin("t", "k", "fp2", "op3", now, 3600).unwrap(),
        IdemBegin::Conflict
    );
    // Keys are scoped by tenant.
    assert_eq!(
        s.idem_begin("u", "k", "fp2", "op4", now, 3600).unwrap(),
        IdemBegin::New
    );
    s.idem_finish("t", "k", "{\"ok\":true}").unwrap();
    assert_eq!(
        s.idem_begin("t", "k", "fp1", "op5", now, 3600).unwrap(),
        IdemBegin::Replay {
            outcome: "{\"ok\":true}".into(),
            operation_id: "op1".into()
        }
    );
    // After retention the key is forgotten.
    let later = now + Duration::seconds(3601);
    assert_eq!(
        s.idem_begin("t", "k", "fp1", "op6", later, 3600).unwrap(),
        IdemBegin::New
    );
}

#[test]
fn recovery_marks_dead_intents_interrupted_and_releases_everything() {
    let (_d, s) = store();
    let now = Utc::now();
    for (id, owner, idempotent) in [
        ("op1", "dead", false),
        ("op2", "alive", false),
        ("op3", "dead", true),
    ] {
        s.reserve(id, &scopes("10"), CostCategory::Compute, m("1"), now)
            .unwrap();
        s.idem_begin("t", id, "fp", id, now, 3600).unwrap();
        s.journal_intent(&JournalEntry {
            operation_id: id.into(),
            intent: "{}".into(),
            started_at: now,
            owner: owner.into(),
            idempotent,
            idem: Some(("t".into(), id.into())),
        })
        .unwrap();
    }
    let rec = s
        .recover(now, &|o| o == "alive", &|e| {
            format!("interrupted:{}", e.operation_id)
        })
        .unwrap();
    let ids: Vec<_> = rec.iter().map(|e| e.operation_id.as_str()).collect();
    assert_eq!(ids, ["op1", "op3"]);
    let live = s.live_counts().unwrap();
    assert_eq!(
        live.reservations, 1,
        "only the live op keeps its reservation"
    );
    assert_eq!(live.open_intents, 1);
    // Non-idempotent interrupted op: its key answers with the interrupted outcome, never re-runs.
    assert_eq!(
        s.idem_begin("t", "op1", "fp", "x", now, 3600).unwrap(),
        IdemBegin::Replay {
            outcome: "interrupted:op1".into(),
            operation_id: "op1".into()
        }
    );
    // Idempotent interrupted op: the key is forgotten, so a retry runs it.
    assert_eq!(
        s.idem_begin("t", "op3", "fp", "y", now, 3600).unwrap(),
        IdemBegin::New
    );
    // Recovery is idempotent.
    assert!(s
        .recover(now, &|o| o == "alive", &|_| String::new())
        .unwrap()
        .is_empty());
}

#[test]
fn kill_switch_persists_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("state.db");
    {
        let s = SqliteStore::open(&p, SyncMode::Full).unwrap();
        s.set_kill("runaway spend", "ops", Utc::now()).unwrap();
    }
    let s = SqliteStore::open(&p, SyncMode::Full).unwrap();
    assert_eq!(s.kill_state().unwrap().unwrap().reason, "runaway spend");
    s.clear_kill().unwrap();
    assert!(s.kill_state().unwrap().is_none());
}

#[test]
fn rate_limit_counts_within_window() {
    let (_d, s) = store();
    for i in 0..3 {
        assert_eq!(s.rate_take("k", 3, 1000, 1_000 + i).unwrap(), None);
    }
    let retry = s.rate_take("k", 3, 1000, 1_500).unwrap().unwrap();
    assert_eq!(retry, 500);
    assert_eq!(s.rate_take("k", 3, 1000, 2_001).unwrap(), None);
}
