//! Isolation tiers and capabilities.

use std::fmt;
use std::str::FromStr;

use bitflags::bitflags;
use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// How strongly an operation is isolated. See DESIGN.md section 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationTier {
    /// A plain subprocess: tidy, not a security boundary.
    Process,
    /// Linux namespaces, pivot_root, Landlock, seccomp, cgroups: container-grade.
    Namespace,
    /// Landlock, seccomp, rlimits and cgroups without user namespaces.
    Landlock,
    /// A KVM guest with its own kernel (not built yet).
    Microvm,
    /// A hosted provider (not built yet).
    Remote,
}

impl IsolationTier {
    pub fn as_str(&self) -> &'static str {
        match self {
            IsolationTier::Process => "process",
            IsolationTier::Namespace => "namespace",
            IsolationTier::Landlock => "landlock",
            IsolationTier::Microvm => "microvm",
            IsolationTier::Remote => "remote",
        }
    }
}

impl FromStr for IsolationTier {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(IsolationTier::Process),
            "namespace" => Ok(IsolationTier::Namespace),
            "landlock" => Ok(IsolationTier::Landlock),
            "microvm" => Ok(IsolationTier::Microvm),
            "remote" => Ok(IsolationTier::Remote),
            _ => Err(CoreError::UnknownTier {
                input: s.to_string(),
            }),
        }
    }
}

impl fmt::Display for IsolationTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

bitflags! {
    /// What a backend can do.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct Capability: u32 {
        const EXEC = 1;
        const RUN_CODE = 1 << 1;
        const FILESYSTEM = 1 << 2;
        const NETWORK = 1 << 3;
        const STREAM = 1 << 4;
        const COST_REPORTING = 1 << 5;
        const RESOURCE_LIMITS = 1 << 6;
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter_names().map(|(n, _)| n).collect();
        f.write_str(&names.join("|"))
    }
}
