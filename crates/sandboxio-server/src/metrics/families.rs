//! The Prometheus series of `/metrics`, registered with `prometheus-client`.
//!
//! Names follow the OpenTelemetry-to-Prometheus translation of the instruments in
//! `sandboxio_core::telemetry` (dots become underscores, the unit is a suffix, counters end
//! in `_total`), so `sandboxio.operations` is `sandboxio_operations_total` and
//! `sandboxio.operation.duration` (ms) is `sandboxio_operation_duration_milliseconds`.
//! Labels are low-cardinality only: the operation kind, its status, the deciding layer and
//! rule, the audit sink, the budget scope down to a tenant. Never an argv, a path, an
//! operation, sandbox or session id.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Bucket bounds of the duration histograms, in milliseconds: from an interactive call
/// (5 ms) up to the execution class's p99 target (30 min).
pub const DURATION_BUCKETS_MS: [f64; 17] = [
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    900_000.0,
    1_800_000.0,
    3_600_000.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindStatus {
    pub sandboxio_event: String,
    pub sandboxio_status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub sandboxio_event: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerRule {
    pub sandboxio_layer: String,
    pub sandboxio_rule: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sandboxio_audit_sink: String,
    pub sandboxio_timed_out: String,
}

/// A budget scope: `global` or `tenant:<id>`, with the tenant alone for joins.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub sandboxio_budget_scope: String,
    pub sandboxio_tenant: String,
    pub currency: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_MS)
}

/// Every series, registered once in `registry`.
pub struct Families {
    pub registry: Registry,
    pub operations: Family<KindStatus, Counter>,
    pub duration: HistogramFamily<KindStatus>,
    pub denials: Family<LayerRule, Counter>,
    pub latency_violations: Family<Kind, Counter>,
    pub network_denials: Family<Kind, Counter>,
    pub retries: Family<Kind, Counter>,
    pub approval_wait: HistogramFamily<Kind>,
    pub sink_failures: Family<SinkLabels, Counter>,
    pub redactions: Counter,
    // State, refreshed from the store and the server at each scrape.
    pub approvals_pending: Gauge,
    pub kill_switch: Gauge,
    pub sandboxes_active: Gauge,
    pub operations_running: Gauge,
    pub budget_spent: Family<ScopeLabels, FloatGauge>,
    pub budget_reserved: Family<ScopeLabels, FloatGauge>,
    pub budget_ceiling: Family<ScopeLabels, FloatGauge>,
    pub budget_remaining: Family<ScopeLabels, FloatGauge>,
}

impl Default for Families {
    fn default() -> Self {
        Families::new()
    }
}

impl Families {
    pub fn new() -> Families {
        let mut r = Registry::default();
        let ms = || Unit::Other("milliseconds".into());
        let f = Families {
            operations: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            denials: Family::default(),
            latency_violations: Family::default(),
            network_denials: Family::default(),
            retries: Family::default(),
            approval_wait: Family::new_with_constructor(duration_histogram),
            sink_failures: Family::default(),
            redactions: Counter::default(),
            approvals_pending: Gauge::default(),
            kill_switch: Gauge::default(),
            sandboxes_active: Gauge::default(),
            operations_running: Gauge::default(),
            budget_spent: Family::default(),
            budget_reserved: Family::default(),
            budget_ceiling: Family::default(),
            budget_remaining: Family::default(),
            registry: Registry::default(),
        };
        r.register(
            "sandboxio_operations",
            "Operations recorded, by kind and status",
            f.operations.clone(),
        );
        r.register_with_unit(
            "sandboxio_operation_duration",
            "Duration of operations, by kind and status",
            ms(),
            f.duration.clone(),
        );
        r.register(
            "sandboxio_denials",
            "Denied operations, by the layer that stopped them and the first deciding rule",
            f.denials.clone(),
        );
        r.register(
            "sandboxio_latency_budget_violations",
            "Operations over their latency class's p99 target, by kind",
            f.latency_violations.clone(),
        );
        r.register(
            "sandboxio_network_denials",
            "Network connections refused inside sandboxes, by operation kind",
            f.network_denials.clone(),
        );
        r.register(
            "sandboxio_retries",
            "Retried attempts, by operation kind",
            f.retries.clone(),
        );
        r.register_with_unit(
            "sandboxio_approvals_wait",
            "Time operations waited for a person's decision, by kind",
            ms(),
            f.approval_wait.clone(),
        );
        r.register(
            "sandboxio_audit_sink_failures",
            "Audit sink failures and timeouts, by sink",
            f.sink_failures.clone(),
        );
        r.register(
            "sandboxio_redactions",
            "Secret values replaced in records",
            f.redactions.clone(),
        );
        r.register(
            "sandboxio_approvals_pending",
            "Approvals waiting for a person (all tenants)",
            f.approvals_pending.clone(),
        );
        r.register(
            "sandboxio_kill_switch_engaged",
            "1 while the kill switch is engaged",
            f.kill_switch.clone(),
        );
        r.register(
            "sandboxio_sandboxes_active",
            "Sandboxes (sessions) open in this server",
            f.sandboxes_active.clone(),
        );
        r.register(
            "sandboxio_operations_running",
            "Operations running or waiting for an approval in this server",
            f.operations_running.clone(),
        );
        r.register(
            "sandboxio_budget_spent",
            "Settled spend of a budget scope (global or tenant)",
            f.budget_spent.clone(),
        );
        r.register(
            "sandboxio_budget_reserved",
            "Open reservations of a budget scope",
            f.budget_reserved.clone(),
        );
        r.register(
            "sandboxio_budget_ceiling",
            "Ceiling of a budget scope, when it has one",
            f.budget_ceiling.clone(),
        );
        r.register(
            "sandboxio_budget_remaining",
            "Ceiling minus spend and reservations, when the scope has a ceiling",
            f.budget_remaining.clone(),
        );
        Families { registry: r, ..f }
    }
}
