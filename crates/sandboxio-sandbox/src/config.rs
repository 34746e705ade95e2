//! How this host's sandboxes are run: helper binary, work root, cgroup use.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// Environment variable naming the helper binary (overrides the default `current_exe()`).
pub const ENV_HELPER: &str = "SBX_HELPER";

/// Whether runs use a per-sandbox cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupUsage {
    /// Use cgroups when this host offers them; otherwise run without and list the gap.
    #[default]
    Auto,
    /// Fail the run (`SBX_E1417`) when a cgroup cannot be created.
    Required,
    /// Never create cgroups (limits fall back to rlimits; gaps are listed).
    Off,
}

/// Host-side configuration of the sandbox runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// The binary re-executed as helper. `None`: `$SBX_HELPER`, else `current_exe()`.
    #[serde(default)]
    pub helper_path: Option<PathBuf>,
    /// Where temporary workspaces are created. `None`: `std::env::temp_dir()`.
    #[serde(default)]
    pub work_root: Option<PathBuf>,
    #[serde(default)]
    pub cgroups: CgroupUsage,
    /// Whether policy allows the weaker Landlock tier where user namespaces are missing.
    #[serde(default)]
    pub landlock_fallback: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            helper_path: None,
            work_root: None,
            cgroups: CgroupUsage::Auto,
            landlock_fallback: false,
        }
    }
}

impl SandboxConfig {
    /// The helper binary: explicit path, then `$SBX_HELPER`, then the running executable.
    pub fn resolve_helper(&self) -> Result<PathBuf, SandboxError> {
        if let Some(p) = &self.helper_path {
            return Ok(p.clone());
        }
        if let Some(p) = std::env::var_os(ENV_HELPER) {
            if !p.is_empty() {
                return Ok(PathBuf::from(p));
            }
        }
        std::env::current_exe().map_err(|e| SandboxError::HelperNotFound {
            why: format!("current_exe() failed: {e}"),
        })
    }

    /// The directory under which workspaces are created.
    pub fn resolve_work_root(&self) -> PathBuf {
        self.work_root.clone().unwrap_or_else(std::env::temp_dir)
    }
}
