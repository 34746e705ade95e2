//! Several replicas on one PostgreSQL store: a dead replica's work is interrupted after its
//! lease (and a live one's never), a lost replica admits nothing, and a kill switch or an
//! approval given on one replica reaches the others at once. PostgreSQL only: these are
//! about replicas, which SQLite does not have.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, Auditor, NoopSink};
use sandboxio_budget::BudgetConfig;
use sandboxio_core::{
    Decision, Layer, Operation, OperationArgs, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::store::*;
use sandboxio_gateway::*;

use super::store::pg_options;

fn url(test: &str) -> Option<String> {
    crate::pgcluster::fresh_url(test)
}

fn budget() -> BudgetConfig {
    BudgetConfig {
        global: Some("100".parse().unwrap()),
        ..BudgetConfig::default()
    }
}

fn admission<'a>(id: &str, cfg: &'a BudgetConfig) -> Admission<'a> {
    Admission {
        journal: JournalEntry {
            operation_id: id.into(),
            intent: "{}".into(),
            started_at: Utc::now(),
            owner: "1:1".into(),
            idempotent: false,
            idem: None,
        },
        rate: vec![],
        budget: cfg,
        reserve: sandboxio_budget::ReserveRequest {
            id: id.into(),
            tenant: "acme".into(),
            session: None,
            category: sandboxio_core::CostCategory::Compute,
            estimate: Some("1".parse().unwrap()),
            agent: None,
            at: None,
        },
        idem: None,
        idem_lookup_only: false,
        now: Utc::now(),
    }
}

/// Recovery as a replica on another host would run it: no local process is comparable.
fn recover_elsewhere(s: &PgStore) -> Vec<String> {
    s.recover(Utc::now(), &budget(), &|_| true, &|_| "interrupted".into())
        .unwrap()
        .into_iter()
        .map(|e| e.operation_id)
        .collect()
}

#[test]
fn a_dead_replicas_work_is_interrupted_after_its_lease_and_a_live_ones_never() {
    let Some(url) = url(module_path!()) else {
        return;
    };
    let cfg = budget();
    let dead = PgStore::open(&pg_options(&url, 2)).unwrap();
    let live = PgStore::open(&pg_options(&url, 10)).unwrap();
    let survivor = PgStore::open(&pg_options(&url, 10)).unwrap();
    assert!(matches!(
        dead.admit(&admission("dead-op", &cfg)).unwrap(),
        Admitted::Proceed(_)
    ));
    assert!(matches!(
        live.admit(&admission("live-op", &cfg)).unwrap(),
        Admitted::Proceed(_)
    ));
    // The replica dies: its heartbeat stops; its row and open intent stay.
    let died = Instant::now();
    drop(dead);
    assert!(
        recover_elsewhere(&survivor).is_empty(),
        "nothing before the lease expires"
    );
    assert_eq!(survivor.live_counts().unwrap().reservations, 2);
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(died.elapsed()));
    assert_eq!(recover_elsewhere(&survivor), ["dead-op"]);
    let live_counts = survivor.live_counts().unwrap();
    assert_eq!(
        live_counts.reservations, 1,
        "the dead replica's reservation is released"
    );
    assert_eq!(
        live_counts.open_intents, 1,
        "the live replica's work is untouched"
    );
    let sum = survivor
        .budget_summary(&cfg, &[sandboxio_budget::ScopeKey::Global])
        .unwrap();
    assert_eq!(sum[0].reserved, "1".parse().unwrap());
    assert!(recover_elsewhere(&survivor).is_empty(), "recovered once");
    // The live replica goes on admitting.
    assert!(matches!(
        live.admit(&admission("live-op-2", &cfg)).unwrap(),
        Admitted::Proceed(_)
    ));
}

#[test]
fn a_replica_found_lost_admits_nothing() {
    let Some(url) = url(module_path!()) else {
        return;
    };
    let cfg = budget();
    let stalled = PgStore::open(&pg_options(&url, 10)).unwrap();
    let other = PgStore::open(&pg_options(&url, 10)).unwrap();
    assert!(matches!(
        stalled.admit(&admission("op1", &cfg)).unwrap(),
        Admitted::Proceed(_)
    ));
    // Its lease runs out (as if it had stalled longer than the lease).
    let mut c = postgres::Client::connect(
        &url.replace("postgres:///", "postgresql:///"),
        postgres::NoTls,
    )
    .unwrap();
    c.execute(
        "UPDATE replicas SET lease_until_ms = 0 WHERE id = $1",
        &[&stalled.replica_id()],
    )
    .unwrap();
    assert_eq!(recover_elsewhere(&other), ["op1"]);
    let e = stalled.admit(&admission("op2", &cfg)).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1542");
    assert_eq!(
        other.live_counts().unwrap(),
        LiveCounts::default(),
        "the refusal changed nothing"
    );
}

fn next_change(
    rx: &mut tokio::sync::broadcast::Receiver<StoreChange>,
    within: Duration,
) -> Option<(StoreChange, Duration)> {
    let t = Instant::now();
    while t.elapsed() < within {
        match rx.try_recv() {
            Ok(c) => return Some((c, t.elapsed())),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    None
}

#[test]
fn kill_and_approvals_are_announced_to_every_replica() {
    let Some(url) = url(module_path!()) else {
        return;
    };
    let a = PgStore::open(&pg_options(&url, 10)).unwrap();
    let b = PgStore::open(&pg_options(&url, 10)).unwrap();
    let mut rx = b.changes().unwrap();
    // The listener connects in the background; wait until it hears something.
    let t = Instant::now();
    loop {
        a.clear_kill().unwrap();
        if next_change(&mut rx, Duration::from_millis(200)).is_some()
            || t.elapsed() > Duration::from_secs(20)
        {
            break;
        }
    }
    let sent = Instant::now();
    a.set_kill("stop everything", "ops", Utc::now()).unwrap();
    let (c, _) = next_change(&mut rx, Duration::from_secs(5)).expect("the kill reached replica b");
    let took = sent.elapsed();
    assert_eq!(c, StoreChange::Kill);
    eprintln!("MEASURED kill announcement from replica a to replica b: {took:?}");
    assert!(b.kill_state().unwrap().is_some());
    a.clear_kill().unwrap();
    assert_eq!(
        next_change(&mut rx, Duration::from_secs(5)).map(|c| c.0),
        Some(StoreChange::Resume)
    );
    let now = Utc::now();
    b.create_approval(&Approval {
        id: "apr_x".into(),
        tenant: "acme".into(),
        fingerprint: "fp".into(),
        operation: "{}".into(),
        rationale: String::new(),
        reason: "ask".into(),
        state: ApprovalState::Pending,
        created_at: now,
        expires_at: now + chrono::Duration::minutes(5),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    })
    .unwrap();
    a.decide_approval("apr_x", true, "alice", None, Utc::now())
        .unwrap();
    assert_eq!(
        next_change(&mut rx, Duration::from_secs(5)).map(|c| c.0),
        Some(StoreChange::Approval("apr_x".into()))
    );
}

/// `ask*` tools ask; everything else is allowed.
struct AskByName;
impl PolicyEngine for AskByName {
    fn decide(&self, op: &Operation, _now: DateTime<Utc>) -> Decision {
        let mut d = Decision::allow(Layer::Policy);
        if op.args.tool_name().starts_with("ask") {
            d.verdict = Verdict::Ask;
            d.reason = "asks a person".into();
        }
        d
    }
}

struct Echo;
#[async_trait]
impl Tool for Echo {
    async fn call(&self, a: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        Ok(a.clone())
    }
}

fn replica(url: &str, poll: Duration) -> Arc<Gateway> {
    let store: Arc<dyn Store> = Arc::new(PgStore::open(&pg_options(url, 10)).unwrap());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![Arc::new(NoopSink)]),
        redaction.base().unwrap(),
    );
    let cfg = GatewayConfig {
        approval_timeout: Duration::from_secs(60),
        ..GatewayConfig::default()
    };
    Arc::new(
        Gateway::new(
            cfg,
            store,
            Arc::new(AskByName),
            auditor,
            redaction,
            Default::default(),
            Approver::Store { poll },
        )
        .with_tool("ask-deploy", Arc::new(Echo)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_on_one_replica_releases_the_waiter_on_another() {
    // The test cluster's client must not run on a runtime thread.
    let Some(url) = std::thread::spawn(|| url(module_path!())).join().unwrap() else {
        return;
    };
    // The waiter polls only every 30 s: only the announcement can wake it in time.
    let b = replica(&url, Duration::from_secs(30));
    let a = replica(&url, Duration::from_secs(30));
    let (tx, mut pending) = tokio::sync::mpsc::unbounded_channel();
    let mut sub = Submission::new(Operation::new(
        Principal::tenant("acme"),
        OperationArgs::ToolCall {
            tool: "ask-deploy".into(),
            arguments: serde_json::json!({"v": 1}),
        },
    ));
    sub.approval_pending = Some(tx);
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.submit(sub).await }
    });
    let apr = pending.recv().await.unwrap();
    // Let the waiter settle into its wait (and the listener connect).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let out = a
        .admin(
            "acme",
            "alice",
            sandboxio_core::AdminAction::Approve {
                approval_id: apr.id.clone(),
                reason: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        out.record.status,
        OperationStatus::Ok,
        "{}",
        out.record.reason
    );
    let done = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter on replica b was released")
        .unwrap()
        .unwrap();
    eprintln!(
        "MEASURED approval on replica a to release on replica b: {:?}",
        t.elapsed()
    );
    assert_eq!(
        done.record.status,
        OperationStatus::Ok,
        "{}",
        done.record.reason
    );
    assert_eq!(done.record.approver.as_deref(), Some("alice"));
    assert_eq!(done.tool_output, Some(serde_json::json!({"v": 1})));
}
