//! Eight OS processes, each submitting 500 budgeted requests through its own gateway to one
//! shared SQLite store: settled spend never passes the ceiling, nothing leaks, and nothing
//! is denied while the unreserved budget covered it; also with processes SIGKILLed mid-way.
//!
//! The same across eight processes on one PostgreSQL store (each process a replica).
//!
//! The test binary re-executes itself as the submitter (`SBX_TEST_SUBMITTER_DB` names a
//! SQLite file or a `postgres://` URL).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, Auditor, NoopSink};
use sandboxio_budget::BudgetConfig;
use sandboxio_core::{
    Decision, Layer, Money, Operation, OperationArgs, OperationStatus, Principal,
};
use sandboxio_gateway::store::{LiveCounts, PgStore, SqliteStore, Store, SyncMode};
use sandboxio_gateway::*;

const PROCESSES: usize = 8;
const PER_PROCESS: usize = 500;
const PRICE: &str = "0.01";

struct AllowAll;
impl PolicyEngine for AllowAll {
    fn decide(&self, _op: &Operation, _now: DateTime<Utc>) -> Decision {
        Decision::allow(Layer::Policy)
    }
}

struct Noop;
#[async_trait]
impl Tool for Noop {
    async fn call(&self, _a: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        Ok(serde_json::Value::Null)
    }
}

fn budget(ceiling: &str) -> BudgetConfig {
    BudgetConfig {
        global: Some(ceiling.parse().unwrap()),
        ..BudgetConfig::default()
    }
}

/// The child: submits PER_PROCESS operations and prints `allowed denied other`.
#[test]
fn submitter_child() {
    let Ok(db) = std::env::var("SBX_TEST_SUBMITTER_DB") else {
        return;
    };
    let ceiling = std::env::var("SBX_TEST_SUBMITTER_CEILING").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store: Arc<dyn Store> = if db.starts_with("postgres") {
            Arc::new(PgStore::open(&super::store::pg_options(&db, 10)).unwrap())
        } else {
            Arc::new(SqliteStore::open(std::path::Path::new(&db), SyncMode::Full).unwrap())
        };
        let redaction = Redaction::from_env(vec![]);
        let auditor = Auditor::new(
            AuditConfig::default().with_sinks(vec![Arc::new(NoopSink)]),
            redaction.base().unwrap(),
        );
        let cfg = GatewayConfig {
            budget: budget(&ceiling),
            ..GatewayConfig::default()
        };
        let gw = Gateway::new(
            cfg,
            store,
            Arc::new(AllowAll),
            auditor,
            redaction,
            Default::default(),
            Approver::Nobody,
        )
        .with_tool("noop", Arc::new(Noop));
        let count: usize = std::env::var("SBX_TEST_SUBMITTER_COUNT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(PER_PROCESS);
        let (mut allowed, mut denied, mut other) = (0, 0, 0);
        for i in 0..count {
            let mut op = Operation::new(
                Principal::tenant("acme"),
                OperationArgs::ToolCall {
                    tool: "noop".into(),
                    arguments: serde_json::json!({ "i": i }),
                },
            );
            op.estimated_cost = Some(PRICE.parse().unwrap());
            let out = gw.submit(Submission::new(op)).await.unwrap();
            match (out.record.status, out.record.layer) {
                (OperationStatus::Ok, _) => allowed += 1,
                (OperationStatus::Denied, Layer::Budget) => denied += 1,
                _ => {
                    other += 1;
                    eprintln!(
                        "unexpected: {:?} at {}: {}",
                        out.record.status, out.record.layer, out.record.reason
                    );
                }
            }
        }
        println!("SUBMITTER {allowed} {denied} {other}");
    });
}

fn spawn(db: impl AsRef<std::ffi::OsStr>, ceiling: &str) -> Child {
    spawn_n(db, ceiling, PER_PROCESS)
}

fn spawn_n(db: impl AsRef<std::ffi::OsStr>, ceiling: &str, count: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::concurrency::submitter_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SBX_TEST_SUBMITTER_DB", db)
        .env("SBX_TEST_SUBMITTER_CEILING", ceiling)
        .env("SBX_TEST_SUBMITTER_COUNT", count.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn counts(child: Child) -> Option<(u64, u64, u64)> {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("SUBMITTER ")?;
    let line = text[at..].lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|x| x.parse().unwrap())
        .collect();
    Some((v[0], v[1], v[2]))
}

fn ledger_total(store: &dyn Store) -> (Money, usize) {
    let lines = store
        .ledger(
            Utc::now() - chrono::Duration::hours(1),
            Utc::now() + chrono::Duration::hours(1),
        )
        .unwrap();
    let total = lines
        .iter()
        .fold(Money::ZERO, |acc, l| acc.checked_add(l.amount).unwrap());
    (total, lines.len())
}

#[test]
fn eight_processes_never_pass_the_ceiling_and_deny_only_when_full() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    // 2,500 of the 4,000 requests fit.
    let ceiling = "25.00";
    SqliteStore::open(&db, SyncMode::Full).unwrap();
    let children: Vec<Child> = (0..PROCESSES).map(|_| spawn(&db, ceiling)).collect();
    let (mut allowed, mut denied, mut other) = (0, 0, 0);
    for c in children {
        let (a, d, o) = counts(c).expect("a submitter did not finish");
        allowed += a;
        denied += d;
        other += o;
    }
    assert_eq!(other, 0);
    assert_eq!(allowed + denied, (PROCESSES * PER_PROCESS) as u64);
    // Every request reserves and settles exactly PRICE, so a wrongful deny would leave
    // budget unspent: exactly floor(ceiling / price) are allowed.
    assert_eq!(allowed, 2500, "allowed {allowed}, denied {denied}");
    let store = SqliteStore::open(&db, SyncMode::Full).unwrap();
    let (total, lines) = ledger_total(&store);
    assert_eq!(total, ceiling.parse::<Money>().unwrap());
    assert_eq!(lines as u64, allowed);
    assert_eq!(store.live_counts().unwrap(), LiveCounts::default());
}

#[test]
fn eight_processes_on_postgres_never_pass_the_ceiling_and_deny_only_when_full() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    // Fewer requests than on SQLite (a test run stays short): 500 of the 800 fit.
    let (ceiling, per) = ("5.00", 100);
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| spawn_n(&url, ceiling, per))
        .collect();
    let (mut allowed, mut denied, mut other) = (0, 0, 0);
    for c in children {
        let (a, d, o) = counts(c).expect("a submitter did not finish");
        allowed += a;
        denied += d;
        other += o;
    }
    assert_eq!(other, 0);
    assert_eq!(allowed + denied, (PROCESSES * per) as u64);
    assert_eq!(allowed, 500, "allowed {allowed}, denied {denied}");
    let store = PgStore::open(&super::store::pg_options(&url, 10)).unwrap();
    let (total, lines) = ledger_total(&store);
    assert_eq!(total, ceiling.parse::<Money>().unwrap());
    assert_eq!(lines as u64, allowed);
    assert_eq!(store.live_counts().unwrap(), LiveCounts::default());
}

#[test]
fn sigkilled_submitters_leak_nothing_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let ceiling = "25.00";
    SqliteStore::open(&db, SyncMode::Full).unwrap();
    let mut children: Vec<Child> = (0..PROCESSES).map(|_| spawn(&db, ceiling)).collect();
    // Kill three of them part-way, at different points.
    for (i, c) in children.iter_mut().take(3).enumerate() {
        std::thread::sleep(Duration::from_millis(300 + 200 * i as u64));
        c.kill().unwrap();
    }
    let mut finished = 0;
    for c in children {
        if counts(c).is_some() {
            finished += 1;
        }
    }
    assert!(finished >= PROCESSES - 3);
    let store = SqliteStore::open(&db, SyncMode::Full).unwrap();
    let recovered = store
        .recover(Utc::now(), &budget(ceiling), &owner_alive, &|_| {
            String::new()
        })
        .unwrap();
    let (total, lines) = ledger_total(&store);
    assert!(total <= ceiling.parse::<Money>().unwrap(), "spent {total}");
    assert_eq!(
        total,
        PRICE
            .parse::<Money>()
            .unwrap()
            .checked_mul((lines as u64).into())
            .unwrap()
    );
    assert_eq!(
        store.live_counts().unwrap(),
        LiveCounts::default(),
        "after recovering {} intents",
        recovered.len()
    );
}
