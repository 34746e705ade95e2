use std::time::Duration;

use sandboxio_budget::{LatencyClass, LatencyConfig, LatencyTracker, LATENCY_WINDOW};
use sandboxio_core::OperationKind;

#[test]
fn percentiles_and_violations() {
    let mut t = LatencyTracker::new(LatencyConfig::default());
    let mut violations = 0;
    for ms in 1..=100u64 {
        if t.record(LatencyClass::Interactive, Duration::from_millis(ms * 6))
            .is_some()
        {
            violations += 1;
        }
    }
    // 6..=600 ms; above 500 ms: 504..=600 → 17 values.
    assert_eq!(violations, 17);
    let r = t.report(LatencyClass::Interactive);
    assert_eq!(r.count, 100);
    assert_eq!(r.violations, 17);
    assert_eq!(r.p50.unwrap().0, Duration::from_millis(300));
    assert_eq!(r.p95.unwrap().0, Duration::from_millis(570));
    assert_eq!(r.p99.unwrap().0, Duration::from_millis(594));
    assert!(!r.within_targets());
    assert!(t.report(LatencyClass::Planning).p50.is_none());
}

#[test]
fn violation_says_what_and_by_how_much() {
    let mut t = LatencyTracker::new(LatencyConfig::default());
    let v = t
        .record(LatencyClass::Planning, Duration::from_secs(11))
        .unwrap();
    assert_eq!(
        v.to_string(),
        "planning operation took 11s, over its p99 target of 10s"
    );
    assert!(t
        .record(LatencyClass::Planning, Duration::from_secs(10))
        .is_none());
}

#[test]
fn window_is_bounded() {
    let mut t = LatencyTracker::new(LatencyConfig::default());
    for _ in 0..LATENCY_WINDOW + 10 {
        t.record(LatencyClass::Execution, Duration::from_secs(1));
    }
    let json = serde_json::to_string(&t).unwrap();
    let back: LatencyTracker = serde_json::from_str(&json).unwrap();
    assert_eq!(
        back.report(LatencyClass::Execution).count,
        (LATENCY_WINDOW + 10) as u64
    );
}

#[test]
fn kinds_map_to_classes() {
    assert_eq!(
        LatencyClass::for_kind(OperationKind::RunCode),
        LatencyClass::Execution
    );
    assert_eq!(
        LatencyClass::for_kind(OperationKind::ToolCall),
        LatencyClass::Planning
    );
    assert_eq!(
        LatencyClass::for_kind(OperationKind::FileRead),
        LatencyClass::Interactive
    );
}
