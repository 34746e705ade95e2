//! The state behind the gateway: one interface, durable implementations.
//!
//! Everything the chain decides on that must survive a restart or be shared by several
//! processes lives here: the kill switch, rate-limit events, the budget ledger and its
//! reservations, approvals, idempotency records and the journal. Every method is one
//! transaction; a method that changes state has made it durable when it returns.

mod sqlite;

pub use sqlite::{SqliteStore, SyncMode};

use chrono::{DateTime, Utc};
use sandboxio_core::{CostCategory, Money};
use serde::{Deserialize, Serialize};

use crate::error::GatewayError;

pub type StoreResult<T> = Result<T, GatewayError>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillState {
    pub reason: String,
    pub by: String,
    pub at: DateTime<Utc>,
}

/// A budget scope and its ceiling, e.g. (`tenant:acme`, 10.00).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeCeiling {
    pub scope: String,
    pub ceiling: Money,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved,
    /// The scope that would pass its ceiling, with the numbers.
    Denied {
        scope: String,
        spent: Money,
        reserved: Money,
        ceiling: Money,
        amount: Money,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SettleOutcome {
    pub charged: Money,
    pub released: Money,
    /// Scopes whose spend crossed the warn fraction with this settle (once per crossing).
    pub warn_crossed: Vec<(String, Money, Money)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeSummary {
    pub scope: String,
    pub ceiling: Option<Money>,
    pub spent: Money,
    pub reserved: Money,
    pub by_category: Vec<(CostCategory, Money)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    Expired,
    Used,
}

impl ApprovalState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Used => "used",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalState::Pending,
            "approved" => ApprovalState::Approved,
            "denied" => ApprovalState::Denied,
            "expired" => ApprovalState::Expired,
            "used" => ApprovalState::Used,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub tenant: String,
    pub fingerprint: String,
    /// The operation, as JSON (redacted before it is stored).
    pub operation: String,
    pub rationale: String,
    pub reason: String,
    pub state: ApprovalState,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemBegin {
    /// First use of the key: the caller runs the operation.
    New,
    /// Same key, same request, finished: the recorded outcome (JSON).
    Replay {
        outcome: String,
        operation_id: String,
    },
    /// Same key, different request.
    Conflict,
    /// Same key, still running.
    InProgress,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub operation_id: String,
    pub intent: String,
    pub started_at: DateTime<Utc>,
    /// `pid:start_time` of the process that wrote the intent (pid reuse safe).
    pub owner: String,
    pub idempotent: bool,
    /// (tenant, key) when the operation carries an idempotency key. The intent is written
    /// before the key is claimed, so recovery settles the key only when its row names this
    /// operation (a replayed or refused request never touches another's key).
    pub idem: Option<(String, String)>,
}

/// A ledger line for cost reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    pub operation_id: String,
    pub tenant: String,
    pub category: CostCategory,
    pub amount: Money,
    pub at: DateTime<Utc>,
    pub description: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Counts of live state, for leak checks and the dashboard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveCounts {
    pub reservations: u64,
    pub pending_approvals: u64,
    pub running_keys: u64,
    pub open_intents: u64,
}

pub trait Store: Send + Sync {
    // Kill switch.
    fn kill_state(&self) -> StoreResult<Option<KillState>>;
    fn set_kill(&self, reason: &str, by: &str, now: DateTime<Utc>) -> StoreResult<()>;
    fn clear_kill(&self) -> StoreResult<()>;

    // Rate limits: atomically count events of `key` in the window and record one if under.
    // Returns `None` when allowed, or `Some(retry_after_ms)`.
    fn rate_take(
        &self,
        key: &str,
        limit: u32,
        window_ms: i64,
        now_ms: i64,
    ) -> StoreResult<Option<u64>>;

    // Budget.
    fn reserve(
        &self,
        operation_id: &str,
        scopes: &[ScopeCeiling],
        category: CostCategory,
        amount: Money,
        now: DateTime<Utc>,
    ) -> StoreResult<ReserveOutcome>;
    /// Charges `charge` (at most the reservation) and releases the rest.
    fn settle(
        &self,
        operation_id: &str,
        charge: Money,
        warn_fraction: rust_decimal::Decimal,
        line: Option<LedgerLine>,
    ) -> StoreResult<SettleOutcome>;
    /// Releases a reservation without charging (failure before running, cancel).
    fn release(&self, operation_id: &str) -> StoreResult<Money>;
    fn summary(&self, scopes: &[ScopeCeiling]) -> StoreResult<Vec<ScopeSummary>>;
    fn ledger(&self, since: DateTime<Utc>, until: DateTime<Utc>) -> StoreResult<Vec<LedgerLine>>;

    // Approvals.
    fn create_approval(&self, a: &Approval) -> StoreResult<()>;
    fn get_approval(&self, id: &str) -> StoreResult<Option<Approval>>;
    fn list_approvals(&self, state: Option<ApprovalState>) -> StoreResult<Vec<Approval>>;
    fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<Approval>;
    /// Marks an approved approval used, if it is approved, unexpired and for this
    /// fingerprint. Returns whether it was consumed.
    fn consume_approval(
        &self,
        id: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
    fn expire_approvals(&self, now: DateTime<Utc>) -> StoreResult<u64>;
    /// Expires one approval that is still pending or approved-but-unused.
    fn expire_approval(&self, id: &str) -> StoreResult<()>;

    // Idempotency.
    fn idem_begin(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        operation_id: &str,
        now: DateTime<Utc>,
        retention_s: u64,
    ) -> StoreResult<IdemBegin>;
    fn idem_finish(&self, tenant: &str, key: &str, outcome: &str) -> StoreResult<()>;
    /// Forgets a running key (the operation did not run, so a retry may run it).
    fn idem_abandon(&self, tenant: &str, key: &str) -> StoreResult<()>;

    // Journal.
    fn journal_intent(&self, e: &JournalEntry) -> StoreResult<()>;
    fn journal_outcome(
        &self,
        operation_id: &str,
        status: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Intents with no outcome whose process is gone; marks them interrupted, releases
    /// their reservations, settles their idempotency keys (to `interrupted_outcome(entry)`,
    /// or forgets the key when the operation is idempotent, so a retry runs it) and
    /// returns them. One transaction: a crash during recovery loses nothing.
    fn recover(
        &self,
        now: DateTime<Utc>,
        is_alive: &dyn Fn(&str) -> bool,
        interrupted_outcome: &dyn Fn(&JournalEntry) -> String,
    ) -> StoreResult<Vec<JournalEntry>>;

    fn live_counts(&self) -> StoreResult<LiveCounts>;
}
