//! sandboxio budgets: the cost ledger (reserve, settle, release, summary), latency budgets
//! and rate limits.
//!
//! Pure: no I/O, no async, time injected by the caller. State is plain serde values so the
//! gateway can keep it in its store and apply these transitions inside a transaction.
//! Money arithmetic is checked everywhere; overflow denies. See README.md for invariants.

#![forbid(unsafe_code)]

mod clock;
mod config;
mod error;
pub mod keypart;
mod latency;
mod ledger;
mod ratecard;
mod ratelimit;
mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{BudgetConfig, CeilingRule, ScopeKind, DEFAULT_CURRENCY, DEFAULT_WARN_FRACTION};
pub use error::BudgetError;
pub use latency::{
    LatencyClass, LatencyConfig, LatencyReport, LatencyTargets, LatencyTracker, LatencyViolation,
    LATENCY_WINDOW,
};
pub use ledger::{
    BudgetDenial, BudgetGuard, BudgetState, Reservation, ReserveRequest, ScopeKey, ScopeState,
    Settlement, Summary, WarningCrossed,
};
pub use ratecard::{MeasuredUsage, RateCard, CHARGE_DECIMAL_PLACES};
pub use ratelimit::{
    RateDecision, RateLimit, RateLimitRule, RateLimitsConfig, RatePer, SlidingLog, MAX_RATE_COUNT,
};
pub use window::Window;
