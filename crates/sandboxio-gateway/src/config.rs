//! Gateway settings: budgets, rate limits, approvals, idempotency, retries.

use std::collections::BTreeMap;
use std::time::Duration;

use rust_decimal::Decimal;
use sandboxio_core::{IsolationTier, Money, OperationKind};

/// Prices used to turn measured usage into money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateCard {
    pub cpu_second: Money,
    pub gib_second: Money,
    pub per_call: Money,
}

impl Default for RateCard {
    fn default() -> Self {
        RateCard {
            // Roughly an on-demand vCPU and GiB of memory; configure your own.
            cpu_second: Money::from_decimal(Decimal::new(12, 6)),
            gib_second: Money::from_decimal(Decimal::new(2, 6)),
            per_call: Money::ZERO,
        }
    }
}

/// Budget ceilings by scope. Absent ceilings are unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetSettings {
    pub global: Option<Money>,
    /// Ceiling applied to every tenant, unless `tenants` names one.
    pub per_tenant: Option<Money>,
    pub tenants: BTreeMap<String, Money>,
    pub per_session: Option<Money>,
    pub warn_fraction: Decimal,
    pub rate_card: RateCard,
}

impl Default for BudgetSettings {
    fn default() -> Self {
        BudgetSettings {
            global: None,
            per_tenant: None,
            tenants: BTreeMap::new(),
            per_session: None,
            warn_fraction: Decimal::new(8, 1),
            rate_card: RateCard::default(),
        }
    }
}

/// One rate limit: at most `limit` operations of `kind` per `window`, per (tenant, agent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateRule {
    /// `None` applies to every kind.
    pub kind: Option<OperationKind>,
    pub limit: u32,
    pub window: Duration,
}

/// Retry policy: at the gateway only, for transient errors of idempotent or keyed operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Token bucket: retries cost one token; each first attempt adds `refill_per_request`.
    pub budget_capacity: u32,
    /// In thousandths of a token per first attempt (100 = one retry per ten requests).
    pub refill_per_request_millis: u32,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 3,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(2),
            budget_capacity: 10,
            refill_per_request_millis: 100,
        }
    }
}

/// p50/p95/p99 targets for one class of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyTarget {
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    pub default_tier: IsolationTier,
    pub budget: BudgetSettings,
    pub rate_limits: Vec<RateRule>,
    /// How long an `ask` waits for a person before it becomes a deny.
    pub approval_timeout: Duration,
    pub idempotency_retention: Duration,
    pub retry: RetrySettings,
    /// Latency targets for sandboxed execution.
    pub execution_latency: LatencyTarget,
    /// Latency targets for interactive operations (file reads, status).
    pub interactive_latency: LatencyTarget,
    /// How often a running operation re-reads the persisted kill switch.
    pub kill_poll: Duration,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            default_tier: IsolationTier::Namespace,
            budget: BudgetSettings::default(),
            rate_limits: Vec::new(),
            approval_timeout: Duration::from_secs(300),
            idempotency_retention: Duration::from_secs(24 * 3600),
            retry: RetrySettings::default(),
            execution_latency: LatencyTarget {
                p50: Duration::from_secs(300),
                p95: Duration::from_secs(900),
                p99: Duration::from_secs(1800),
            },
            interactive_latency: LatencyTarget {
                p50: Duration::from_millis(100),
                p95: Duration::from_millis(300),
                p99: Duration::from_millis(500),
            },
            kill_poll: Duration::from_millis(200),
        }
    }
}
