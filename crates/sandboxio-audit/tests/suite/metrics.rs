//! Metric names and labels (issue 5 item 6), read back through an in-memory exporter on a
//! global meter provider: operations by kind and status, the duration histogram, denials
//! by layer and rule, network denials, latency-budget violations, sink failures and
//! redactions. Each test uses its own event names and rule ids, so tests sharing the
//! global provider do not disturb each other's counts.

use std::sync::{Arc, OnceLock};

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use sandboxio_audit::{AuditConfig, AuditSink, Auditor, Redactor, Secret};
use sandboxio_core::telemetry as t;
use sandboxio_core::{Layer, OperationStatus, RuleRef, Verdict};

use super::common::{exec_record, CollectSink, FailingSink};

/// The process-wide meter provider and its in-memory exporter (installed once).
fn meters() -> &'static (SdkMeterProvider, InMemoryMetricExporter) {
    static M: OnceLock<(SdkMeterProvider, InMemoryMetricExporter)> = OnceLock::new();
    M.get_or_init(|| {
        let exp = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exp.clone()).build())
            .build();
        opentelemetry::global::set_meter_provider(provider.clone());
        (provider, exp)
    })
}

/// One data point: metric name, attributes (sorted `k=v`), value (sum, or histogram count).
#[derive(Debug, Clone, PartialEq)]
struct Point {
    name: String,
    unit: String,
    attrs: Vec<String>,
    value: f64,
}

fn attrs<'a>(kvs: impl Iterator<Item = &'a KeyValue>) -> Vec<String> {
    let mut v: Vec<String> = kvs.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
    v.sort();
    v
}

/// Flushes and returns the points of the latest export (cumulative temporality).
fn collect() -> Vec<Point> {
    let (provider, exp) = meters();
    provider.force_flush().unwrap();
    let all: Vec<ResourceMetrics> = exp.get_finished_metrics().unwrap();
    let mut out = Vec::new();
    let Some(last) = all.last() else {
        return out;
    };
    for sm in last.scope_metrics() {
        for m in sm.metrics() {
            let (name, unit) = (m.name().to_string(), m.unit().to_string());
            let mut push = |a: Vec<String>, value: f64| {
                out.push(Point {
                    name: name.clone(),
                    unit: unit.clone(),
                    attrs: a,
                    value,
                })
            };
            match m.data() {
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    for p in s.data_points() {
                        push(attrs(p.attributes()), p.value() as f64);
                    }
                }
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    for p in h.data_points() {
                        push(attrs(p.attributes()), p.count() as f64);
                    }
                }
                AggregatedMetrics::I64(MetricData::Sum(sum)) => {
                    for p in sum.data_points() {
                        push(attrs(p.attributes()), p.value() as f64);
                    }
                }
                AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                    for p in g.data_points() {
                        push(attrs(p.attributes()), p.value());
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn value(points: &[Point], name: &str, want: &[&str]) -> Option<f64> {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    points
        .iter()
        .find(|p| p.name == name && p.attrs == want)
        .map(|p| p.value)
}

fn auditor(sinks: Vec<Arc<dyn AuditSink>>, secrets: &[Secret]) -> Auditor {
    Auditor::new(
        AuditConfig::default().with_sinks(sinks),
        Arc::new(Redactor::builder().secrets(secrets.iter()).build().unwrap()),
    )
}

#[tokio::test]
async fn operations_denials_and_durations_have_the_documented_names_and_labels() {
    meters();
    let a = auditor(vec![Arc::new(CollectSink::default())], &[]);
    // Two ok exec operations, one that failed, and one denied by a policy rule.
    for id in ["m-1", "m-2"] {
        let mut r = exec_record(id);
        r.event = "metrics_exec".into();
        a.record(r).await.unwrap();
    }
    let mut failed = exec_record("m-3");
    failed.event = "metrics_exec".into();
    failed.status = OperationStatus::Failed;
    failed.exit_code = Some(1);
    failed.network_denials = 3;
    failed.latency_budget_violated = true;
    a.record(failed).await.unwrap();
    let mut denied = exec_record("m-4");
    denied.event = "metrics_run_code".into();
    denied.status = OperationStatus::Denied;
    denied.verdict = Verdict::Deny;
    denied.layer = Layer::Policy;
    denied.rules = vec![RuleRef {
        id: "metrics-deny-rule".into(),
        file: Some("p.toml".into()),
        line: Some(3),
    }];
    a.record(denied).await.unwrap();

    let points = collect();
    let ev = |e: &str| format!("{}={e}", sandboxio_audit::otel::SBX_EVENT);
    let st = |s: &str| format!("{}={s}", t::SBX_STATUS);
    let ops = |e: &str, s: &str| value(&points, t::M_OPERATIONS, &[&ev(e), &st(s)]);
    assert_eq!(ops("metrics_exec", "ok"), Some(2.0), "{points:#?}");
    assert_eq!(ops("metrics_exec", "failed"), Some(1.0));
    assert_eq!(ops("metrics_run_code", "denied"), Some(1.0));
    // The duration histogram: same labels, unit ms, one sample per operation.
    let dur = points
        .iter()
        .find(|p| {
            p.name == t::M_DURATION
                && p.attrs == {
                    let mut v = vec![ev("metrics_exec"), st("ok")];
                    v.sort();
                    v
                }
        })
        .unwrap();
    assert_eq!((dur.unit.as_str(), dur.value), ("ms", 2.0));
    // Denials by layer and (first) rule.
    assert_eq!(
        value(
            &points,
            t::M_DENIALS,
            &[
                &format!("{}=policy", t::SBX_LAYER),
                &format!("{}=metrics-deny-rule", t::SBX_RULE)
            ]
        ),
        Some(1.0),
        "{points:#?}"
    );
    assert_eq!(
        value(&points, t::M_NETWORK_DENIALS, &[&ev("metrics_exec")]),
        Some(3.0)
    );
    assert_eq!(
        value(&points, t::M_LATENCY_VIOLATIONS, &[&ev("metrics_exec")]),
        Some(1.0)
    );
}

#[tokio::test]
async fn sink_failures_and_redactions_are_counted_and_labels_carry_no_secret() {
    meters();
    let canary = "metrics-canary-7f3a9c2e41d8";
    let a = auditor(vec![Arc::new(FailingSink)], &[Secret::new(canary)]);
    let mut r = exec_record("m-5");
    r.event = "metrics_redact".into();
    r.argv = Some(vec!["echo".into(), canary.into()]);
    r.reason = format!("quoted {canary}");
    a.record(r).await.unwrap();

    let points = collect();
    let failures = points
        .iter()
        .find(|p| {
            p.name == t::M_SINK_FAILURES
                && p.attrs
                    .contains(&format!("{}=failing", sandboxio_audit::otel::SBX_SINK))
                && p.attrs
                    .contains(&format!("{}=false", sandboxio_audit::otel::SBX_TIMED_OUT))
        })
        .unwrap_or_else(|| panic!("no sink failure point: {points:#?}"));
    assert!(failures.value >= 1.0);
    let redactions = points
        .iter()
        .find(|p| p.name == t::M_REDACTIONS)
        .unwrap_or_else(|| panic!("no redactions point: {points:#?}"));
    assert!(redactions.value >= 2.0, "argv and reason were redacted");
    for p in &points {
        assert!(
            !p.attrs.iter().any(|a| a.contains(canary)),
            "a metric label carries the canary: {p:?}"
        );
    }
}

#[tokio::test]
async fn approvals_retries_and_budget_have_their_metrics() {
    meters();
    let a = auditor(vec![Arc::new(CollectSink::default())], &[]);
    let mut r = exec_record("m-6");
    r.event = "metrics_approved".into();
    r.approval_wait_ms = Some(1500);
    r.attempts = 3;
    a.record(r).await.unwrap();
    let m = sandboxio_audit::Metrics::new();
    m.approvals_pending(1);
    m.approvals_pending(1);
    m.approvals_pending(-1);
    let spent: sandboxio_core::Money = "2.50".parse().unwrap();
    let left: sandboxio_core::Money = "7.50".parse().unwrap();
    m.budget("tenant:metrics-acme", &spent, Some(&left));

    let points = collect();
    let ev = format!("{}=metrics_approved", sandboxio_audit::otel::SBX_EVENT);
    let wait = points
        .iter()
        .find(|p| p.name == t::M_APPROVAL_WAIT && p.attrs == vec![ev.clone()])
        .unwrap_or_else(|| panic!("no approval wait: {points:#?}"));
    assert_eq!((wait.unit.as_str(), wait.value), ("ms", 1.0));
    assert_eq!(value(&points, t::M_RETRIES, &[&ev]), Some(2.0));
    let pending = points
        .iter()
        .find(|p| p.name == t::M_APPROVALS_PENDING)
        .unwrap_or_else(|| panic!("no pending approvals: {points:#?}"));
    assert!(pending.value >= 1.0);
    let scope = format!("{}=tenant:metrics-acme", sandboxio_audit::otel::SBX_SCOPE);
    assert_eq!(value(&points, t::M_BUDGET_SPENT, &[&scope]), Some(2.5));
    assert_eq!(value(&points, t::M_BUDGET_REMAINING, &[&scope]), Some(7.5));
}

/// Keeps what a tap is handed.
#[derive(Debug, Default)]
struct RecordingTap {
    ops: std::sync::Mutex<Vec<sandboxio_audit::OperationObservation>>,
    failures: std::sync::Mutex<Vec<(String, bool)>>,
    redactions: std::sync::atomic::AtomicU64,
}

impl sandboxio_audit::MetricsTap for RecordingTap {
    fn operation(&self, obs: &sandboxio_audit::OperationObservation) {
        self.ops.lock().unwrap().push(obs.clone());
    }
    fn sink_failure(&self, sink: &str, timed_out: bool) {
        self.failures
            .lock()
            .unwrap()
            .push((sink.to_string(), timed_out));
    }
    fn redactions(&self, n: u64) {
        self.redactions
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

#[tokio::test]
async fn a_tap_sees_each_observation_the_meter_gets_once_and_redacted() {
    meters();
    let canary = "tap-canary-5c1e";
    let tap = Arc::new(RecordingTap::default());
    let a = Auditor::new(
        AuditConfig::default()
            .with_sinks(vec![Arc::new(FailingSink)])
            .metrics_tap(Some(tap.clone())),
        Arc::new(
            Redactor::builder()
                .secrets([Secret::new(canary)].iter())
                .build()
                .unwrap(),
        ),
    );
    let mut ok = exec_record("t-1");
    ok.event = "tap_exec".into();
    ok.duration_ms = 42;
    a.record(ok).await.unwrap();
    let mut denied = exec_record("t-2");
    denied.event = "tap_exec".into();
    denied.status = OperationStatus::Denied;
    denied.verdict = Verdict::Deny;
    denied.layer = Layer::Policy;
    denied.rules = vec![RuleRef {
        id: "tap-rule".into(),
        file: None,
        line: None,
    }];
    denied.reason = format!("refused {canary}");
    a.record(denied).await.unwrap();

    let ops = tap.ops.lock().unwrap().clone();
    assert_eq!(ops.len(), 2, "one observation per record");
    assert_eq!((ops[0].event.as_str(), ops[0].status), ("tap_exec", "ok"));
    assert_eq!(ops[0].duration, std::time::Duration::from_millis(42));
    assert_eq!(ops[1].denied_at, Some(("policy", "tap-rule".to_string())));
    assert!(
        !ops[1].reason.contains(canary) && ops[1].reason.starts_with("refused "),
        "the tap gets the redacted record: {}",
        ops[1].reason
    );
    assert_eq!(
        tap.failures.lock().unwrap().as_slice(),
        &[
            ("failing".to_string(), false),
            ("failing".to_string(), false)
        ]
    );
    assert!(tap.redactions.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    // The meter counted the same operations.
    let points = collect();
    let ev = format!("{}=tap_exec", sandboxio_audit::otel::SBX_EVENT);
    for (status, n) in [("ok", 1.0), ("denied", 1.0)] {
        let st = format!("{}={status}", t::SBX_STATUS);
        assert_eq!(value(&points, t::M_OPERATIONS, &[&ev, &st]), Some(n));
    }
}
