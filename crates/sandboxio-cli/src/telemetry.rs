//! The binary's telemetry: the only place that installs a `tracing` subscriber or an
//! OpenTelemetry provider. The library crates log through `tracing` and open spans through
//! the OpenTelemetry API; without this module both go nowhere.
//!
//! **Logs**: one JSON object per line on standard error, each carrying the fields of the
//! spans it happened in (the gateway's `operation` span has `operation_id` and, when the
//! caller sent a `traceparent`, `trace_id`). Level WARN; `SBX_DEBUG=1` (or `[telemetry]
//! debug = true` in the config) raises the `sandboxio*` targets to DEBUG. Nothing else
//! changes verbosity: `RUST_LOG` is not read. Every line passes through a [`Redactor`]
//! (the run's `--secret-env` values, their encoded forms, and credential-shaped values of
//! this process's environment) before it is written, on top of the redaction the gateway
//! already applies to the record.
//!
//! **OpenTelemetry**: OTLP over HTTP (protobuf) configured from the standard variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (base URL; `/v1/traces` and `/v1/metrics` are appended),
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (full URLs),
//! `OTEL_EXPORTER_OTLP_{,TRACES_,METRICS_}HEADERS` / `_TIMEOUT`, `OTEL_SERVICE_NAME`
//! (default `sandboxio`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER{,_ARG}`,
//! `OTEL_BSP_*`, `OTEL_TRACES_EXPORTER=none`, `OTEL_METRICS_EXPORTER=none` and
//! `OTEL_SDK_DISABLED=true`. With no endpoint variable set no provider is installed (spans
//! stay non-recording, metrics are no-ops). Only `http://` endpoints are supported (no TLS
//! client is compiled in: point it at a local collector). [`Telemetry::shutdown`] flushes
//! and stops the providers; `main` calls it before `std::process::exit`.

use std::io::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use sandboxio_core::telemetry::ENV_DEBUG;
use sandboxio_gateway::layers::audit::{Redactor, Secret};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "sandboxio";
/// The longest `shutdown` waits for each provider to flush.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `SBX_DEBUG` asks for debug logs (`1`, `true`, `yes`, `on`; case-insensitive).
pub fn debug_from_env() -> bool {
    std::env::var(ENV_DEBUG).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The installed providers, to flush and stop before the process exits.
#[must_use = "call shutdown() before exiting, or buffered spans are lost"]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<Telemetry traces={} metrics={}>",
            self.tracer.is_some(),
            self.meter.is_some()
        )
    }
}

impl Telemetry {
    /// Installs the log subscriber and, when configured, the OTLP providers. Call once, from
    /// `main`, before the async runtime starts (the exporters run on their own threads).
    /// `secrets` are redacted from every log line.
    pub fn init(debug: bool, secrets: Vec<Secret>) -> Telemetry {
        install_subscriber(debug, secrets);
        Telemetry::otlp_from_env()
    }

    /// Providers from the `OTEL_*` variables (none when no endpoint is set).
    fn otlp_from_env() -> Telemetry {
        let none = Telemetry {
            tracer: None,
            meter: None,
        };
        if env_true("OTEL_SDK_DISABLED") {
            return none;
        }
        warn_unsupported_protocol();
        let resource = resource();
        let tracer = if signal_configured("TRACES") {
            match tracer_provider(resource.clone()) {
                Ok(p) => {
                    opentelemetry::global::set_tracer_provider(p.clone());
                    Some(p)
                }
                Err(e) => {
                    tracing::warn!(
                        target: "sandboxio::telemetry",
                        "OTLP trace export disabled: {e}"
                    );
                    None
                }
            }
        } else {
            None
        };
        let meter = if signal_configured("METRICS") {
            match meter_provider(resource) {
                Ok(p) => {
                    opentelemetry::global::set_meter_provider(p.clone());
                    Some(p)
                }
                Err(e) => {
                    tracing::warn!(
                        target: "sandboxio::telemetry",
                        "OTLP metric export disabled: {e}"
                    );
                    None
                }
            }
        } else {
            None
        };
        Telemetry { tracer, meter }
    }

    /// Whether a tracer provider was installed.
    #[allow(dead_code)]
    pub fn traces_enabled(&self) -> bool {
        self.tracer.is_some()
    }

    /// Exports what is buffered and stops the providers (each bounded by
    /// [`SHUTDOWN_TIMEOUT`]). Call outside the async runtime, before exiting.
    pub fn shutdown(self) {
        if let Some(p) = self.tracer {
            if let Err(e) = p.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                tracing::warn!(target: "sandboxio::telemetry", "flushing spans failed: {e}");
            }
        }
        if let Some(p) = self.meter {
            if let Err(e) = p.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                tracing::warn!(target: "sandboxio::telemetry", "flushing metrics failed: {e}");
            }
        }
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_true(name: &str) -> bool {
    env_nonempty(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `TRACES` or `METRICS`: an endpoint is set (generic or per signal) and the signal's
/// `OTEL_*_EXPORTER` is not `none`.
fn signal_configured(signal: &str) -> bool {
    let exporter_var = format!("OTEL_{signal}_EXPORTER");
    if env_nonempty(&exporter_var)
        .is_some_and(|v| v.split(',').all(|e| e.trim().eq_ignore_ascii_case("none")))
    {
        return false;
    }
    env_nonempty("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || env_nonempty(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some()
}

fn warn_unsupported_protocol() {
    for var in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        if let Some(p) = env_nonempty(var) {
            if !p.trim().eq_ignore_ascii_case("http/protobuf") {
                tracing::warn!(
                    target: "sandboxio::telemetry",
                    variable = var,
                    "only OTLP over http/protobuf is supported; exporting with http/protobuf"
                );
            }
        }
    }
}

fn resource() -> Resource {
    let named = env_nonempty("OTEL_SERVICE_NAME").is_some()
        || env_nonempty("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
            a.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let b = Resource::builder();
    if named {
        b.build()
    } else {
        b.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

fn tracer_provider(resource: Resource) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(|e| e.to_string())?;
    // The batch processor exports from its own thread (the blocking HTTP client must not run
    // on the async runtime); `shutdown` flushes it.
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

fn meter_provider(resource: Resource) -> Result<SdkMeterProvider, String> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(|e| e.to_string())?;
    // A periodic reader on its own thread (OTEL_METRIC_EXPORT_INTERVAL, default 60 s); a
    // short-lived CLI run exports once, at shutdown.
    Ok(SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource)
        .build())
}

// ---- logs ----

/// Secrets to redact from log lines (set once by `init`).
static LOG_SECRETS: OnceLock<Vec<Secret>> = OnceLock::new();
/// Built on the first log line, so a run that logs nothing pays nothing.
static LOG_REDACTOR: OnceLock<Option<Redactor>> = OnceLock::new();

fn log_redactor() -> Option<&'static Redactor> {
    LOG_REDACTOR
        .get_or_init(|| {
            let (env, _) = crate::hostenv::utf8_vars();
            Redactor::builder()
                .env(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .secrets(LOG_SECRETS.get().into_iter().flatten())
                .build()
                .ok()
        })
        .as_ref()
}

/// Redacts text the binary itself writes (log lines, error messages) with the same
/// redactor as the logs. When the redactor cannot be built, nothing of the text is kept.
pub fn redact(text: &str) -> String {
    match log_redactor() {
        Some(r) => r.redact_str(text).into_owned(),
        None => "[REDACTED: redactor unavailable]".to_string(),
    }
}

/// One log line, buffered, redacted and written to stderr in one `write` when dropped.
#[derive(Default)]
struct LogLine {
    buf: Vec<u8>,
}

impl std::io::Write for LogLine {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        // A JSON line; DEL and C1 controls in its strings are written as `\u` escapes.
        let mut out = match log_redactor() {
            Some(r) => crate::out::json_safe(r.redact_str(&text).into_owned()),
            None => {
                "{\"level\":\"ERROR\",\"fields\":{\"message\":\"log line suppressed: the redactor could not be built\"}}".to_string()
            }
        };
        if !out.ends_with('\n') {
            out.push('\n');
        }
        let _ = std::io::stderr().lock().write_all(out.as_bytes());
    }
}

/// JSON lines on stderr; WARN, or DEBUG for `sandboxio*` targets when `debug`.
fn install_subscriber(debug: bool, secrets: Vec<Secret>) {
    let _ = LOG_SECRETS.set(secrets);
    let filter = if debug {
        Targets::new()
            .with_default(LevelFilter::WARN)
            .with_target("sandboxio", LevelFilter::DEBUG)
    } else {
        Targets::new().with_default(LevelFilter::WARN)
    };
    let fmt = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_target(true)
        .with_writer(LogLine::default);
    // `try_init`: never panic if something (a test harness) installed one already.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
}
