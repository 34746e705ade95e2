//! What the caller knows besides the operation: the time, the resolved path, defaults.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sandboxio_core::IsolationTier;
use serde::{Deserialize, Serialize};

/// The network access the sandbox would get (the operation itself does not carry it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetAccess {
    #[default]
    None,
    Allowlist,
    Full,
}

impl NetAccess {
    pub fn as_str(&self) -> &'static str {
        match self {
            NetAccess::None => "none",
            NetAccess::Allowlist => "allowlist",
            NetAccess::Full => "full",
        }
    }
}

impl fmt::Display for NetAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NetAccess {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(NetAccess::None),
            "allowlist" => Ok(NetAccess::Allowlist),
            "full" => Ok(NetAccess::Full),
            _ => Err(format!(
                "unknown network mode `{s}` (expected none, allowlist or full)"
            )),
        }
    }
}

/// Inputs to an evaluation other than the operation. Time is injected, never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context<'a> {
    /// The current time (UTC); time-of-day rules use it.
    pub now: DateTime<Utc>,
    /// The operation's path after the gateway resolved symlinks (absolute). When given,
    /// `allow` rules must match both the lexical and the resolved path, and `ask`/`deny`
    /// rules match if either does.
    pub resolved_path: Option<&'a str>,
    /// The absolute workspace root; a resolved path inside it is matched relative to it.
    pub workspace_root: Option<&'a str>,
    /// The tier used when the operation names none (the gateway's configured default).
    pub default_tier: IsolationTier,
    /// The network the sandbox would get.
    pub network: NetAccess,
}

impl<'a> Context<'a> {
    /// A context at `now` with no resolved path, the namespace tier as default and no network.
    pub fn new(now: DateTime<Utc>) -> Context<'a> {
        Context {
            now,
            resolved_path: None,
            workspace_root: None,
            default_tier: IsolationTier::Namespace,
            network: NetAccess::None,
        }
    }

    /// The same context with a symlink-resolved path and the workspace root it lives under.
    pub fn with_resolved_path(mut self, resolved: &'a str, workspace_root: &'a str) -> Self {
        self.resolved_path = Some(resolved);
        self.workspace_root = Some(workspace_root);
        self
    }
}
