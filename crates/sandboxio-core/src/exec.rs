//! What a sandbox is asked to run, and what it reports back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tier::IsolationTier;
use crate::units::ByteSize;

/// Network access for a sandbox. `None` is the default.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum NetworkMode {
    #[default]
    None,
    /// Egress only to these `host:port` patterns, through the host-side proxy.
    Allowlist { allow: Vec<String> },
    /// Full network (explicit opt-in).
    Full,
}

/// Resource limits; every field has a safe default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock timeout; the whole process tree is killed when it passes.
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Memory (cgroup limit where available, else address-space rlimit).
    pub memory: ByteSize,
    /// CPU seconds (RLIMIT_CPU), per process.
    pub cpu_seconds: u64,
    /// CPU quota as a fraction of one core, in per-mille (1000 = one core).
    pub cpu_quota_millis: u32,
    /// Maximum number of processes/threads (pids cgroup).
    pub pids: u32,
    /// Maximum size of any file written (RLIMIT_FSIZE).
    pub file_size: ByteSize,
    /// Maximum open files (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Cap on captured stdout; the rest is drained and dropped.
    pub stdout_cap: ByteSize,
    /// Cap on captured stderr.
    pub stderr_cap: ByteSize,
    /// Size of the tmpfs at `/tmp` (namespace tier).
    pub tmp_size: ByteSize,
    /// Size cap of the writable output directory (namespace tier).
    pub output_size: ByteSize,
}

/// Safe defaults, as named constants.
pub mod defaults {
    use super::*;
    pub const TIMEOUT: Duration = Duration::from_secs(30);
    pub const MEMORY: ByteSize = ByteSize::mib(512);
    pub const CPU_SECONDS: u64 = 60;
    pub const CPU_QUOTA_MILLIS: u32 = 1000;
    pub const PIDS: u32 = 128;
    pub const FILE_SIZE: ByteSize = ByteSize::mib(64);
    pub const OPEN_FILES: u64 = 256;
    pub const STDOUT_CAP: ByteSize = ByteSize::mib(1);
    pub const STDERR_CAP: ByteSize = ByteSize::mib(1);
    pub const TMP_SIZE: ByteSize = ByteSize::mib(64);
    pub const OUTPUT_SIZE: ByteSize = ByteSize::mib(64);
    /// Environment variables passed through from the host unless configured otherwise.
    pub const ENV_ALLOWLIST: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ"];
    /// PATH inside a sandbox when the host's is not passed.
    pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: defaults::TIMEOUT,
            memory: defaults::MEMORY,
            cpu_seconds: defaults::CPU_SECONDS,
            cpu_quota_millis: defaults::CPU_QUOTA_MILLIS,
            pids: defaults::PIDS,
            file_size: defaults::FILE_SIZE,
            open_files: defaults::OPEN_FILES,
            stdout_cap: defaults::STDOUT_CAP,
            stderr_cap: defaults::STDERR_CAP,
            tmp_size: defaults::TMP_SIZE,
            output_size: defaults::OUTPUT_SIZE,
        }
    }
}

/// A request to run one program in a sandbox.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// Variables set explicitly (on top of the allowlisted host variables).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host variables passed through, by name.
    #[serde(default = "default_env_allowlist")]
    pub env_allowlist: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Vec<u8>>,
    /// Files written into the workspace before the program starts (name -> contents).
    #[serde(default)]
    pub files: BTreeMap<String, Vec<u8>>,
    /// Read-only input directory, seen by the program at `$SANDBOX_INPUT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_dir: Option<PathBuf>,
    /// Host directory that receives the program's output (`$SANDBOX_OUTPUT`).
    /// When absent, a fresh directory inside the workspace is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_dir: Option<PathBuf>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub network: NetworkMode,
    /// Keep the temporary workspace after the run (for debugging).
    #[serde(default)]
    pub keep_workspace: bool,
    /// Allow executing files from writable places (otherwise they are `noexec`).
    #[serde(default)]
    pub allow_exec_in_writable: bool,
}

fn default_env_allowlist() -> Vec<String> {
    defaults::ENV_ALLOWLIST
        .iter()
        .map(|s| s.to_string())
        .collect()
}

impl ExecRequest {
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            env_allowlist: default_env_allowlist(),
            stdin: None,
            files: BTreeMap::new(),
            input_dir: None,
            output_dir: None,
            limits: Limits::default(),
            network: NetworkMode::None,
            keep_workspace: false,
            allow_exec_in_writable: false,
        }
    }
}

/// Environment values are never printed: they may hold secrets.
impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("argv_len", &self.argv.len())
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("stdin_len", &self.stdin.as_ref().map(|s| s.len()))
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .field("input_dir", &self.input_dir)
            .field("output_dir", &self.output_dir)
            .field("limits", &self.limits)
            .field("network", &self.network)
            .finish()
    }
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    pub fn code(&self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(*c),
            ExitStatus::Signal(_) => None,
        }
    }
    pub fn success(&self) -> bool {
        matches!(self, ExitStatus::Code(0))
    }
}

/// What the tier measured, where it can.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
}

/// The isolation actually achieved for one run: what was enforced, not what was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    pub tier: Option<IsolationTier>,
    /// Namespaces entered, e.g. `["user","mount","pid","net","ipc","uts","cgroup"]`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    #[serde(default)]
    pub seccomp: bool,
    #[serde(default)]
    pub no_new_privs: bool,
    /// "v1", "v2", or absent when no cgroup was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Limits applied, by mechanism, e.g. `["memory=512MiB (cgroup)", "pids=128 (cgroup)"]`.
    #[serde(default)]
    pub limits: Vec<String>,
    /// "none", "allowlist" or "full".
    #[serde(default)]
    pub network: String,
    /// Things asked for that could not be enforced, in words.
    #[serde(default)]
    pub gaps: Vec<String>,
}

/// Metering attached to a result (seed `002_*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meter {
    pub duration_ms: u64,
    pub backend: String,
}

/// The whole outcome of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    pub sandbox_id: String,
    pub exit: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Total bytes the program wrote, captured or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub timed_out: bool,
    pub oom_killed: bool,
    /// Set when the run was cancelled (caller, kill switch); holds the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<String>,
    pub duration_ms: u64,
    pub usage: Usage,
    pub enforcement: Enforcement,
    /// Where the output files are (kept after the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_dir: Option<PathBuf>,
    /// Set when the workspace was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter: Option<Meter>,
    #[serde(default)]
    pub network_denials: u64,
}

/// Milliseconds on the wire for durations.
pub mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
