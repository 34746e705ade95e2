//! An operator action's change to the store, made in one transaction with its journal
//! intent ([`super::Store::admin_change`]). A process that dies after the commit and before
//! the action's record leaves the intent open, and recovery records the action from it (it
//! took effect with the intent, so the record says so: never `interrupted`). An action
//! that changes nothing (a scope that was not closed, a key that does not exist, an
//! approval no longer pending) writes no intent.

use chrono::{DateTime, Utc};
use sandboxio_budget::ScopeKey;

use super::Approval;
use crate::credential::Credential;

/// What the action changes (owned: it crosses to the store's thread).
#[derive(Debug, Clone)]
pub enum AdminChange {
    /// Engage the kill switch (pending and approved asks end as its denials).
    Kill {
        reason: String,
        by: String,
        now: DateTime<Utc>,
    },
    /// Release the kill switch.
    Resume,
    /// Approve or deny a pending approval.
    Decide {
        approval_id: String,
        approve: bool,
        by: String,
        reason: Option<String>,
        now: DateTime<Utc>,
    },
    /// Reopen a budget scope closed by an overrun.
    Reopen { scope: ScopeKey, now: DateTime<Utc> },
    /// Revoke an API key (and the capability tokens minted from it).
    Revoke { key_id: String, now: DateTime<Utc> },
    /// Store a new API key (its hash: the secret itself is never stored).
    CreateKey { credential: Credential },
    /// Nothing in the store: the intent alone, for an action whose change is elsewhere
    /// (a secret sealed in its file), made after this commits.
    IntentOnly,
}

/// What the change did, and when: the time is taken inside the transaction, once it holds
/// the store's write lock, so two actions' times are in the order they took effect (an
/// action that waited for the lock is later than the one that held it). The intent, and
/// so a record written at recovery, carries the same time.
#[derive(Debug, Clone)]
pub struct AdminCommit {
    pub change: AdminChanged,
    pub at: DateTime<Utc>,
}

/// What the change did.
#[derive(Debug, Clone)]
pub enum AdminChanged {
    /// The kill switch was engaged or released.
    Done,
    /// The approval as it now stands.
    Decided(Approval),
    /// Whether the scope was closed (and is now open).
    Reopened(bool),
    /// The key as it was before its revocation; `None`: no such key, or revoked already.
    Revoked(Option<Credential>),
    /// The new key was stored.
    Created,
}

impl AdminChanged {
    /// Whether the store changed (and so the intent was written with it).
    pub fn changed(&self) -> bool {
        match self {
            AdminChanged::Done | AdminChanged::Decided(_) | AdminChanged::Created => true,
            AdminChanged::Reopened(r) => *r,
            AdminChanged::Revoked(c) => c.is_some(),
        }
    }
}
