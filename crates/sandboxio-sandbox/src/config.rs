//! How this host's sandboxes are run: helper binary, work root, cgroup use.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
    /// A cgroup2 directory to create sandbox cgroups under (`[sandbox] cgroup_root`): for
    /// a user who may write one. `None`: detected (root's hierarchies, or the subtree
    /// systemd delegated to this user).
    #[serde(default)]
    pub cgroup_root: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            helper_path: None,
            work_root: None,
            cgroups: CgroupUsage::Auto,
            landlock_fallback: false,
            cgroup_root: None,
        }
    }
}

impl SandboxConfig {
    /// The helper binary: explicit path, then `$SBX_HELPER`, then `sandboxio-helper`
    /// beside the running executable when it was built from the same sources (its build
    /// id, `build_id`; looked up once per process), then the running executable. The
    /// separate helper is a small binary: starting it instead of a large embedding binary
    /// (the CLI, the server) saves the loader's work on every sandbox start.
    pub fn resolve_helper(&self) -> Result<PathBuf, SandboxError> {
        if let Some(p) = &self.helper_path {
            return Ok(p.clone());
        }
        if let Some(p) = std::env::var_os(ENV_HELPER) {
            if !p.is_empty() {
                return Ok(PathBuf::from(p));
            }
        }
        let exe = std::env::current_exe().map_err(|e| SandboxError::HelperNotFound {
            why: format!("current_exe() failed: {e}"),
        })?;
        static SIBLING: OnceLock<Option<PathBuf>> = OnceLock::new();
        let sibling = SIBLING.get_or_init(|| crate::build_id::sibling_helper(&exe));
        Ok(sibling.clone().unwrap_or(exe))
    }

    /// The directory under which workspaces are created: `work_root`, else
    /// [`default_work_root`].
    pub fn resolve_work_root(&self) -> PathBuf {
        self.work_root.clone().unwrap_or_else(default_work_root)
    }
}

/// Where workspaces go by default (decided once per process): `std::env::temp_dir()` when
/// it is a tmpfs; otherwise `/dev/shm` when that is a writable tmpfs; otherwise
/// `temp_dir()`. Creating and removing the four workspace directories on a disk file
/// system goes through its journal, which cost 10+ ms per run on a busy ext4 host versus
/// under 0.1 ms on tmpfs. The trade-off: files the program writes into its workspace
/// (and a default `output/`) live in RAM until the run ends; set `work_root` (or give
/// `output_dir`) to keep large outputs on disk.
pub fn default_work_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let tmp = std::env::temp_dir();
        if is_writable_tmpfs(&tmp) {
            return tmp;
        }
        let shm = PathBuf::from("/dev/shm");
        if is_writable_tmpfs(&shm) {
            return shm;
        }
        tmp
    })
    .clone()
}

fn is_writable_tmpfs(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    crate::sys::fs::statfs_type(&c) == Ok(libc::TMPFS_MAGIC)
        && crate::sys::fs::access(&c, libc::W_OK | libc::X_OK)
}
