//! Spans: semconv names, nesting under the caller's invoke_agent span, error.type.

use std::sync::Arc;

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer};
use opentelemetry::{global, Context, Value};
use opentelemetry_sdk::trace::SpanData;
use sandboxio_audit::{parent_from_traceparent, AuditConfig, Auditor, Redactor};
use sandboxio_core::telemetry as t;
use sandboxio_core::{Layer, OperationStatus, RuleRef, Verdict};

use super::common::{exec_record, span_exporter};

fn attr<'a>(s: &'a SpanData, k: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == k)
        .map(|kv| &kv.value)
}

fn find(id: &str) -> SpanData {
    span_exporter()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .find(|s| attr(s, t::GEN_AI_TOOL_CALL_ID).map(|v| v.to_string()) == Some(id.into()))
        .unwrap_or_else(|| panic!("no span for {id}"))
}

fn auditor() -> Auditor {
    Auditor::new(
        AuditConfig::default(),
        Arc::new(Redactor::builder().build().unwrap()),
    )
}

#[tokio::test]
async fn span_has_semconv_names_and_nests_under_invoke_agent() {
    // The auditor exists before the provider is installed: the tracer is looked up lazily.
    let a = auditor();
    span_exporter();
    let agent = global::tracer("test-agent");
    let parent = agent.start(format!("{} my-agent", t::OP_INVOKE_AGENT));
    let parent_sc = parent.span_context().clone();
    let cx = Context::current_with_span(parent);
    a.record_with_parent(exec_record("op-otel-1"), &cx)
        .await
        .unwrap();
    cx.span().end();

    let s = find("op-otel-1");
    assert_eq!(s.name, "execute_tool exec");
    assert_eq!(s.span_kind, SpanKind::Internal);
    assert_eq!(s.parent_span_id, parent_sc.span_id());
    assert_eq!(s.span_context.trace_id(), parent_sc.trace_id());
    let get = |k: &str| attr(&s, k).map(|v| v.to_string()).unwrap_or_default();
    assert_eq!(get(t::GEN_AI_OPERATION_NAME), "execute_tool");
    assert_eq!(get(t::GEN_AI_TOOL_NAME), "exec");
    assert_eq!(get(t::SBX_BACKEND), "local");
    assert_eq!(get(t::SBX_ISOLATION), "namespace");
    assert_eq!(get(t::SBX_SANDBOX_ID), "sbx-op-otel-1");
    assert_eq!(get(t::SBX_EXIT_CODE), "0");
    assert_eq!(get(t::SBX_DURATION_MS), "12");
    assert_eq!(get(t::SBX_BYTES_IN), "10");
    assert_eq!(get(t::SBX_BYTES_OUT), "20");
    assert_eq!(get(t::SBX_DECISION), "allow");
    assert_eq!(get(t::SBX_STATUS), "ok");
    assert!(attr(&s, t::ERROR_TYPE).is_none());
    assert!(
        attr(&s, t::SBX_CODE).is_none(),
        "no code without capture_code"
    );
    let dur = s.end_time.duration_since(s.start_time).unwrap();
    assert_eq!(dur.as_millis(), 12);
}

#[tokio::test]
async fn traceparent_string_and_record_ids_give_the_parent() {
    span_exporter();
    let a = auditor();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let cx = parent_from_traceparent(tp).unwrap();
    a.record_with_parent(exec_record("op-otel-2"), &cx)
        .await
        .unwrap();
    let s = find("op-otel-2");
    assert_eq!(
        format!("{}", s.span_context.trace_id()),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(format!("{}", s.parent_span_id), "00f067aa0ba902b7");

    let mut rec = exec_record("op-otel-3");
    rec.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
    rec.span_id = Some("00f067aa0ba902b7".into());
    a.record(rec).await.unwrap();
    let s = find("op-otel-3");
    assert_eq!(format!("{}", s.parent_span_id), "00f067aa0ba902b7");

    for bad in [
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
    ] {
        assert!(parent_from_traceparent(bad).is_none(), "{bad}");
    }
}

#[tokio::test]
async fn denied_operation_sets_error_type_decision_layer_and_rule() {
    span_exporter();
    let a = auditor();
    let mut rec = exec_record("op-otel-4");
    rec.status = OperationStatus::Denied;
    rec.verdict = Verdict::Deny;
    rec.layer = Layer::Policy;
    rec.exit_code = None;
    rec.error_code = Some("SBX_E1201".into());
    rec.rules.push(RuleRef {
        id: "no-network".into(),
        file: None,
        line: None,
    });
    rec.reason = "network is not allowed for this agent".into();
    a.record(rec).await.unwrap();
    let s = find("op-otel-4");
    let get = |k: &str| attr(&s, k).map(|v| v.to_string()).unwrap_or_default();
    assert_eq!(get(t::ERROR_TYPE), "SBX_E1201");
    assert_eq!(get(t::SBX_DECISION), "deny");
    assert_eq!(get(t::SBX_LAYER), "policy");
    assert!(get(t::SBX_RULE).contains("no-network"));
    assert!(matches!(
        s.status,
        opentelemetry::trace::Status::Error { .. }
    ));
}

#[test]
fn semconv_version_is_pinned() {
    assert_eq!(t::SEMCONV_VERSION, "1.37.0");
}
