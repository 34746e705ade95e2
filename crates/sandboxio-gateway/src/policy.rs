//! The policy layer as the gateway sees it: a decision for an operation, never an error.

use chrono::{DateTime, Utc};
use sandboxio_core::{Decision, Operation};

pub trait PolicyEngine: Send + Sync {
    /// Must never fail open: any internal problem is a deny.
    fn decide(&self, op: &Operation, now: DateTime<Utc>) -> Decision;
}

/// The policy crate's evaluator as the gateway's policy layer.
pub struct PolicySetEngine {
    set: sandboxio_policy::PolicySet,
    default_tier: sandboxio_core::IsolationTier,
}

impl PolicySetEngine {
    pub fn new(
        set: sandboxio_policy::PolicySet,
        default_tier: sandboxio_core::IsolationTier,
    ) -> Self {
        PolicySetEngine { set, default_tier }
    }
}

impl PolicyEngine for PolicySetEngine {
    fn decide(&self, op: &Operation, now: DateTime<Utc>) -> Decision {
        let mut ctx = sandboxio_policy::Context::new(now);
        ctx.default_tier = self.default_tier;
        self.set.evaluate(op, &ctx)
    }
}
