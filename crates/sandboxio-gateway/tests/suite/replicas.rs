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

/// Recovery believes a lease that ran out only once the database has been up for the
/// recovering replica's lease (10 s in these tests): the shared cluster may have just
/// started.
fn cluster_up_for_a_lease() {
    if let Ok(c) = crate::pgcluster::shared() {
        c.wait_up_for(Duration::from_secs(10));
    }
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
    cluster_up_for_a_lease();
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
    cluster_up_for_a_lease();
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

#[test]
fn a_hosts_clock_behind_does_not_push_its_spend_out_of_a_rolling_window() {
    let Some(url) = url(module_path!()) else {
        return;
    };
    let cfg = BudgetConfig {
        ceiling: vec![sandboxio_budget::CeilingRule {
            scope: sandboxio_budget::ScopeKind::Tenant,
            name: None,
            amount: "2".parse().unwrap(),
            window: "rolling:1m".parse().unwrap(),
        }],
        ..budget()
    };
    let s = PgStore::open(&pg_options(&url, 10)).unwrap();
    // A replica whose clock is 61 s behind admits and spends 2 (the whole minute's
    // ceiling); on its own clock that spend is already outside the window.
    let behind = Utc::now() - chrono::Duration::seconds(61);
    for id in ["behind-1", "behind-2"] {
        let mut a = admission(id, &cfg);
        a.now = behind;
        a.reserve.at = Some(behind);
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
        s.finish(&Finish {
            operation_id: id,
            budget: &cfg,
            charge: Some("1".parse().unwrap()),
            ledger: None,
            idem: None,
            journal_status: "ok",
            heads: &[],
            unrecorded: None,
            now: behind,
        })
        .unwrap();
    }
    // A replica with the right time finds the minute spent: the database's clock decided.
    match s.admit(&admission("on-time", &cfg)).unwrap() {
        Admitted::Budget(_) => {}
        other => panic!("the spend of a host behind fell out of the window: {other:?}"),
    }
}

/// `recover_elsewhere`, again while the pool reconnects after a restart.
fn recover_when_reachable(s: &PgStore) -> Vec<String> {
    let t = Instant::now();
    loop {
        match s.recover(Utc::now(), &budget(), &|_| true, &|_| "interrupted".into()) {
            Ok(v) => return v.into_iter().map(|e| e.operation_id).collect(),
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                eprintln!("recovery after the restart: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the store never came back: {e}"),
        }
    }
}

/// Three replicas with `lease` (seconds): one to sweep, one live with `live-op` admitted,
/// one (to be dropped as dead) with `dead-op` admitted.
fn sweeper_live_and_dead(url: &str, lease: u64, cfg: &BudgetConfig) -> (PgStore, PgStore, PgStore) {
    let open = || PgStore::open(&pg_options(url, lease)).unwrap();
    let (sweeper, live, dead) = (open(), open(), open());
    for (s, id) in [(&live, "live-op"), (&dead, "dead-op")] {
        assert!(matches!(
            s.admit(&admission(id, cfg)).unwrap(),
            Admitted::Proceed(_)
        ));
    }
    (sweeper, live, dead)
}

/// Sweeps (adding to `so_far`) until `want` is recovered, for at most 20 s.
fn recover_eventually(s: &PgStore, mut so_far: Vec<String>, want: &str) -> Vec<String> {
    let t = Instant::now();
    while !so_far.iter().any(|id| id == want) && t.elapsed() < Duration::from_secs(20) {
        so_far.extend(recover_when_reachable(s));
        std::thread::sleep(Duration::from_millis(200));
    }
    so_far
}

#[test]
fn a_database_out_of_reach_longer_than_a_lease_fences_off_no_live_replica() {
    let Some(url) = url(module_path!()) else {
        return;
    };
    let cfg = budget();
    let lease = 2;
    let (sweeper, live, dead) = sweeper_live_and_dead(&url, lease, &cfg);
    cluster_up_for_a_lease();
    drop(dead);
    // The database stays up but nobody can renew (as behind a network outage or a stalled
    // database): every replica's row is held for two leases, so every lease runs out.
    let mut blocker = postgres::Client::connect(
        &url.replace("postgres:///", "postgresql:///"),
        postgres::NoTls,
    )
    .unwrap();
    let mut hold = blocker.transaction().unwrap();
    hold.execute("SELECT id FROM replicas FOR UPDATE", &[])
        .unwrap();
    std::thread::sleep(Duration::from_secs(2 * lease));
    // A sweep now sees every lease run out, its own too: it judges nobody. (One that
    // judged would mark replicas lost and wait on the held rows: bounded here, so that
    // shows as a failure, not a hang.)
    let sweeper = Arc::new(sweeper);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn({
        let sweeper = sweeper.clone();
        move || {
            let _ = tx.send(recover_elsewhere(&sweeper));
        }
    });
    let during = rx.recv_timeout(Duration::from_secs(10));
    hold.rollback().unwrap();
    let during = during.expect("the sweep waited on the held rows: it judged replicas lost");
    assert!(
        during.is_empty(),
        "work recovered while every replica was cut off: {during:?}"
    );
    // The replicas renew (noting that their leases had run out); right after, still nobody
    // is judged; a lease later the dead replica's work is recovered, the live one's never.
    std::thread::sleep(Duration::from_millis(lease * 1000 / 2));
    let early = recover_elsewhere(&sweeper);
    let lapses: Vec<i64> = blocker
        .query("SELECT at_ms FROM lease_lapses", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        early.is_empty(),
        "work recovered right after the outage: {early:?} (lapses {lapses:?})"
    );
    let recovered = recover_eventually(&sweeper, Vec::new(), "dead-op");
    assert_eq!(recovered, ["dead-op"]);
    assert!(matches!(
        live.admit(&admission("live-op-2", &cfg)).unwrap(),
        Admitted::Proceed(_)
    ));
    let lost: i64 = blocker
        .query_one(
            "SELECT COUNT(*) FROM replicas WHERE lost_ms IS NOT NULL AND id = ANY($1)",
            &[&vec![
                live.replica_id().to_string(),
                sweeper.replica_id().to_string(),
            ]],
        )
        .unwrap()
        .get(0);
    assert_eq!(lost, 0, "a live replica was marked lost");
}

#[test]
fn a_database_down_longer_than_a_lease_fences_off_no_live_replica() {
    // Its own cluster: this test stops and restarts the server.
    let cluster = match crate::pgcluster::Cluster::own() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIP {} (PostgreSQL half): {why}", module_path!());
            return;
        }
    };
    let url = cluster.database();
    let cfg = budget();
    let lease = 2;
    let (sweeper, live, dead) = sweeper_live_and_dead(&url, lease, &cfg);
    // One replica dies (its heartbeat stops; its open intent keeps its row); then the
    // database is down for two leases: every lease runs out, the live ones' too.
    drop(dead);
    cluster.stop();
    std::thread::sleep(Duration::from_secs(2 * lease));
    let cluster = cluster.restart().unwrap();
    let back = Instant::now();
    // The first sweep after the restart cannot tell the dead from the live: it touches
    // nobody's work and marks nobody lost.
    let first = recover_when_reachable(&sweeper);
    let mut c = postgres::Client::connect(
        &url.replace("postgres:///", "postgresql:///"),
        postgres::NoTls,
    )
    .unwrap();
    if back.elapsed() < Duration::from_secs(lease) {
        assert!(
            first.is_empty(),
            "work recovered right after the database came back: {first:?}"
        );
        let lost: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM replicas WHERE lost_ms IS NOT NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(lost, 0, "a replica was marked lost right after the restart");
    } else {
        eprintln!(
            "the first sweep came {:?} after the restart, past the grace: not judged",
            back.elapsed()
        );
    }
    // Once the database has been up for a lease (and a lease has passed since the live
    // replicas found their own leases run out), the dead replica's work is recovered (it
    // never renewed) and the live replica's is not: it renewed and admits again.
    cluster.wait_up_for(Duration::from_millis(lease * 1000 + 200));
    let recovered = recover_eventually(&sweeper, first, "dead-op");
    assert_eq!(recovered, ["dead-op"]);
    let t = Instant::now();
    loop {
        match live.admit(&admission("live-op-2", &cfg)) {
            Ok(Admitted::Proceed(_)) => break,
            other => assert!(
                t.elapsed() < Duration::from_secs(20),
                "the live replica does not admit after the restart: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let lost: Vec<String> = c
        .query("SELECT id FROM replicas WHERE lost_ms IS NOT NULL", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(lost.len(), 1, "only the dead replica is lost: {lost:?}");
    assert!(!lost.contains(&live.replica_id().to_string()));
    assert!(!lost.contains(&sweeper.replica_id().to_string()));
    drop((sweeper, live));
    cluster.stop();
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

/// A tool that says it started, then waits to be let go.
struct Gate {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    go: Arc<tokio::sync::Notify>,
}
#[async_trait]
impl Tool for Gate {
    async fn call(&self, a: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        let _ = self.started.send(());
        self.go.notified().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_that_ends_while_the_database_is_down_is_finished_once_it_is_back() {
    // Its own cluster: this test stops and restarts the server. Its client and the
    // stores' pools must not run on a runtime thread.
    let own = std::thread::spawn(|| {
        crate::pgcluster::Cluster::own().map(|c| {
            let url = c.database();
            (c, url)
        })
    });
    let (cluster, url) = match own.join().unwrap() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIP {} (PostgreSQL half): {why}", module_path!());
            return;
        }
    };
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let go = Arc::new(tokio::sync::Notify::new());
    let gw = {
        let url = url.clone();
        let (started_tx, go) = (started_tx.clone(), go.clone());
        std::thread::spawn(move || {
            let g = replica(&url, Duration::from_secs(1));
            Arc::try_unwrap(g).ok().unwrap().with_tool(
                "slow",
                Arc::new(Gate {
                    started: started_tx,
                    go,
                }),
            )
        })
        .join()
        .unwrap()
    };
    let gw = Arc::new(gw);
    let run = tokio::spawn({
        let gw = gw.clone();
        async move {
            gw.submit(Submission::new(Operation::new(
                Principal::tenant("acme"),
                OperationArgs::ToolCall {
                    tool: "slow".into(),
                    arguments: serde_json::json!({"v": 1}),
                },
            )))
            .await
        }
    });
    started.recv().await.unwrap();
    // The database goes down while the tool runs, and comes back 3 s later; the tool
    // ends in between, so its `finish` meets a database that is down.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop();
        cluster
    })
    .await
    .unwrap();
    go.notify_one();
    let cluster = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_secs(3));
        cluster.restart().unwrap()
    })
    .await
    .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the operation ended")
        .unwrap()
        .unwrap();
    let id = out.record.operation_id.clone();
    // Finished by the process that ran it: its journal row closed with its outcome, its
    // reservation gone; nothing left for a recovery to record a second time.
    let (status, reservations) = tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(
            &url.replace("postgres:///", "postgresql:///"),
            postgres::NoTls,
        )
        .unwrap();
        let status: Option<String> = c
            .query_one("SELECT status FROM journal WHERE operation_id = $1", &[&id])
            .unwrap()
            .get(0);
        let n: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM reservations WHERE operation_id = $1",
                &[&id],
            )
            .unwrap()
            .get(0);
        cluster.stop();
        (status, n)
    })
    .await
    .unwrap();
    assert_eq!(
        status.as_deref(),
        Some(out.record.status.as_str()),
        "the journal row is closed with the operation's own outcome"
    );
    assert_eq!(reservations, 0, "its reservation was settled");
    drop(gw);
}
