//! What the server observes of the chain, for `/metrics` and the dashboard.
//!
//! [`Telemetry`] is the gateway's [`MetricsTap`]: the chain's `Metrics` hands it the same
//! observations it records through OpenTelemetry (derived once from each redacted record),
//! so the Prometheus series, the dashboard and the OTLP export count the same operations
//! once each. State (kill switch, approvals, budgets, sandboxes) is read from the store
//! and the server when scraped, not counted.

pub mod families;
pub mod recent;
pub mod route;

use std::sync::Mutex;

use prometheus_client::metrics::histogram::Histogram;
use sandboxio_core::Money;
use sandboxio_gateway::{MetricsTap, OperationObservation};

pub use families::Families;
pub use recent::Recent;
pub use route::routes;

/// The Prometheus series and the dashboard's recent past.
#[derive(Default)]
pub struct Telemetry {
    pub families: Families,
    pub recent: Mutex<Recent>,
    /// One scrape at a time refreshes the state gauges and encodes.
    pub scrape: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<Telemetry>")
    }
}

fn observe_ms(h: &Histogram, d: std::time::Duration) {
    h.observe(d.as_secs_f64() * 1000.0);
}

impl Telemetry {
    pub fn new() -> Telemetry {
        Telemetry::default()
    }
}

impl MetricsTap for Telemetry {
    fn operation(&self, o: &OperationObservation) {
        let f = &self.families;
        let kind_status = families::KindStatus {
            sandboxio_event: o.event.clone(),
            sandboxio_status: o.status.to_string(),
        };
        let kind = || families::Kind {
            sandboxio_event: o.event.clone(),
        };
        f.operations.get_or_create(&kind_status).inc();
        observe_ms(&f.duration.get_or_create(&kind_status), o.duration);
        if let Some((layer, rule)) = &o.denied_at {
            f.denials
                .get_or_create(&families::LayerRule {
                    sandboxio_layer: (*layer).to_string(),
                    sandboxio_rule: rule.clone(),
                })
                .inc();
        }
        if o.latency_budget_violated {
            f.latency_violations.get_or_create(&kind()).inc();
        }
        if o.network_denials > 0 {
            f.network_denials
                .get_or_create(&kind())
                .inc_by(o.network_denials);
        }
        if let Some(w) = o.approval_wait {
            observe_ms(&f.approval_wait.get_or_create(&kind()), w);
        }
        if o.retries > 0 {
            f.retries
                .get_or_create(&kind())
                .inc_by(u64::from(o.retries));
        }
        if let Ok(mut r) = self.recent.lock() {
            r.observe(o);
        }
    }

    // Pending approvals and budgets are state: they are read from the store when scraped
    // (across every process sharing it), so the deltas and samples the chain reports here
    // are not counted a second time.
    fn approvals_pending(&self, _delta: i64) {}
    fn budget(&self, _scope: &str, _spent: &Money, _remaining: Option<&Money>) {}

    fn sink_failure(&self, sink: &str, timed_out: bool) {
        self.families
            .sink_failures
            .get_or_create(&families::SinkLabels {
                sandboxio_audit_sink: sink.to_string(),
                sandboxio_timed_out: timed_out.to_string(),
            })
            .inc();
    }

    fn redactions(&self, n: u64) {
        self.families.redactions.inc_by(n);
    }
}
