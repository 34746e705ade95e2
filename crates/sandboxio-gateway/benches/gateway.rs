#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Whole-gateway overhead per operation without a sandbox (a no-op tool), with every state
//! change durable (SQLite WAL, synchronous=FULL) before the side effect; idempotent replay
//! against first execution; throughput with 8 concurrent submitters. One case writes a
//! real file trail (fsync never, so the disk does not hide the chain's own cost), which is
//! where the trail's signed head is computed and stored; the last case has every state
//! change durable: SQLite `synchronous=FULL` and the signed trail fsynced per record (the
//! configuration's defaults).
//!
//! Run: `cargo bench -p sandboxio-gateway --bench gateway`. Prints a markdown table.
//! `GATEWAY_BENCH_CASE=<text>` runs only the cases whose name contains it (the floor
//! always runs; `concurrent` names the throughput case), for `perf stat` or `strace -c`
//! of one case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{
    AuditConfig, AuditKey, Auditor, FileSink, FileSinkOptions, FsyncPolicy, NoopSink,
};
use sandboxio_core::{Decision, IdempotencyKey, Layer, Operation, OperationArgs, Principal};
use sandboxio_gateway::store::{SqliteStore, SyncMode};
use sandboxio_gateway::*;

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

fn gateway(dir: &std::path::Path, sync: SyncMode, budget: bool) -> Gateway {
    gateway_with(dir, sync, budget, None)
}

fn gateway_with(
    dir: &std::path::Path,
    sync: SyncMode,
    budget: bool,
    file: Option<FsyncPolicy>,
) -> Gateway {
    let store = Arc::new(SqliteStore::open(&dir.join("s.db"), sync).expect("store"));
    let redaction = Redaction::from_env(vec![]);
    let sink: Arc<dyn sandboxio_audit::AuditSink> = match file {
        Some(fsync) => {
            let opts = FileSinkOptions::new(dir.join("audit.jsonl")).fsync(fsync);
            Arc::new(FileSink::open(opts, Arc::new(AuditKey::generate())).expect("trail"))
        }
        None => Arc::new(NoopSink),
    };
    let cfg = AuditConfig::default().with_sinks(vec![sink]);
    let auditor = Auditor::new(cfg, redaction.base().expect("redactor"));
    let mut gc = GatewayConfig::default();
    if budget {
        gc.budget.global = Some("1000000".parse().expect("money"));
    }
    Gateway::new(
        gc,
        store,
        Arc::new(AllowAll),
        auditor,
        redaction,
        Default::default(),
        Approver::Nobody,
    )
    .with_tool("noop", Arc::new(Noop))
}

fn op(i: usize, key: Option<&str>) -> Submission {
    let mut o = Operation::new(
        Principal::tenant("bench"),
        OperationArgs::ToolCall {
            tool: "noop".into(),
            arguments: serde_json::json!({ "i": i }),
        },
    );
    o.idempotency_key = key.map(|k| IdempotencyKey::new(k).expect("key"));
    Submission::new(o)
}

/// Whether `GATEWAY_BENCH_CASE` (unset: every case) selects the case `name`.
fn selected(name: &str) -> bool {
    std::env::var("GATEWAY_BENCH_CASE").map_or(true, |c| name.contains(c.as_str()))
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

async fn measure(gw: &Gateway, n: usize, key: impl Fn(usize) -> Option<String>) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let k = key(i);
        let s = op(i, k.as_deref());
        let t = Instant::now();
        let o = gw.submit(s).await.expect("submit");
        out.push(t.elapsed());
        assert!(o.allowed());
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = 2000;
    // The floor: one small append plus fdatasync on the same disk, in the same run.
    {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tmp");
        let mut f = std::fs::File::create(dir.path().join("f")).expect("file");
        let mut v = Vec::with_capacity(500);
        for _ in 0..500 {
            let t = Instant::now();
            f.write_all(&[b'x'; 100]).expect("write");
            f.sync_data().expect("fsync");
            v.push(t.elapsed());
        }
        println!(
            "raw append + fdatasync on this disk: p50 {:.0} µs, p99 {:.0} µs\n",
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        );
    }
    println!("| case | p50 µs | p99 µs |\n|---|---|---|");
    for (name, sync, budget, keyed, file) in [
        (
            "no budget, no key, synchronous=FULL",
            SyncMode::Full,
            false,
            false,
            None,
        ),
        (
            "budget reserve+settle, synchronous=FULL",
            SyncMode::Full,
            true,
            false,
            None,
        ),
        (
            "budget + idempotency key (first execution), FULL",
            SyncMode::Full,
            true,
            true,
            None,
        ),
        (
            "budget + key, synchronous=NORMAL",
            SyncMode::Normal,
            true,
            true,
            None,
        ),
        (
            "budget + key, NORMAL, file trail (fsync never)",
            SyncMode::Normal,
            true,
            true,
            Some(FsyncPolicy::Never),
        ),
        (
            "budget + key, FULL, file trail fsync always (every state change durable)",
            SyncMode::Full,
            true,
            true,
            Some(FsyncPolicy::Always),
        ),
    ] {
        if !selected(name) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tmp");
        let gw = gateway_with(dir.path(), sync, budget, file);
        let mut v = measure(&gw, n, |i| keyed.then(|| format!("k{i}"))).await;
        println!(
            "| {name} | {:.0} | {:.0} |",
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        );
        if keyed && sync == SyncMode::Full && file.is_none() {
            let mut r = measure(&gw, n, |i| Some(format!("k{i}"))).await;
            let (p50f, p50r) = (pct(&mut v, 0.5), pct(&mut r, 0.5));
            println!(
                "| idempotent replay of the same {n} keys, FULL | {:.0} | {:.0} |",
                p50r,
                pct(&mut r, 0.99)
            );
            println!("\nreplay / first execution at p50: {:.2}\n", p50r / p50f);
            println!("| case | p50 µs | p99 µs |\n|---|---|---|");
        }
    }
    // Throughput with 8 concurrent submitters.
    if !selected("8 concurrent submitters") {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let gw = Arc::new(gateway(dir.path(), SyncMode::Full, true));
    let per = 250;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let gw = gw.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let o = gw.submit(op(w * per + i, None)).await.expect("submit");
                assert!(o.allowed());
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "\n8 concurrent submitters, budget on, FULL: {} ops in {:.2}s = {:.0} ops/s",
        8 * per,
        secs,
        (8 * per) as f64 / secs
    );
}
