//! The tier as a type: which isolation a plan asks for, together with that tier's own
//! plan, so a plan cannot name one tier and carry the section of another (or none).
//!
//! - [`TierRequest`]: what the supervisor asks [`crate::plan::build`] for, with the host
//!   facts the tier's plan depends on (the landlock tier picks a fresh uid when the helper
//!   is host root). Reading those facts is the only impure step, in [`TierRequest::for_host`].
//! - [`TierPlan`]: what the helper receives; its variant picks the launcher.

use sandboxio_core::IsolationTier;
use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::fallback::LandlockTierPlan;
use crate::ns::NamespacePlan;

/// The tier a plan is built for, with the host facts its plan needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierRequest {
    Process,
    Namespace,
    /// `euid`: the helper's effective uid (`u32::MAX` for root of a nested user
    /// namespace, which cannot switch to a fresh host uid); `random` picks that uid.
    Landlock {
        euid: u32,
        random: u32,
    },
}

impl TierRequest {
    /// The request for `tier` on this host (reads the effective uid and draws one random
    /// number for the landlock tier). Tiers this crate cannot run are refused.
    pub fn for_host(tier: IsolationTier) -> Result<Self, SandboxError> {
        match tier {
            IsolationTier::Process => Ok(Self::Process),
            IsolationTier::Namespace => Ok(Self::Namespace),
            IsolationTier::Landlock => Ok(Self::Landlock {
                euid: crate::fallback::planning_uid(),
                random: rand::random(),
            }),
            IsolationTier::Microvm | IsolationTier::Remote => Err(SandboxError::UnsupportedTier {
                tier,
                why: "this build has no backend for the tier",
            }),
        }
    }

    pub fn tier(&self) -> IsolationTier {
        match self {
            Self::Process => IsolationTier::Process,
            Self::Namespace => IsolationTier::Namespace,
            Self::Landlock { .. } => IsolationTier::Landlock,
        }
    }
}

/// The tier of a plan and that tier's own section. Externally tagged in the plan's JSON
/// (`"process"`, `{"namespace": {...}}`, `{"landlock": {...}}`), which the helper decodes
/// in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TierPlan {
    /// Fork and exec with rlimits, cgroups and no_new_privs (`helper`).
    Process,
    /// Namespaces, a new root, seccomp, Landlock, dropped capabilities (`ns`).
    Namespace(Box<NamespacePlan>),
    /// Landlock, seccomp and a fresh uid without namespaces (`fallback`).
    Landlock(Box<LandlockTierPlan>),
}

impl TierPlan {
    pub fn tier(&self) -> IsolationTier {
        match self {
            Self::Process => IsolationTier::Process,
            Self::Namespace(_) => IsolationTier::Namespace,
            Self::Landlock(_) => IsolationTier::Landlock,
        }
    }

    pub fn namespace(&self) -> Option<&NamespacePlan> {
        match self {
            Self::Namespace(n) => Some(n),
            _ => None,
        }
    }

    pub fn landlock(&self) -> Option<&LandlockTierPlan> {
        match self {
            Self::Landlock(l) => Some(l),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn for_host_maps_every_tier_and_refuses_the_ones_without_a_backend() {
        for tier in [
            IsolationTier::Process,
            IsolationTier::Namespace,
            IsolationTier::Landlock,
        ] {
            assert_eq!(TierRequest::for_host(tier).unwrap().tier(), tier);
        }
        for tier in [IsolationTier::Microvm, IsolationTier::Remote] {
            assert!(matches!(
                TierRequest::for_host(tier),
                Err(SandboxError::UnsupportedTier { .. })
            ));
        }
    }

    #[test]
    fn the_process_tier_is_a_bare_string_in_json() {
        let s = serde_json::to_string(&TierPlan::Process).unwrap();
        assert_eq!(s, "\"process\"");
        let back: TierPlan = serde_json::from_str(&s).unwrap();
        assert_eq!(back.tier(), IsolationTier::Process);
        assert!(back.namespace().is_none() && back.landlock().is_none());
    }
}
