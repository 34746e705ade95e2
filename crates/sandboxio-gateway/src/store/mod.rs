//! The state behind the gateway: one interface, durable implementations.
//!
//! Everything the chain decides on that must survive a restart or be shared by several
//! processes lives here: the kill switch, rate-limit events, the budget ledger and its
//! reservations, approvals, idempotency records and the journal. Every method is one
//! transaction; a method that changes state has made it durable when it returns.
//!
//! An operation costs two write transactions: [`Store::admit`] before the side effect and
//! [`Store::finish`] after it (three with an approval, whose [`Store::claim`] comes after
//! the wait); an operation refused before admission costs one write without fsync, its
//! trail head. Budget arithmetic is the budget crate's: the store loads the scopes a
//! request touches, lets `BudgetState` decide, and writes back what changed.

mod admin_change;
mod anchors;
mod change;
pub(crate) mod guard;
mod heads;
mod lost;
mod perms;
mod pg;
mod rebuild;
mod sqlite;
mod values;

pub use admin_change::{AdminChange, AdminChanged, AdminCommit};
pub use anchors::{read_trail_anchors, AnchorSource, KeptBreak, KeptHead, TrailAnchors};
pub use change::{wait_for_change, StoreChange};
pub use guard::{StateFiles, RECOVER_COMMAND};
pub use heads::AnchorBreak;
pub use lost::{lost_after, lost_work, not_before, LostWork};
pub use perms::{prepare_state_dir, STATE_DIR_MODE, STATE_FILE_MODE};
pub(crate) use pg::pg_transient;
pub use pg::{PgOptions, PgStore, DEFAULT_LEASE, MAX_LEASE, MIN_LEASE};
pub use rebuild::{rebuild_from_trail, Rebuilt};
pub use sandboxio_audit::SignedHead;
pub use sqlite::{SqliteStore, SyncMode};

use chrono::{DateTime, Utc};
use sandboxio_budget::{
    BudgetConfig, BudgetDenial, RateLimit, Reservation, ReserveRequest, ScopeKey, Settlement,
    Summary,
};
use sandboxio_core::{CostCategory, Money};
use serde::{Deserialize, Serialize};

use crate::credential::Credential;
use crate::error::GatewayError;

pub type StoreResult<T> = Result<T, GatewayError>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillState {
    pub reason: String,
    pub by: String,
    pub at: DateTime<Utc>,
}

/// What the chain asks of the store before anything runs: one transaction that checks the
/// kill switch, takes rate-limit tokens, writes the journal intent, reserves the budget and
/// claims the idempotency key. Either all of it happens or none of it does.
#[derive(Debug, Clone)]
pub struct Admission<'a> {
    pub journal: JournalEntry,
    pub rate: Vec<(String, RateLimit)>,
    pub budget: &'a BudgetConfig,
    pub reserve: ReserveRequest,
    /// The operation's idempotency key, if it carries one.
    pub idem: Option<IdemClaim>,
    /// The key is claimed later, after an approval: the admission only looks it up, so
    /// that a replay, a conflict or a key still running is answered before anyone is
    /// asked (and changes nothing).
    pub idem_lookup_only: bool,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemClaim {
    pub tenant: String,
    pub key: String,
    pub fingerprint: String,
    pub retention_s: u64,
}

/// The store's answer to an [`Admission`]. Anything but `Proceed` changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    Proceed(Reservation),
    KillSwitch(KillState),
    RateLimited {
        key: String,
        limit: RateLimit,
        retry_after_ms: u64,
    },
    Budget(BudgetDenial),
    /// The key is known: replay, conflict or still running.
    Idem(IdemBegin),
}

/// How an admitted operation ends, in one transaction: settle (or release) the budget,
/// store (or forget) the idempotency outcome, close the journal entry.
#[derive(Debug, Clone)]
pub struct Finish<'a> {
    pub operation_id: &'a str,
    pub budget: &'a BudgetConfig,
    /// The measured cost to settle; `None` releases the reservation unspent.
    pub charge: Option<Money>,
    pub ledger: Option<LedgerLine>,
    pub idem: Option<(String, String, IdemEnd)>,
    pub journal_status: &'a str,
    /// The audit trails' signed heads after this operation's record (kept if newer).
    pub heads: &'a [SignedHead],
    /// The operation's record, when a sink could not take it (kept until it is written).
    pub unrecorded: Option<&'a Unrecorded>,
    pub now: DateTime<Utc>,
}

/// The fingerprint of an idempotency key that answers every request under it with its
/// outcome: a key rebuilt from the trail for an operation recorded interrupted (whose
/// request's fingerprint the record does not hold).
pub const ANY_REQUEST: &str = "*";

/// The ledger line of an interrupted operation charged its reservation `r` at recovery:
/// its tenant is its reservation's (else the one its intent names).
pub(crate) fn interrupted_ledger_line(
    e: &JournalEntry,
    r: &sandboxio_budget::Reservation,
    charged: sandboxio_core::Money,
    now: DateTime<Utc>,
) -> LedgerLine {
    let tenant = r
        .scopes
        .iter()
        .find_map(|s| match s.base() {
            ScopeKey::Tenant(t) => Some(t.clone()),
            _ => None,
        })
        .or_else(|| {
            let intent: serde_json::Value = serde_json::from_str(&e.intent).ok()?;
            intent["principal"]["tenant"].as_str().map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into());
    LedgerLine {
        operation_id: e.operation_id.clone(),
        tenant,
        category: r.category,
        amount: charged,
        at: now,
        description: "interrupted: charged its reservation, the most it could cost (it may have run; its cost was not recorded)".into(),
        labels: Default::default(),
    }
}

/// A record that audit sinks could not take (`on_sink_failure = "warn"`: the operation
/// went on, a full disk under the trail, say), kept in the store until it is written to
/// them: each start (and a server's sweeper) writes it late, so no operation stays
/// without its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrecorded {
    pub operation_id: String,
    /// The rendered event (`AuditEvent` JSON), redacted like every record.
    pub event: String,
    /// The sinks that failed (by name); the others have it.
    pub sinks: Vec<String>,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemEnd {
    /// Store this outcome (JSON) under the key.
    Done(String),
    /// Forget the key (nothing ran, so a retry may run).
    Abandon,
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

/// The id of the approval an operation asks for: derived from the operation id, so that
/// recovery can expire the approvals of operations a crashed process left behind.
pub fn approval_id_for(operation_id: &str) -> String {
    format!("apr_{}", operation_id.get(..16).unwrap_or(operation_id))
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
    /// On a shared store: this replica's id when another replica found its lease expired
    /// and took over its work. It admits nothing more until restarted, so it is neither
    /// ready nor healthy. `None` for a store without replicas.
    fn lease_lost(&self) -> Option<String> {
        None
    }

    // Kill switch.
    fn kill_state(&self) -> StoreResult<Option<KillState>>;
    /// Engages the kill switch and ends every pending (or approved, unused) approval as a
    /// denial by [`KILL_SWITCH_APPROVER`], in one transaction.
    fn set_kill(&self, reason: &str, by: &str, now: DateTime<Utc>) -> StoreResult<()>;
    fn clear_kill(&self) -> StoreResult<()>;
    /// An operator action's change and its journal intent, in one transaction (see
    /// [`AdminChange`]); the intent is written only when the change changed something,
    /// with the time taken inside the transaction ([`AdminCommit`]).
    fn admin_change(
        &self,
        journal: &JournalEntry,
        change: &AdminChange,
    ) -> StoreResult<AdminCommit>;

    /// Everything before the side effect, in one transaction (see [`Admission`]).
    fn admit(&self, a: &Admission<'_>) -> StoreResult<Admitted>;
    /// After an approval: uses it (bound to this fingerprint, once) and claims the key, in
    /// one transaction. `Ok(None)` means go on; `Some(..)` says why not.
    fn claim(
        &self,
        approval: Option<(&str, &str)>,
        idem: Option<&IdemClaim>,
        operation_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Claimed>>;
    /// Everything after the side effect, in one transaction (see [`Finish`]).
    fn finish(&self, f: &Finish<'_>) -> StoreResult<Option<Settlement>>;

    fn budget_summary(&self, cfg: &BudgetConfig, scopes: &[ScopeKey]) -> StoreResult<Vec<Summary>>;
    /// Reopens a scope closed by an overrun; `false` when it was not closed.
    fn reopen_scope(&self, scope: &ScopeKey, now: DateTime<Utc>) -> StoreResult<bool>;
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
    fn expire_approvals(&self, now: DateTime<Utc>) -> StoreResult<u64>;
    /// Expires one approval that is still pending or approved-but-unused.
    fn expire_approval(&self, id: &str) -> StoreResult<()>;

    /// Claims, for `claimant` until `hold` from now, the intents with no outcome whose
    /// process is gone (with a shared store, also those of replicas whose lease expired)
    /// that no other live recovery holds, and returns them, oldest first. Recovery records
    /// them in the trail first, then settles them ([`Store::settle_interrupted`]): a crash
    /// in between leaves them open (and their claim lapses), so the next recovery records
    /// them instead of finding them settled and unrecorded; the claim keeps two recoveries
    /// running at once (two replicas' sweepers, two CLI processes starting) from recording
    /// one operation twice. A claim is free again once it expires, once its claimant is
    /// dead (or, with a shared store, its replica lost), or when its own claimant asks
    /// again (a recovery retried after its record failed). Writes only when it claims.
    fn claim_dead_intents(
        &self,
        claimant: &str,
        hold: std::time::Duration,
        is_alive: &dyn Fn(&str) -> bool,
    ) -> StoreResult<Vec<JournalEntry>>;

    /// The reserved amount of each of `ids` that holds a reservation (what its recovery
    /// will charge).
    fn reserved_amounts(
        &self,
        ids: &[String],
    ) -> StoreResult<std::collections::BTreeMap<String, sandboxio_core::Money>>;

    /// Of `dead`, the intents still open: marks them interrupted, charges each its
    /// reservation (the most it could cost: it may have run, and its cost is not known;
    /// a ledger line says so), expires their approvals, settles their idempotency keys (to
    /// `interrupted_outcome(entry)`, or forgets the key when the operation is idempotent,
    /// so a retry runs it) and returns them. One transaction.
    fn settle_interrupted(
        &self,
        now: DateTime<Utc>,
        dead: &[JournalEntry],
        budget: &BudgetConfig,
        interrupted_outcome: &dyn Fn(&JournalEntry) -> String,
    ) -> StoreResult<Vec<JournalEntry>>;

    /// [`Store::claim_dead_intents`] (for this process) then
    /// [`Store::settle_interrupted`], with nothing recorded in between (the gateway's
    /// recovery records between the two).
    fn recover(
        &self,
        now: DateTime<Utc>,
        budget: &BudgetConfig,
        is_alive: &dyn Fn(&str) -> bool,
        interrupted_outcome: &dyn Fn(&JournalEntry) -> String,
    ) -> StoreResult<Vec<JournalEntry>> {
        let owner = crate::chain::process_owner();
        let dead = self.claim_dead_intents(&owner, RECOVERY_HOLD, is_alive)?;
        self.settle_interrupted(now, &dead, budget, interrupted_outcome)
    }

    /// Of `ids`, those the journal holds (open or settled): an operation the audit trail
    /// records as admitted must be here, or the store has lost committed work.
    fn journal_has(&self, ids: &[String]) -> StoreResult<Vec<String>>;
    /// The open intents (no outcome yet) started at or after `since`, oldest first.
    fn open_intents_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<JournalEntry>>;

    fn live_counts(&self) -> StoreResult<LiveCounts>;

    /// Keeps each trail's signed head, unless the stored one is further along (several
    /// processes may write one trail). No fsync of its own.
    fn put_heads(&self, heads: &[SignedHead], now: DateTime<Utc>) -> StoreResult<()>;
    /// Keeps a record its sinks could not take, for an operation that has no `finish`
    /// (one never admitted); an admitted one's goes in its [`Finish`].
    fn keep_unrecorded(&self, u: &Unrecorded) -> StoreResult<()>;
    /// The records waiting to be written, oldest first, at most `limit`.
    fn unrecorded(&self, limit: usize) -> StoreResult<Vec<Unrecorded>>;
    /// After a late write: forgets the record (`left` empty) or keeps the sinks that still
    /// failed.
    fn settle_unrecorded(&self, operation_id: &str, left: &[String]) -> StoreResult<()>;
    fn heads(&self) -> StoreResult<Vec<SignedHead>>;
    /// Keeps the evidence that a trail no longer holds its head, and replaces the head
    /// with `new_head` (the trail as it is now), in one transaction.
    fn record_anchor_break(
        &self,
        b: &AnchorBreak,
        new_head: Option<&SignedHead>,
    ) -> StoreResult<()>;
    fn anchor_breaks(&self) -> StoreResult<Vec<AnchorBreak>>;
    /// Deletes finished journal rows older than `retention`, expired idempotency keys and
    /// decided approvals older than `retention`.
    fn prune(&self, now: DateTime<Utc>, retention: std::time::Duration) -> StoreResult<Pruned>;

    /// Rate-limit events newer than `since` under each counting key that starts with
    /// `prefix` (keys are `"{rule}|{tenant}|{agent}|{action}"`), for headroom reports.
    fn rate_usage(&self, prefix: &str, since: DateTime<Utc>) -> StoreResult<Vec<RateUsage>>;

    // Credentials (API keys and capability tokens): rows with the secret's hash, never
    // the secret. See `crate::credential`.
    fn create_credential(&self, c: &Credential) -> StoreResult<()>;
    fn credential(&self, id: &str) -> StoreResult<Option<Credential>>;
    /// Every credential, or a tenant's, oldest first.
    fn list_credentials(&self, tenant: Option<&str>) -> StoreResult<Vec<Credential>>;
    /// Revokes a credential and every capability token minted from it, in one transaction;
    /// `false` when no credential has this id.
    fn revoke_credential(&self, id: &str, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Announcements of changes made by any process sharing this store (kill switch,
    /// decided approvals), for waiters to wake at once; `None` when the store has none and
    /// waiters only poll (SQLite). Each call gives a new receiver.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<StoreChange>> {
        None
    }

    /// What this store is, for logs and `status`: `sqlite` or `postgres`, and the replica
    /// id when the store is shared.
    fn describe(&self) -> StoreInfo {
        StoreInfo::default()
    }
}

/// What [`Store::describe`] tells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreInfo {
    pub backend: String,
    /// This process's replica id in a shared store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
}

/// What [`Store::prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    pub journal: u64,
    pub idempotency: u64,
    pub approvals: u64,
}

/// How much of a rate limit one counting key has used in the current window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateUsage {
    pub key: String,
    pub count: u64,
    /// The oldest counted event: the window frees a slot when it ages out.
    pub oldest: DateTime<Utc>,
}

/// Why a claim after approval did not go through (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The kill switch was engaged (checked in the claim's own transaction).
    KillSwitch(KillState),
    ApprovalInvalid,
    Idem(IdemBegin),
}

/// The `decided_by` of approvals that the kill switch ended.
pub const KILL_SWITCH_APPROVER: &str = "kill switch";

/// How long a recovery's claim on an interrupted operation holds
/// ([`Store::claim_dead_intents`]): ample for recording it (one audit record each), and
/// what a recovery that dies holding claims delays the next one by at most (a dead
/// claimant on this host frees its claims at once).
pub const RECOVERY_HOLD: std::time::Duration = std::time::Duration::from_secs(60);
