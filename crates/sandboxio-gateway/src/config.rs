//! Gateway settings: budgets, rate limits, approvals, idempotency, retries.

use std::time::Duration;

use sandboxio_budget::{BudgetConfig, RateLimitsConfig};
use sandboxio_core::{IsolationTier, Limits};

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

/// How long finished journal rows are kept: a week.
pub const DEFAULT_JOURNAL_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    pub default_tier: IsolationTier,
    /// Limits a request gets where it sets none (zero means unset, never unlimited).
    pub limits_default: Limits,
    /// Ceilings no request may exceed (`[limits.max]`); a request above one is denied.
    pub limits_max: Limits,
    /// Ceilings, warn fraction, rate card, default estimate and latency targets.
    pub budget: BudgetConfig,
    pub rate_limits: RateLimitsConfig,
    /// How long an `ask` waits for a person before it becomes a deny.
    pub approval_timeout: Duration,
    pub idempotency_retention: Duration,
    /// Finished journal rows and decided approvals older than this are deleted (at start,
    /// by [`crate::Gateway::recover`]); expired idempotency keys go at the same time.
    pub journal_retention: Duration,
    pub retry: RetrySettings,
    /// How often a running operation re-reads the persisted kill switch.
    pub kill_poll: Duration,
    /// Host paths no mount may reach, from either side (the state directory: database,
    /// trail and signing key; the policy files). Absolute, symlinks resolved.
    pub protected_paths: Vec<std::path::PathBuf>,
    /// Files that decide how later runs are governed (the configuration file in use, and
    /// where a front end looks for one by default): no writable mount or output directory
    /// may hold one that exists. Absolute, symlinks of their directories resolved.
    pub write_protected: Vec<std::path::PathBuf>,
    /// `[network]` compiled: egress rules, SSRF exceptions, the proxy's name servers.
    pub egress: sandboxio_egress::EgressConfig,
    /// `[[secrets]]` checked (values are loaded by the runtime, see `crate::edge`).
    pub secrets: Vec<sandboxio_egress::edge::SecretSpec>,
    /// `[network] upstream_ca`: extra CAs for upstreams a secret is injected for.
    pub upstream_ca: Option<std::path::PathBuf>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            default_tier: IsolationTier::Namespace,
            limits_default: Limits::default(),
            limits_max: Limits::max(),
            budget: BudgetConfig::default(),
            rate_limits: RateLimitsConfig::default(),
            approval_timeout: Duration::from_secs(300),
            idempotency_retention: Duration::from_secs(24 * 3600),
            journal_retention: DEFAULT_JOURNAL_RETENTION,
            retry: RetrySettings::default(),
            kill_poll: Duration::from_millis(200),
            protected_paths: Vec::new(),
            write_protected: Vec::new(),
            egress: sandboxio_egress::EgressConfig::default(),
            secrets: Vec::new(),
            upstream_ca: None,
        }
    }
}
