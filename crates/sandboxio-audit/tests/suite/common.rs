//! Test helpers: collecting, failing and hanging sinks; a captured tracing writer; the
//! global in-memory span exporter.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use sandboxio_audit::{AuditError, AuditEvent, AuditSink};
use sandboxio_core::{IsolationTier, OperationRecord, OperationStatus, Verdict};

#[derive(Default)]
pub struct CollectSink {
    pub lines: Mutex<Vec<String>>,
}

impl CollectSink {
    pub fn all(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

#[async_trait]
impl AuditSink for CollectSink {
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.lines.lock().unwrap().push(event.as_json()?);
        Ok(())
    }
    fn name(&self) -> &str {
        "collect"
    }
}

pub struct FailingSink;

#[async_trait]
impl AuditSink for FailingSink {
    async fn emit(&self, _event: &AuditEvent) -> Result<(), AuditError> {
        Err(AuditError::SinkClosed {
            sink: "failing".into(),
        })
    }
    fn name(&self) -> &str {
        "failing"
    }
}

pub struct HangingSink;

#[async_trait]
impl AuditSink for HangingSink {
    async fn emit(&self, _event: &AuditEvent) -> Result<(), AuditError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
    fn name(&self) -> &str {
        "hanging"
    }
}

/// A `MakeWriter` that appends everything to a shared buffer.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Installs a thread-local subscriber writing everything (TRACE and up) to a buffer.
pub fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let cap = Captured::default();
    let sub = tracing_subscriber::fmt()
        .with_writer(cap.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(sub);
    (cap, guard)
}

/// The process-wide in-memory span exporter (installed once as the global provider).
pub fn span_exporter() -> InMemorySpanExporter {
    static EXP: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXP.get_or_init(|| {
        let exp = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exp.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider);
        exp
    })
    .clone()
}

/// A completed exec record.
pub fn exec_record(id: &str) -> OperationRecord {
    let mut r = OperationRecord::new(id, "exec");
    r.backend = "local".into();
    r.isolation = Some(IsolationTier::Namespace);
    r.sandbox_id = Some(format!("sbx-{id}"));
    r.tenant_id = Some("acme".into());
    r.argv = Some(vec!["python3".into(), "-c".into(), "print(1)".into()]);
    r.exit_code = Some(0);
    r.duration_ms = 12;
    r.bytes_in = 10;
    r.bytes_out = 20;
    r.status = OperationStatus::Ok;
    r.verdict = Verdict::Allow;
    r.layer = sandboxio_core::Layer::Record;
    r
}
