//! Per-operation cost of the audit pipeline. `cargo bench -p sandboxio-audit`.
//!
//! Plain `std::time::Instant` timing, one sample per operation, p50/p99 printed. No
//! tracer/meter provider is installed, so spans and metrics measure the no-op path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxio_audit::sink::FileSinkOptions;
use sandboxio_audit::{
    emit_span, AuditConfig, AuditEvent, AuditKey, AuditSink, Auditor, FileSink, FsyncPolicy,
    LoggingSink, Metrics, QueueSink, Redactor, Secret,
};
use sandboxio_core::{IsolationTier, OperationRecord, OperationStatus, Verdict};

fn record(i: usize) -> OperationRecord {
    let mut r = OperationRecord::new(format!("op-{i:08}"), "run_code");
    r.backend = "local".into();
    r.isolation = Some(IsolationTier::Namespace);
    r.sandbox_id = Some("sbx-0123456789".into());
    r.tenant_id = Some("acme".into());
    r.session_id = Some("sess-42".into());
    r.argv = Some(vec!["python3".into(), "-c".into(), "main.py".into()]);
    r.code =
        Some("import json, sys\nfor i in range(10):\n    print(json.dumps({'i': i}))\n".repeat(3));
    r.code_sha256 = Some("ab".repeat(32));
    r.exit_code = Some(0);
    r.duration_ms = 37;
    r.bytes_in = 180;
    r.bytes_out = 4096;
    r.status = OperationStatus::Ok;
    r.verdict = Verdict::Allow;
    r.reason = "allowed by rule python-default".into();
    r.labels.insert("team".into(), "search".into());
    r.labels.insert("run".into(), format!("{i}"));
    r
}

fn redactor() -> Redactor {
    Redactor::builder()
        .secret(&Secret::new("s3cr3t-db-password-1234"))
        .secret(&Secret::new("another-secret-value-xyz"))
        .env([
            ("OPENAI_API_KEY", "sk-proj-Zk3xQ9mW2vLp8RtY6nB4cJ1hG5fD7sA0"),
            ("PATH", "/usr/bin"),
        ])
        .build()
        .unwrap()
}

fn pct(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    (
        at(0.50),
        at(0.99),
        v.iter().sum::<Duration>() / v.len() as u32,
    )
}

fn report(name: &str, samples: Vec<Duration>) {
    let n = samples.len();
    let (p50, p99, mean) = pct(samples);
    println!(
        "{name:<58} n={n:<6} p50={:>9.2?} p99={:>9.2?} mean={:>9.2?}",
        p50, p99, mean
    );
}

fn file_sink(dir: &std::path::Path, name: &str, fsync: FsyncPolicy) -> Arc<FileSink> {
    Arc::new(
        FileSink::open(
            FileSinkOptions::new(dir.join(name))
                .fsync(fsync)
                .rotate_bytes(Some(256 * 1024 * 1024)),
            Arc::new(AuditKey::generate()),
        )
        .unwrap(),
    )
}

async fn pipeline(name: &str, dir: &std::path::Path, fsync: FsyncPolicy, n: usize) {
    let file = file_sink(dir, &format!("{name}.jsonl"), fsync);
    let queue = Arc::new(QueueSink::new(Arc::new(sandboxio_audit::NoopSink), 1 << 16));
    let cfg =
        AuditConfig::default().with_sinks(vec![file.clone(), Arc::new(LoggingSink), queue.clone()]);
    let auditor = Auditor::new(cfg, Arc::new(redactor()));
    for i in 0..200 {
        auditor.record(record(i)).await.unwrap();
    }
    let mut s = Vec::with_capacity(n);
    for i in 0..n {
        let rec = record(i);
        let t0 = Instant::now();
        auditor.record(rec).await.unwrap();
        s.push(t0.elapsed());
        if i % 1024 == 0 {
            queue.drain_available().await;
        }
    }
    report(
        &format!("record+redact+sinks(file {fsync:?},logging,queue)+span+metrics"),
        s,
    );
    file.close().await.unwrap();
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir =
        tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let quick = std::env::var("BENCH_QUICK").is_ok();
    let n = if quick { 2_000 } else { 20_000 };
    rt.block_on(async {
        // Pieces.
        let r = redactor();
        let mut s = Vec::new();
        for i in 0..n {
            let rec = record(i);
            let t0 = Instant::now();
            let _ = std::hint::black_box(r.redact_record(rec));
            s.push(t0.elapsed());
        }
        report("redact_record (3 secrets + shapes)", s);

        let rec = r.redact_record(record(1));
        let mut s = Vec::new();
        for _ in 0..n {
            let t0 = Instant::now();
            let ev = AuditEvent::from_record(&rec, false);
            let _ = std::hint::black_box(ev.as_json().unwrap());
            s.push(t0.elapsed());
        }
        report("AuditEvent::from_record + as_json", s);

        let cx = opentelemetry::Context::new();
        let mut s = Vec::new();
        for _ in 0..n {
            let t0 = Instant::now();
            emit_span(&rec, &cx, false);
            s.push(t0.elapsed());
        }
        report("emit_span, no tracer provider (no-op)", s);

        let m = Metrics::new();
        let mut s = Vec::new();
        for _ in 0..n {
            let t0 = Instant::now();
            m.record_operation(&rec);
            s.push(t0.elapsed());
        }
        report("Metrics::record_operation, no meter provider (no-op)", s);

        // Whole pipeline.
        pipeline("never", dir.path(), FsyncPolicy::Never, n).await;
        pipeline(
            "interval",
            dir.path(),
            FsyncPolicy::Interval(Duration::from_secs(1)),
            n,
        )
        .await;
        pipeline("always", dir.path(), FsyncPolicy::Always, n / 10).await;

        // Throughput of the file sink alone.
        for (label, fsync, count) in [
            ("never", FsyncPolicy::Never, n * 5),
            ("always", FsyncPolicy::Always, n / 10),
        ] {
            let file = file_sink(dir.path(), &format!("tput-{label}.jsonl"), fsync);
            let ev = AuditEvent::from_record(&rec, false);
            let t0 = Instant::now();
            for _ in 0..count {
                file.emit(&ev).await.unwrap();
            }
            file.close().await.unwrap();
            let el = t0.elapsed();
            println!(
                "{:<58} {:>10.0} records/s ({count} records in {el:.2?})",
                format!("FileSink throughput, fsync {label}"),
                count as f64 / el.as_secs_f64()
            );
        }
    });
}
