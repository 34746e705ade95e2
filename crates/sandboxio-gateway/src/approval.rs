//! How an `ask` gets its answer: a library callback, a person using the CLI, or nobody.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::store::Approval;

/// An answer from an approver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAnswer {
    pub approve: bool,
    pub approver: String,
    pub reason: Option<String>,
}

/// A library callback that decides approvals (a UI, a chat bot, a test).
#[async_trait]
pub trait ApprovalCallback: Send + Sync {
    /// Returns `None` for "no answer" (treated as deny at the timeout).
    async fn decide(&self, approval: &Approval) -> Option<ApprovalAnswer>;
}

#[derive(Clone)]
pub enum Approver {
    /// No approver: every `ask` is denied at once, with the pending approval left expired.
    Nobody,
    /// Wait for a decision written to the store by `sandboxio approvals approve|deny`
    /// (or the dashboard), polling at this interval, until the approval timeout.
    Store { poll: Duration },
    /// Ask a callback; its answer is written to the store like a person's.
    Callback(Arc<dyn ApprovalCallback>),
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approver::Nobody => f.write_str("Approver::Nobody"),
            Approver::Store { poll } => write!(f, "Approver::Store {{ poll: {poll:?} }}"),
            Approver::Callback(_) => f.write_str("Approver::Callback(..)"),
        }
    }
}
