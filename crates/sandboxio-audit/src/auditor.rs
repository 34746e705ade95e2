//! The `Auditor`: record -> redact once -> every sink, span, metrics, meter.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandboxio_core::telemetry::ENV_AUDIT_TIMEOUT;
use sandboxio_core::{ErrorCode, HumanDuration, Meter, OperationRecord};

use crate::error::AuditError;
use crate::event::{meter_of, AuditEvent};
use crate::otel::{self, Metrics};
use crate::redact::Redactor;
use crate::redacted::RedactedRecord;
use crate::sink::{AuditSink, BlockingEmit, NoopSink};

/// Default bound on each sink's `emit` (seed: `SBX_AUDIT_TIMEOUT`, default 5 s).
pub const DEFAULT_AUDIT_TIMEOUT: Duration = Duration::from_secs(5);

/// What happens when a sink fails or times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnSinkFailure {
    /// Log a warning, count it, and let the operation proceed. The default.
    #[default]
    Warn,
    /// Fail the operation with `SBX_E1601`.
    Fail,
}

impl FromStr for OnSinkFailure {
    type Err = AuditError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "warn" => Ok(OnSinkFailure::Warn),
            "fail" => Ok(OnSinkFailure::Fail),
            other => Err(AuditError::Render {
                why: format!("unknown on_sink_failure `{other}` (expected warn or fail)"),
            }),
        }
    }
}

/// Audit configuration, per instance (never global).
#[derive(Clone)]
pub struct AuditConfig {
    pub sinks: Vec<Arc<dyn AuditSink>>,
    pub on_sink_failure: OnSinkFailure,
    /// Adds the (redacted) code to the event and the span. Off by default: code is hashed.
    pub capture_code: bool,
    /// Bound on each sink's `emit`.
    pub timeout: Duration,
    /// Emit an `execute_tool` span per record through the global tracer provider.
    pub spans: bool,
    /// Record metrics through the global meter provider.
    pub metrics: bool,
    /// Also hands every metric observation to this tap (the server's `/metrics`).
    pub metrics_tap: Option<Arc<dyn crate::tap::MetricsTap>>,
}

impl std::fmt::Debug for AuditConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.sinks.iter().map(|s| s.name()).collect();
        f.debug_struct("AuditConfig")
            .field("sinks", &names)
            .field("on_sink_failure", &self.on_sink_failure)
            .field("capture_code", &self.capture_code)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for AuditConfig {
    /// A `NoopSink`, `Warn`, no code capture, spans and metrics on, and the timeout from
    /// `SBX_AUDIT_TIMEOUT` (an invalid value is warned about and the default 5 s is used;
    /// use [`AuditConfig::from_env`] to get the error instead).
    fn default() -> Self {
        let timeout = match timeout_from_env() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(target: "sandboxio::audit", code = e.code(), "{e}; using 5s");
                DEFAULT_AUDIT_TIMEOUT
            }
        };
        AuditConfig {
            sinks: vec![Arc::new(NoopSink)],
            on_sink_failure: OnSinkFailure::Warn,
            capture_code: false,
            timeout,
            spans: true,
            metrics: true,
            metrics_tap: None,
        }
    }
}

impl AuditConfig {
    /// Like `default()`, but an invalid `SBX_AUDIT_TIMEOUT` is an error.
    pub fn from_env() -> Result<Self, AuditError> {
        let timeout = timeout_from_env()?;
        Ok(AuditConfig {
            timeout,
            ..AuditConfig::default()
        })
    }

    pub fn with_sinks(mut self, sinks: Vec<Arc<dyn AuditSink>>) -> Self {
        self.sinks = sinks;
        self
    }
    pub fn on_sink_failure(mut self, mode: OnSinkFailure) -> Self {
        self.on_sink_failure = mode;
        self
    }
    pub fn capture_code(mut self, on: bool) -> Self {
        self.capture_code = on;
        self
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn metrics_tap(mut self, tap: Option<Arc<dyn crate::tap::MetricsTap>>) -> Self {
        self.metrics_tap = tap;
        self
    }
}

/// Parses an audit timeout: `5s`, `250ms`, `1m`, or plain seconds (`5`).
pub fn parse_timeout(s: &str) -> Result<Duration, AuditError> {
    let d = HumanDuration::from_str(s.trim()).map_err(|e| AuditError::InvalidTimeout {
        input: s.to_string(),
        why: e.to_string(),
    })?;
    let d = d.as_duration();
    if d.is_zero() {
        return Err(AuditError::InvalidTimeout {
            input: s.to_string(),
            why: "must be greater than zero".into(),
        });
    }
    Ok(d)
}

/// `SBX_AUDIT_TIMEOUT`, or 5 s when unset.
pub fn timeout_from_env() -> Result<Duration, AuditError> {
    match std::env::var(ENV_AUDIT_TIMEOUT) {
        Ok(v) if !v.trim().is_empty() => parse_timeout(&v),
        _ => Ok(DEFAULT_AUDIT_TIMEOUT),
    }
}

/// One sink that failed or timed out while recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkFailure {
    pub sink: String,
    pub why: String,
    pub timed_out: bool,
}

/// What [`Auditor::record`] produced.
#[derive(Debug, Clone)]
pub struct RecordOutcome {
    /// The event every sink received.
    pub event: AuditEvent,
    /// The meter for the result.
    pub meter: Meter,
    /// Redactions applied to this record.
    pub redactions: usize,
    /// Sinks that failed (only possible in `Warn` mode: in `Fail` mode they are an error).
    pub failures: Vec<SinkFailure>,
}

/// Records operations: redacts once, renders, emits to every sink inline. One per backend
/// instance; it owns no background task.
pub struct Auditor {
    config: AuditConfig,
    redactor: Arc<Redactor>,
    metrics: Metrics,
    sink_failures: AtomicU64,
    /// Set once a check found the store behind the trail: no head is handed out to be
    /// stored from then on ([`Auditor::heads_to_anchor`]).
    heads_frozen: AtomicBool,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("config", &self.config)
            .field("redactor", &self.redactor)
            .field("sink_failures", &self.sink_failures())
            .finish()
    }
}

impl Auditor {
    pub fn new(config: AuditConfig, redactor: Arc<Redactor>) -> Self {
        Auditor {
            metrics: Metrics::with_tap(config.metrics_tap.clone()),
            config,
            redactor,
            sink_failures: AtomicU64::new(0),
            heads_frozen: AtomicBool::new(false),
        }
    }

    pub fn config(&self) -> &AuditConfig {
        &self.config
    }

    /// The metrics this auditor records (with its tap), for the chain's budget and approval
    /// observations.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Sink failures and timeouts seen so far (both modes).
    pub fn sink_failures(&self) -> u64 {
        self.sink_failures.load(Ordering::Relaxed)
    }

    /// Records one operation. The span's parent is the record's `trace_id`/`span_id` when
    /// set, else the current context.
    pub async fn record(&self, rec: OperationRecord) -> Result<RecordOutcome, AuditError> {
        let parent = otel::parent_from_record(&rec);
        self.record_with_parent(rec, &parent).await
    }

    /// Records one operation under an explicit parent context (e.g. the caller's
    /// `invoke_agent` span, or [`otel::parent_from_traceparent`]).
    ///
    /// Redacts once, renders the event, awaits each sink in order (each bounded by the
    /// timeout), then emits the span and metrics. On a sink failure or timeout: `Warn` logs a
    /// warning (`SBX_E1601`), counts it and returns `Ok` with the failure listed; `Fail`
    /// still offers the event to the remaining sinks, then returns `SinkFailed` (`SBX_E1601`)
    /// for the first failure.
    pub async fn record_with_parent(
        &self,
        rec: OperationRecord,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let (rec, redactions) = self.redactor.redact_record_counted(rec);
        self.emit_with_parent(rec, redactions, parent).await
    }

    /// [`Self::record_with_parent`] of a record its caller redacted already: not redacted
    /// again when that was this auditor's redactor, and the caller's redactions are the
    /// ones counted (see [`RedactedRecord`]).
    pub async fn record_redacted_with_parent(
        &self,
        rec: RedactedRecord,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let (rec, redactions) = rec.for_auditor(&self.redactor);
        self.emit_with_parent(rec, redactions, parent).await
    }

    async fn emit_with_parent(
        &self,
        rec: OperationRecord,
        redactions: usize,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let event = AuditEvent::from_record(&rec, self.config.capture_code);
        let mut failures = Vec::new();
        for sink in &self.config.sinks {
            let res = tokio::time::timeout(self.config.timeout, sink.emit(&event)).await;
            let res = res.map_err(|_| ());
            self.note_failure(sink.as_ref(), res, &rec, &mut failures);
        }
        self.conclude(rec, event, redactions, failures, parent)
    }

    /// Whether every sink writes on the calling thread ([`Self::record_blocking`] then
    /// needs no runtime and hands nothing to another task).
    pub fn records_blocking(&self) -> bool {
        self.config.sinks.iter().all(|s| s.has_blocking_emit())
    }

    /// [`Self::record_with_parent`] on a thread that may block and is not an async worker
    /// (a runtime's blocking pool): each sink with a blocking path (the file trail) writes
    /// on this thread, so recording costs no hand-off to a writer thread; the others are
    /// awaited here through the current runtime (without one, they are reported failed),
    /// outside their caller's task: use it when [`Self::records_blocking`] says so.
    /// Same redaction, timeout per sink, failure modes, span and metrics.
    pub fn record_blocking(
        &self,
        rec: OperationRecord,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let (rec, redactions) = self.redactor.redact_record_counted(rec);
        self.emit_blocking(rec, redactions, parent)
    }

    /// [`Self::record_blocking`] of a record its caller redacted already (see
    /// [`Self::record_redacted_with_parent`]).
    pub fn record_redacted_blocking(
        &self,
        rec: RedactedRecord,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let (rec, redactions) = rec.for_auditor(&self.redactor);
        self.emit_blocking(rec, redactions, parent)
    }

    fn emit_blocking(
        &self,
        rec: OperationRecord,
        redactions: usize,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        let event = AuditEvent::from_record(&rec, self.config.capture_code);
        let mut failures = Vec::new();
        for sink in &self.config.sinks {
            let res = match sink.emit_blocking(&event, self.config.timeout) {
                BlockingEmit::Done(r) => Ok(r),
                BlockingEmit::TimedOut => Err(()),
                BlockingEmit::Unsupported => match tokio::runtime::Handle::try_current() {
                    Ok(h) => h
                        .block_on(tokio::time::timeout(self.config.timeout, sink.emit(&event)))
                        .map_err(|_| ()),
                    Err(_) => Ok(Err(AuditError::Render {
                        why: "no async runtime to run this sink on".into(),
                    })),
                },
            };
            self.note_failure(sink.as_ref(), res, &rec, &mut failures);
        }
        self.conclude(rec, event, redactions, failures, parent)
    }

    /// Writes a record that the sinks named `sinks` could not take when it was made (see
    /// the gateway's `store::Unrecorded`) to those of them this auditor has; runs on the
    /// calling thread, which may block. Returns the names it still could not write to
    /// (those that failed again; a name this auditor has no sink by is dropped with a
    /// warning: no sink is left to take it).
    pub fn emit_late(&self, event: &AuditEvent, sinks: &[String]) -> Vec<String> {
        let mut left = Vec::new();
        for name in sinks {
            let Some(sink) = self.config.sinks.iter().find(|s| s.name() == name) else {
                tracing::warn!(target: "sandboxio::audit", sink = %name, "a record kept for sink `{name}` is dropped: no such sink is configured any more");
                continue;
            };
            let res = match sink.emit_blocking(event, self.config.timeout) {
                BlockingEmit::Done(r) => r.map_err(|e| e.to_string()),
                BlockingEmit::TimedOut => Err(format!("timed out after {:?}", self.config.timeout)),
                BlockingEmit::Unsupported => match tokio::runtime::Handle::try_current() {
                    Ok(h) => h
                        .block_on(tokio::time::timeout(self.config.timeout, sink.emit(event)))
                        .map_err(|_| "timed out".to_string())
                        .and_then(|r| r.map_err(|e| e.to_string())),
                    Err(_) => Err("no async runtime to run this sink on".into()),
                },
            };
            if let Err(why) = res {
                self.sink_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "sandboxio::audit", code = "SBX_E1601", sink = %name, "a record kept since its sink failed could not be written yet: {}", self.redactor.redact_str(&why));
                left.push(name.clone());
            }
        }
        left
    }

    /// Counts, reports and keeps one sink's failure (`Err(())`: timed out).
    fn note_failure(
        &self,
        sink: &dyn AuditSink,
        res: Result<Result<(), AuditError>, ()>,
        rec: &OperationRecord,
        failures: &mut Vec<SinkFailure>,
    ) {
        let f = match res {
            Ok(Ok(())) => return,
            Ok(Err(e)) => SinkFailure {
                sink: sink.name().to_string(),
                why: self.redactor.redact_str(&e.to_string()).into_owned(),
                timed_out: false,
            },
            Err(()) => SinkFailure {
                sink: sink.name().to_string(),
                why: format!("timed out after {:?}", self.config.timeout),
                timed_out: true,
            },
        };
        self.sink_failures.fetch_add(1, Ordering::Relaxed);
        if self.config.metrics {
            self.metrics.sink_failure(&f.sink, f.timed_out);
        }
        tracing::warn!(
            target: "sandboxio::audit",
            code = "SBX_E1601",
            sink = %f.sink,
            timed_out = f.timed_out,
            operation_id = %rec.operation_id,
            mode = ?self.config.on_sink_failure,
            "audit sink failed: {}",
            f.why
        );
        failures.push(f);
    }

    /// After every sink: the span, the metrics, and the answer per the failure mode.
    fn conclude(
        &self,
        rec: OperationRecord,
        event: AuditEvent,
        redactions: usize,
        mut failures: Vec<SinkFailure>,
        parent: &opentelemetry::Context,
    ) -> Result<RecordOutcome, AuditError> {
        if self.config.spans {
            otel::emit_span(&rec, parent, self.config.capture_code);
        }
        if self.config.metrics {
            self.metrics.record_operation(&rec);
            self.metrics.redactions(redactions as u64);
        }
        if self.config.on_sink_failure == OnSinkFailure::Fail {
            if let Some(f) = failures.into_iter().next() {
                return Err(AuditError::SinkFailed {
                    sink: f.sink,
                    why: f.why,
                    timed_out: f.timed_out,
                });
            }
            failures = Vec::new();
        }
        tracing::debug!(target: "sandboxio::audit", operation_id = %rec.operation_id, redactions, "audit record emitted");
        Ok(RecordOutcome {
            meter: meter_of(&rec),
            event,
            redactions,
            failures,
        })
    }

    /// The signed heads of the sinks that keep one (one per file trail), to be stored
    /// outside the trail after each record.
    pub fn heads(&self) -> Vec<crate::head::SignedHead> {
        self.config.sinks.iter().filter_map(|s| s.head()).collect()
    }

    /// The heads to store outside the trail now: [`Auditor::heads`], or none once
    /// [`Auditor::freeze_heads`] was called.
    pub fn heads_to_anchor(&self) -> Vec<crate::head::SignedHead> {
        if self.heads_frozen.load(Ordering::SeqCst) {
            return Vec::new();
        }
        self.heads()
    }

    /// Stops handing out heads to store (the store was found to lack work the trail
    /// records: a new head would hide the loss from the next start's check).
    pub fn freeze_heads(&self) {
        self.heads_frozen.store(true, Ordering::SeqCst);
    }

    /// Closes every sink (the file sink writes its closing checkpoint). Returns the first error.
    pub async fn close(&self) -> Result<(), AuditError> {
        let mut first = None;
        for sink in &self.config.sinks {
            if let Err(e) = sink.close().await {
                tracing::warn!(target: "sandboxio::audit", sink = %sink.name(), "closing audit sink failed: {e}");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
