//! A second reader of the same metric observations the OpenTelemetry instruments get.
//!
//! [`crate::Metrics`] derives each observation once (from the redacted record, or from the
//! chain's budget and approval events) and hands it to the OpenTelemetry meter and, when one
//! is installed, to a [`MetricsTap`]: the server's Prometheus endpoint and dashboard are
//! fed from here, so the two views count the same things once each.

use std::time::Duration;

use sandboxio_core::{Money, OperationRecord, Verdict};

/// What one operation contributes to the metrics. Every field is low-cardinality except
/// `tenant`, which a tap may use for per-tenant views but must not export as a label of
/// per-operation series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationObservation {
    /// The operation kind (`exec`, `run_code`, `file_read`, `admin`, ...).
    pub event: String,
    /// `ok`, `failed`, `timeout`, `denied`, ...
    pub status: &'static str,
    pub duration: Duration,
    pub tenant: Option<String>,
    /// For a denial: the layer that stopped it and the first rule that decided.
    pub denied_at: Option<(&'static str, String)>,
    /// The reason in words (already redacted), for the dashboard's list of denials.
    pub reason: String,
    pub latency_budget_violated: bool,
    pub network_denials: u64,
    pub approval_wait: Option<Duration>,
    pub retries: u32,
    pub at: chrono::DateTime<chrono::Utc>,
}

impl OperationObservation {
    /// The observation of one REDACTED record.
    pub fn of(rec: &OperationRecord) -> Self {
        let denied_at = (rec.verdict == Verdict::Deny).then(|| {
            (
                rec.layer.as_str(),
                rec.rules.first().map(|r| r.id.clone()).unwrap_or_default(),
            )
        });
        OperationObservation {
            event: rec.event.clone(),
            status: rec.status.as_str(),
            duration: Duration::from_millis(rec.duration_ms),
            tenant: rec.tenant_id.clone(),
            denied_at,
            reason: rec.reason.clone(),
            latency_budget_violated: rec.latency_budget_violated,
            network_denials: rec.network_denials,
            approval_wait: rec.approval_wait_ms.map(Duration::from_millis),
            retries: rec.attempts.saturating_sub(1),
            at: rec.ts,
        }
    }
}

/// Receives every observation [`crate::Metrics`] makes, besides the OpenTelemetry meter.
/// Implementations must be cheap and never block: they run inline on the record path.
pub trait MetricsTap: Send + Sync + std::fmt::Debug {
    fn operation(&self, obs: &OperationObservation);
    /// Approvals waiting for a person in this process: +1 created, -1 answered or expired.
    fn approvals_pending(&self, _delta: i64) {}
    /// Spent and remaining of one budget scope (`global`, `tenant:acme`, `session:...`).
    fn budget(&self, _scope: &str, _spent: &Money, _remaining: Option<&Money>) {}
    fn sink_failure(&self, _sink: &str, _timed_out: bool) {}
    fn redactions(&self, _n: u64) {}
}
