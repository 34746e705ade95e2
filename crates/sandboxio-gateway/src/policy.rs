//! The policy layer as the gateway sees it: a decision for an operation, never an error.

use chrono::{DateTime, Utc};
use sandboxio_core::{Decision, Operation};

pub trait PolicyEngine: Send + Sync {
    /// Must never fail open: any internal problem is a deny.
    fn decide(&self, op: &Operation, now: DateTime<Utc>) -> Decision;

    /// The same, for an operation whose paths live in `workspace` (file operations of a
    /// session): engines that understand resolved paths check them too.
    fn decide_in(
        &self,
        op: &Operation,
        now: DateTime<Utc>,
        workspace: Option<&std::path::Path>,
    ) -> Decision {
        let _ = workspace;
        self.decide(op, now)
    }
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
        self.decide_in(op, now, None)
    }

    /// With a workspace, a file operation's path is also resolved (symlinks followed, as far
    /// as it exists) and the policy sees both: `a/../b` or a symlink cannot dodge a rule.
    fn decide_in(
        &self,
        op: &Operation,
        now: DateTime<Utc>,
        workspace: Option<&std::path::Path>,
    ) -> Decision {
        let mut ctx = sandboxio_policy::Context::new(now);
        ctx.default_tier = self.default_tier;
        let resolved = workspace.and_then(|root| {
            let root = root.canonicalize().ok()?;
            let path = op.args.path()?;
            let full = root.join(path);
            // Resolve the longest existing prefix; the rest is appended lexically.
            let mut existing = full.clone();
            let mut rest = Vec::new();
            while !existing.exists() {
                rest.push(existing.file_name()?.to_os_string());
                existing = existing.parent()?.to_path_buf();
            }
            let mut resolved = existing.canonicalize().ok()?;
            for part in rest.iter().rev() {
                resolved.push(part);
            }
            Some((
                resolved.to_string_lossy().into_owned(),
                root.to_string_lossy().into_owned(),
            ))
        });
        if let Some((resolved, root)) = &resolved {
            ctx = ctx.with_resolved_path(resolved, root);
        }
        self.set.evaluate(op, &ctx)
    }
}
