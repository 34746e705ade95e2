//! The Auditor's failure modes, exactly as the README documents them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxio_audit::auditor::parse_timeout;
use sandboxio_audit::{AuditConfig, AuditError, Auditor, OnSinkFailure, Redactor};
use sandboxio_core::ErrorCode;

use super::common::{capture_logs, exec_record, CollectSink, FailingSink, HangingSink};

fn auditor(
    mode: OnSinkFailure,
    bad: Arc<dyn sandboxio_audit::AuditSink>,
) -> (Auditor, Arc<CollectSink>) {
    let good = Arc::new(CollectSink::default());
    let cfg = AuditConfig::default()
        .with_sinks(vec![bad, good.clone()])
        .on_sink_failure(mode)
        .timeout(Duration::from_millis(100));
    (
        Auditor::new(cfg, Arc::new(Redactor::builder().build().unwrap())),
        good,
    )
}

#[tokio::test]
async fn warn_mode_failing_sink_warns_counts_and_proceeds() {
    let (logs, _g) = capture_logs();
    let (a, good) = auditor(OnSinkFailure::Warn, Arc::new(FailingSink));
    let out = a.record(exec_record("op-w1")).await.unwrap();
    assert_eq!(out.failures.len(), 1);
    assert!(!out.failures[0].timed_out);
    assert_eq!(a.sink_failures(), 1);
    assert_eq!(good.all().len(), 1, "the other sinks still get the event");
    assert!(logs.text().contains("SBX_E1601") && logs.text().contains("audit sink failed"));
    assert_eq!(out.meter.backend, "local");
    assert_eq!(out.meter.duration_ms, 12);
}

#[tokio::test]
async fn fail_mode_failing_sink_fails_the_operation_with_e1601() {
    let (a, good) = auditor(OnSinkFailure::Fail, Arc::new(FailingSink));
    let e = a.record(exec_record("op-f1")).await.unwrap_err();
    assert_eq!(e.code(), "SBX_E1601");
    assert!(matches!(
        e,
        AuditError::SinkFailed {
            timed_out: false,
            ..
        }
    ));
    assert!(e.to_string().starts_with("audit sink `failing` failed"));
    assert_eq!(
        good.all().len(),
        1,
        "remaining sinks were still offered the event"
    );
    assert_eq!(a.sink_failures(), 1);
}

#[tokio::test]
async fn warn_mode_hanging_sink_is_cut_at_the_timeout_and_proceeds() {
    let (a, good) = auditor(OnSinkFailure::Warn, Arc::new(HangingSink));
    let t0 = Instant::now();
    let out = a.record(exec_record("op-w2")).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(out.failures[0].timed_out);
    assert_eq!(good.all().len(), 1);
}

#[tokio::test]
async fn fail_mode_hanging_sink_fails_with_e1601_at_the_timeout() {
    let (a, _good) = auditor(OnSinkFailure::Fail, Arc::new(HangingSink));
    let t0 = Instant::now();
    let e = a.record(exec_record("op-f2")).await.unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(e.code(), "SBX_E1601");
    assert!(matches!(
        e,
        AuditError::SinkFailed {
            timed_out: true,
            ..
        }
    ));
    assert!(e.is_transient());
}

#[tokio::test]
async fn code_is_only_in_the_event_with_capture_code() {
    let mut rec = exec_record("op-code");
    rec.code = Some("print('hello')".into());
    rec.code_sha256 = Some("ab".repeat(32));
    let good = Arc::new(CollectSink::default());
    let redactor = Arc::new(Redactor::builder().build().unwrap());
    let off = Auditor::new(
        AuditConfig::default().with_sinks(vec![good.clone()]),
        redactor.clone(),
    );
    let out = off.record(rec.clone()).await.unwrap();
    assert!(out.event.code.is_none());
    assert!(!good.all()[0].contains("\"code\":"));
    assert!(good.all()[0].contains("code_sha256"));
    let on = Auditor::new(
        AuditConfig::default()
            .with_sinks(vec![good.clone()])
            .capture_code(true),
        redactor,
    );
    let out = on.record(rec).await.unwrap();
    assert_eq!(out.event.code.as_deref(), Some("print('hello')"));
}

#[test]
fn audit_timeout_parses_human_durations_and_plain_seconds() {
    assert_eq!(parse_timeout("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_timeout("2").unwrap(), Duration::from_secs(2));
    assert_eq!(parse_timeout("1m").unwrap(), Duration::from_secs(60));
    for bad in ["0", "abc", "-1", ""] {
        assert_eq!(parse_timeout(bad).unwrap_err().code(), "SBX_E1608", "{bad}");
    }
    assert_eq!(
        sandboxio_audit::auditor::DEFAULT_AUDIT_TIMEOUT,
        Duration::from_secs(5)
    );
}

#[test]
fn every_sink_renders_the_same_json_line() {
    let ev = sandboxio_audit::AuditEvent::from_record(&exec_record("op-j"), false);
    let line = ev.as_json().unwrap();
    let back: sandboxio_audit::AuditEvent = serde_json::from_str(&line).unwrap();
    assert_eq!(back, ev);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    for k in [
        "ts",
        "event",
        "sandbox_id",
        "backend",
        "isolation",
        "tenant_id",
        "session_id",
        "code_sha256",
        "argv",
        "exit_code",
        "duration_ms",
        "bytes_in",
        "bytes_out",
        "network_denials",
        "decision",
        "layer",
        "rules",
        "reason",
        "status",
        "error_code",
        "cost_reserved",
        "cost_settled",
        "enforcement",
        "operation_id",
        "idempotency_key",
        "replayed",
        "attempts",
        "approval_id",
        "approver",
        "approval_wait_ms",
        "trace_id",
    ] {
        assert!(v.get(k).is_some(), "missing `{k}` in {line}");
    }
}
