#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Admission on PostgreSQL against SQLite, in one run: the store's admission transaction
//! alone (`Store::admit`: kill switch, journal intent, budget reservation), and a whole
//! no-op operation through the chain (`Gateway::submit`: admit, run a no-op tool, one
//! record, `finish`), each sequentially and with 8 concurrent submitters. SQLite is the
//! embedded default (WAL, `synchronous=FULL`, a file in a temporary directory); PostgreSQL
//! is a throwaway cluster on the same disk, reached over its Unix socket, with `fsync` and
//! `synchronous_commit` on, so both make each admission durable before the side effect.
//! The two backends are measured in alternating blocks, so load from elsewhere hits both.
//!
//! Run: `cargo bench -p sandboxio-gateway --bench store_backends`. Prints markdown tables;
//! says why and exits when PostgreSQL is not installed.

#[path = "../tests/support/pgcluster.rs"]
mod pgcluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, Auditor, NoopSink};
use sandboxio_budget::{BudgetConfig, ReserveRequest};
use sandboxio_core::{CostCategory, Decision, Layer, Operation, OperationArgs, Principal};
use sandboxio_gateway::store::*;
use sandboxio_gateway::*;

const N: usize = 2000;
const BLOCK: usize = 250;
const SUBMITTERS: usize = 8;

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

fn budget() -> BudgetConfig {
    BudgetConfig {
        global: Some("1000000000".parse().unwrap()),
        per_tenant: Some("1000000000".parse().unwrap()),
        ..BudgetConfig::default()
    }
}

fn gateway(store: Arc<dyn Store>) -> Arc<Gateway> {
    let redaction = Redaction::from_env(vec![]);
    let cfg = AuditConfig::default().with_sinks(vec![Arc::new(NoopSink)]);
    let auditor = Auditor::new(cfg, redaction.base().unwrap());
    let gc = GatewayConfig {
        budget: budget(),
        ..GatewayConfig::default()
    };
    Arc::new(
        Gateway::new(
            gc,
            store,
            Arc::new(AllowAll),
            auditor,
            redaction,
            Default::default(),
            Approver::Nobody,
        )
        .with_tool("noop", Arc::new(Noop)),
    )
}

fn submission(i: usize) -> Submission {
    Submission::new(Operation::new(
        Principal::tenant("bench"),
        OperationArgs::ToolCall {
            tool: "noop".into(),
            arguments: serde_json::json!({ "i": i }),
        },
    ))
}

fn admission<'a>(id: &str, cfg: &'a BudgetConfig) -> Admission<'a> {
    Admission {
        journal: JournalEntry {
            operation_id: id.into(),
            intent: "{\"kind\":\"tool_call\"}".into(),
            started_at: Utc::now(),
            owner: "1:1".into(),
            idempotent: false,
            idem: None,
        },
        rate: vec![],
        budget: cfg,
        reserve: ReserveRequest {
            id: id.into(),
            tenant: "bench".into(),
            session: None,
            category: CostCategory::Compute,
            estimate: Some("0.01".parse().unwrap()),
            agent: None,
            at: None,
        },
        idem: None,
        idem_lookup_only: false,
        now: Utc::now(),
    }
}

fn finish<'a>(id: &'a str, cfg: &'a BudgetConfig) -> Finish<'a> {
    Finish {
        operation_id: id,
        budget: cfg,
        charge: Some("0.01".parse().unwrap()),
        ledger: None,
        idem: None,
        journal_status: "ok",
        heads: &[],
        unrecorded: None,
        now: Utc::now(),
    }
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
    gw: Arc<Gateway>,
    admit: Vec<Duration>,
    submit: Vec<Duration>,
    next: usize,
}

impl Backend {
    fn new(name: &'static str, store: Arc<dyn Store>) -> Backend {
        Backend {
            name,
            gw: gateway(store.clone()),
            store,
            admit: Vec::new(),
            submit: Vec::new(),
            next: 0,
        }
    }

    /// One block of admissions (each finished outside the timed part), then one block of
    /// whole operations.
    async fn block(&mut self) {
        let cfg = budget();
        for _ in 0..BLOCK {
            self.next += 1;
            let id = format!("{}-{}", self.name, self.next);
            let store = self.store.clone();
            let (d, admitted) = tokio::task::spawn_blocking({
                let id = id.clone();
                let cfg = cfg.clone();
                move || {
                    let a = admission(&id, &cfg);
                    let t = Instant::now();
                    let r = store.admit(&a).unwrap();
                    let d = t.elapsed();
                    store.finish(&finish(&id, &cfg)).unwrap();
                    (d, r)
                }
            })
            .await
            .unwrap();
            assert!(matches!(admitted, Admitted::Proceed(_)), "{admitted:?}");
            self.admit.push(d);
        }
        for _ in 0..BLOCK {
            self.next += 1;
            let s = submission(self.next);
            let t = Instant::now();
            let o = self.gw.submit(s).await.unwrap();
            self.submit.push(t.elapsed());
            assert!(o.allowed(), "{:?}", o.record.reason);
        }
    }

    /// Whole operations from 8 concurrent submitters: operations per second.
    async fn throughput(&self) -> f64 {
        let per = N / SUBMITTERS;
        let t = Instant::now();
        let tasks: Vec<_> = (0..SUBMITTERS)
            .map(|w| {
                let gw = self.gw.clone();
                tokio::spawn(async move {
                    for i in 0..per {
                        let o = gw
                            .submit(submission(1_000_000 + w * per + i))
                            .await
                            .unwrap();
                        assert!(o.allowed());
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        (per * SUBMITTERS) as f64 / t.elapsed().as_secs_f64()
    }
}

/// Starts the cluster (the `postgres` client must not run on a runtime's thread), then
/// measures on a 2-worker runtime.
fn main() {
    let cluster = match pgcluster::Cluster::durable() {
        Ok(c) => c,
        Err(why) => {
            println!("SKIP store_backends: {why}");
            return;
        }
    };
    let url = cluster.database();
    {
        let mut c = postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).unwrap();
        let fsync: String = c.query_one("SHOW fsync", &[]).unwrap().get(0);
        let commit: String = c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
        assert_eq!((fsync.as_str(), commit.as_str()), ("on", "on"));
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(measure(url));
}

async fn measure(url: String) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("state.db"), SyncMode::Full).unwrap());
    let mut opts = PgOptions::new(sandboxio_config::StateUrl::parse(&url).unwrap());
    opts.pool = 8;
    let pg: Arc<dyn Store> = Arc::new(PgStore::open(&opts).unwrap());
    let mut backends = [Backend::new("sqlite", sqlite), Backend::new("postgres", pg)];
    // Warm-up: one block each, discarded.
    for b in backends.iter_mut() {
        b.block().await;
        b.admit.clear();
        b.submit.clear();
    }
    for _ in 0..N / BLOCK {
        for b in backends.iter_mut() {
            b.block().await;
        }
    }
    println!(
        "{N} sequential operations per backend, in alternating blocks of {BLOCK}\n\n\
         | backend | `Store::admit` p50 µs | p99 µs | whole no-op operation p50 µs | p99 µs |\n\
         |---|---:|---:|---:|---:|"
    );
    let mut p50 = Vec::new();
    for b in backends.iter_mut() {
        let (a50, a99) = (pct(&mut b.admit, 0.5), pct(&mut b.admit, 0.99));
        let (s50, s99) = (pct(&mut b.submit, 0.5), pct(&mut b.submit, 0.99));
        println!("| {} | {a50:.0} | {a99:.0} | {s50:.0} | {s99:.0} |", b.name);
        p50.push((a50, s50));
    }
    println!(
        "\nPostgreSQL / SQLite at p50: admission {:.2}x, whole operation {:.2}x",
        p50[1].0 / p50[0].0,
        p50[1].1 / p50[0].1
    );
    println!("\n| backend | {SUBMITTERS} concurrent submitters, ops/s |\n|---|---:|");
    let mut ops = Vec::new();
    for b in backends.iter() {
        let r = b.throughput().await;
        println!("| {} | {r:.0} |", b.name);
        ops.push(r);
    }
    println!("\nPostgreSQL / SQLite throughput: {:.2}x", ops[1] / ops[0]);
}
