//! OpenTelemetry rendering of a (redacted) record: one GenAI `execute_tool` span per
//! operation, and metrics. Uses the OpenTelemetry API only; the library never installs a
//! provider or exporter. The tracer and meter are looked up from the global provider on
//! EVERY operation: one fetched before the host installs its provider would stay a no-op
//! forever, so nothing is cached. With no provider configured the span is non-recording
//! and nothing else happens.
//!
//! Every attribute name comes from `sandboxio_core::telemetry`, except the few in the
//! "names not in core" section below.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{global, Context, KeyValue, Value};
use sandboxio_core::telemetry as t;
use sandboxio_core::{Money, OperationRecord, OperationStatus, Verdict};

use crate::tap::{MetricsTap, OperationObservation};

// ---- names not in core (sandboxio_core::telemetry has no constant for these yet) ----
/// Instrumentation scope name of the tracer and meter.
pub const INSTRUMENTATION_SCOPE: &str = "sandboxio";
/// Metric attribute: the operation kind (`exec`, `run_code`, `file_read`, …).
pub const SBX_EVENT: &str = "sandboxio.event";
/// Metric attribute: the audit sink that failed.
pub const SBX_SINK: &str = "sandboxio.audit.sink";
/// Budget scope label (`global`, `tenant:<id>`, `session:<id>`).
pub const SBX_SCOPE: &str = "sandboxio.budget.scope";
/// Metric attribute: whether the sink failure was a timeout.
pub const SBX_TIMED_OUT: &str = "sandboxio.timed_out";
/// Value of `gen_ai.tool.type` for sandbox operations (semconv: executed agent-side).
pub const TOOL_TYPE_EXTENSION: &str = "extension";
// ---- end of names not in core ----

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The span name: `execute_tool {tool}`.
pub fn span_name(rec: &OperationRecord) -> String {
    format!("{} {}", t::SPAN_EXECUTE_TOOL, rec.tool_name)
}

/// Whether the record describes a failed or refused operation (sets `error.type`).
fn is_error(rec: &OperationRecord) -> bool {
    !matches!(
        rec.status,
        OperationStatus::Ok | OperationStatus::Replayed | OperationStatus::Warning
    ) || rec.verdict == Verdict::Deny
}

/// The span attributes of a record. Pass the REDACTED record.
pub fn span_attributes(rec: &OperationRecord, capture_code: bool) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(24);
    a.push(KeyValue::new(t::GEN_AI_OPERATION_NAME, t::OP_EXECUTE_TOOL));
    a.push(KeyValue::new(t::GEN_AI_TOOL_NAME, rec.tool_name.clone()));
    a.push(KeyValue::new(
        t::GEN_AI_TOOL_CALL_ID,
        rec.operation_id.clone(),
    ));
    a.push(KeyValue::new(t::GEN_AI_TOOL_TYPE, TOOL_TYPE_EXTENSION));
    a.push(KeyValue::new(t::SBX_BACKEND, rec.backend.clone()));
    if let Some(i) = rec.isolation {
        a.push(KeyValue::new(t::SBX_ISOLATION, i.as_str()));
    }
    if let Some(s) = &rec.sandbox_id {
        a.push(KeyValue::new(t::SBX_SANDBOX_ID, s.clone()));
    }
    if let Some(c) = rec.exit_code {
        a.push(KeyValue::new(t::SBX_EXIT_CODE, i64::from(c)));
    }
    a.push(KeyValue::new(t::SBX_DURATION_MS, i64_of(rec.duration_ms)));
    a.push(KeyValue::new(t::SBX_BYTES_IN, i64_of(rec.bytes_in)));
    a.push(KeyValue::new(t::SBX_BYTES_OUT, i64_of(rec.bytes_out)));
    a.push(KeyValue::new(
        t::SBX_NETWORK_DENIALS,
        i64_of(rec.network_denials),
    ));
    a.push(KeyValue::new(t::SBX_DECISION, rec.verdict.as_str()));
    a.push(KeyValue::new(t::SBX_LAYER, rec.layer.as_str()));
    a.push(KeyValue::new(t::SBX_STATUS, rec.status.as_str()));
    if !rec.rules.is_empty() {
        let ids: Vec<opentelemetry::StringValue> =
            rec.rules.iter().map(|r| r.id.clone().into()).collect();
        a.push(KeyValue::new(
            t::SBX_RULE,
            Value::Array(opentelemetry::Array::String(ids)),
        ));
    }
    if let Some(tn) = &rec.tenant_id {
        a.push(KeyValue::new(t::SBX_TENANT, tn.clone()));
    }
    if let Some(m) = rec.cost_reserved {
        a.push(KeyValue::new(t::SBX_COST_RESERVED, m.to_string()));
    }
    if let Some(m) = rec.cost_settled {
        a.push(KeyValue::new(t::SBX_COST_SETTLED, m.to_string()));
    }
    a.push(KeyValue::new(t::SBX_ATTEMPTS, i64::from(rec.attempts)));
    a.push(KeyValue::new(t::SBX_REPLAYED, rec.replayed));
    if is_error(rec) {
        let et = rec
            .error_code
            .clone()
            .unwrap_or_else(|| rec.status.as_str().to_string());
        a.push(KeyValue::new(t::ERROR_TYPE, et));
    }
    if capture_code {
        if let Some(code) = &rec.code {
            a.push(KeyValue::new(t::SBX_CODE, code.clone()));
        }
    }
    a
}

/// Emits the `execute_tool {tool}` span (kind INTERNAL) for a REDACTED record, as a child
/// of `parent`, spanning `rec.ts` .. `rec.ts + duration_ms`. Looks the tracer up now.
pub fn emit_span(rec: &OperationRecord, parent: &Context, capture_code: bool) {
    let tracer = global::tracer(INSTRUMENTATION_SCOPE);
    let start: SystemTime = rec.ts.into();
    let end = start + Duration::from_millis(rec.duration_ms);
    let mut span = tracer
        .span_builder(span_name(rec))
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .start_with_context(&tracer, parent);
    // With no provider (or a sampler that drops it) the span is non-recording: building
    // the attributes would be wasted work. Attributes are therefore set after the start,
    // so a sampler does not see them.
    if !span.is_recording() {
        return;
    }
    span.set_attributes(span_attributes(rec, capture_code));
    if is_error(rec) {
        span.set_status(Status::error(rec.reason.clone()));
    }
    span.end_with_timestamp(end);
}

/// A parent context from a W3C `traceparent` header (`00-<trace id>-<span id>-<flags>`).
/// `None` when it is malformed or carries all-zero ids.
pub fn parent_from_traceparent(traceparent: &str) -> Option<Context> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let ok_hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    if !ok_hex(version, 2)
        || version == "ff"
        || !ok_hex(trace, 32)
        || !ok_hex(span, 16)
        || !ok_hex(flags, 2)
    {
        return None;
    }
    // Version 00 has exactly four fields; later versions may append more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    Some(Context::new().with_remote_span_context(sc))
}

/// The parent context of a record: its `trace_id` and `span_id` (the caller's span, e.g. the
/// agent's `invoke_agent` span, as propagated into the request), when both are valid;
/// otherwise the current context.
pub fn parent_from_record(rec: &OperationRecord) -> Context {
    if let (Some(tr), Some(sp)) = (&rec.trace_id, &rec.span_id) {
        if let Some(cx) = parent_from_traceparent(&format!("00-{tr}-{sp}-01")) {
            return cx;
        }
    }
    Context::current()
}

/// Metrics through the global meter provider, looked up on every call (never cached), and
/// the same observations to a [`MetricsTap`] when one is installed (the server's Prometheus
/// endpoint and dashboard). Names come from `sandboxio_core::telemetry`.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    tap: Option<Arc<dyn MetricsTap>>,
}

impl Metrics {
    pub fn new() -> Self {
        Metrics { tap: None }
    }

    /// Metrics that also feed `tap`.
    pub fn with_tap(tap: Option<Arc<dyn MetricsTap>>) -> Self {
        Metrics { tap }
    }

    fn meter() -> opentelemetry::metrics::Meter {
        global::meter(INSTRUMENTATION_SCOPE)
    }

    /// Operations by kind and status, duration, denials by layer and rule, latency-budget
    /// violations and network denials, from one REDACTED record.
    pub fn record_operation(&self, rec: &OperationRecord) {
        let obs = OperationObservation::of(rec);
        self.observe(&obs);
        if let Some(tap) = &self.tap {
            tap.operation(&obs);
        }
    }

    fn observe(&self, obs: &OperationObservation) {
        let m = Self::meter();
        let event = || KeyValue::new(SBX_EVENT, obs.event.clone());
        let kind_status = [event(), KeyValue::new(t::SBX_STATUS, obs.status)];
        m.u64_counter(t::M_OPERATIONS).build().add(1, &kind_status);
        m.f64_histogram(t::M_DURATION)
            .with_unit("ms")
            .build()
            .record(obs.duration.as_millis() as f64, &kind_status);
        if let Some((layer, rule)) = &obs.denied_at {
            m.u64_counter(t::M_DENIALS).build().add(
                1,
                &[
                    KeyValue::new(t::SBX_LAYER, *layer),
                    KeyValue::new(t::SBX_RULE, rule.clone()),
                ],
            );
        }
        if obs.latency_budget_violated {
            m.u64_counter(t::M_LATENCY_VIOLATIONS)
                .build()
                .add(1, &[event()]);
        }
        if obs.network_denials > 0 {
            m.u64_counter(t::M_NETWORK_DENIALS)
                .build()
                .add(obs.network_denials, &[event()]);
        }
        if let Some(wait) = obs.approval_wait {
            m.f64_histogram(t::M_APPROVAL_WAIT)
                .with_unit("ms")
                .build()
                .record(wait.as_millis() as f64, &[event()]);
        }
        if obs.retries > 0 {
            m.u64_counter(t::M_RETRIES)
                .build()
                .add(u64::from(obs.retries), &[event()]);
        }
    }

    /// Approvals waiting for a person: +1 when one is created, -1 when it is answered or
    /// times out.
    pub fn approvals_pending(&self, delta: i64) {
        Self::meter()
            .i64_up_down_counter(t::M_APPROVALS_PENDING)
            .build()
            .add(delta, &[]);
        if let Some(tap) = &self.tap {
            tap.approvals_pending(delta);
        }
    }

    /// Spend and remaining budget of one scope (`global`, `tenant:acme`, ...). Metric values
    /// are floating point for display; the ledger itself is decimal.
    pub fn budget(&self, scope: &str, spent: &Money, remaining: Option<&Money>) {
        let m = Self::meter();
        let label = [KeyValue::new(SBX_SCOPE, scope.to_string())];
        let as_f64 = |x: &Money| x.to_string().parse::<f64>().unwrap_or(f64::NAN);
        m.f64_gauge(t::M_BUDGET_SPENT)
            .build()
            .record(as_f64(spent), &label);
        if let Some(r) = remaining {
            m.f64_gauge(t::M_BUDGET_REMAINING)
                .build()
                .record(as_f64(r), &label);
        }
        if let Some(tap) = &self.tap {
            tap.budget(scope, spent, remaining);
        }
    }

    pub fn sink_failure(&self, sink: &str, timed_out: bool) {
        Self::meter().u64_counter(t::M_SINK_FAILURES).build().add(
            1,
            &[
                KeyValue::new(SBX_SINK, sink.to_string()),
                KeyValue::new(SBX_TIMED_OUT, timed_out),
            ],
        );
        if let Some(tap) = &self.tap {
            tap.sink_failure(sink, timed_out);
        }
    }

    pub fn redactions(&self, n: u64) {
        if n > 0 {
            Self::meter()
                .u64_counter(t::M_REDACTIONS)
                .build()
                .add(n, &[]);
            if let Some(tap) = &self.tap {
                tap.redactions(n);
            }
        }
    }
}
