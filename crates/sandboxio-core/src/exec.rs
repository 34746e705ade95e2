//! What a sandbox is asked to run, and what it reports back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tier::IsolationTier;
use crate::units::ByteSize;
use crate::wire::{self, ByteEncoding};

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

/// Resource limits; every field has a safe default. Zero means "unset": the gateway
/// resolves it to the configured default, never to "unlimited" ([`Limits::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default = "Limits::unset")]
pub struct Limits {
    /// Wall-clock timeout; the whole process tree is killed when it passes.
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Memory (cgroup limit where available, else a per-process data rlimit).
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

    /// Ceilings a caller cannot exceed unless the configuration raises them (`[limits.max]`).
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    pub const MAX_MEMORY: ByteSize = ByteSize::mib(4096);
    pub const MAX_CPU_SECONDS: u64 = 3600;
    pub const MAX_CPU_QUOTA_MILLIS: u32 = 2000;
    pub const MAX_PIDS: u32 = 1024;
    pub const MAX_FILE_SIZE: ByteSize = ByteSize::mib(1024);
    pub const MAX_OPEN_FILES: u64 = 4096;
    pub const MAX_STDOUT_CAP: ByteSize = ByteSize::mib(64);
    pub const MAX_STDERR_CAP: ByteSize = ByteSize::mib(64);
    pub const MAX_TMP_SIZE: ByteSize = ByteSize::mib(1024);
    pub const MAX_OUTPUT_SIZE: ByteSize = ByteSize::mib(1024);
}

/// A limit the caller asked for above its ceiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitAboveCeiling {
    /// The limit's name as written in `[limits]` (`memory`, `timeout`, ...).
    pub name: &'static str,
    pub asked: String,
    pub ceiling: String,
}

impl std::fmt::Display for LimitAboveCeiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` = {} is above its ceiling {} (`[limits.max] {}`)",
            self.name, self.asked, self.ceiling, self.name
        )
    }
}

impl Limits {
    /// [`Limits::UNSET`], as a function (serde's default for missing fields).
    pub fn unset() -> Limits {
        Limits::UNSET
    }

    /// Every limit unset: each one takes the configured default when resolved.
    pub const UNSET: Limits = Limits {
        timeout: Duration::ZERO,
        memory: ByteSize(0),
        cpu_seconds: 0,
        cpu_quota_millis: 0,
        pids: 0,
        file_size: ByteSize(0),
        open_files: 0,
        stdout_cap: ByteSize(0),
        stderr_cap: ByteSize(0),
        tmp_size: ByteSize(0),
        output_size: ByteSize(0),
    };

    /// The built-in ceilings ([`defaults`]`::MAX_*`).
    pub fn max() -> Limits {
        Limits {
            timeout: defaults::MAX_TIMEOUT,
            memory: defaults::MAX_MEMORY,
            cpu_seconds: defaults::MAX_CPU_SECONDS,
            cpu_quota_millis: defaults::MAX_CPU_QUOTA_MILLIS,
            pids: defaults::MAX_PIDS,
            file_size: defaults::MAX_FILE_SIZE,
            open_files: defaults::MAX_OPEN_FILES,
            stdout_cap: defaults::MAX_STDOUT_CAP,
            stderr_cap: defaults::MAX_STDERR_CAP,
            tmp_size: defaults::MAX_TMP_SIZE,
            output_size: defaults::MAX_OUTPUT_SIZE,
        }
    }

    /// The limits that apply: a missing (zero) limit takes `default` (and a zero default the
    /// built-in one), never "unlimited"; a limit above `max` is refused, never clamped
    /// silently.
    pub fn resolve(&self, default: &Limits, max: &Limits) -> Result<Limits, LimitAboveCeiling> {
        let builtin = Limits::default();
        fn pick<T: PartialEq + Copy + Default>(asked: T, default: T, builtin: T) -> T {
            if asked != T::default() {
                asked
            } else if default != T::default() {
                default
            } else {
                builtin
            }
        }
        let r = Limits {
            timeout: pick(self.timeout, default.timeout, builtin.timeout),
            memory: ByteSize(pick(self.memory.0, default.memory.0, builtin.memory.0)),
            cpu_seconds: pick(self.cpu_seconds, default.cpu_seconds, builtin.cpu_seconds),
            cpu_quota_millis: pick(
                self.cpu_quota_millis,
                default.cpu_quota_millis,
                builtin.cpu_quota_millis,
            ),
            pids: pick(self.pids, default.pids, builtin.pids),
            file_size: ByteSize(pick(
                self.file_size.0,
                default.file_size.0,
                builtin.file_size.0,
            )),
            open_files: pick(self.open_files, default.open_files, builtin.open_files),
            stdout_cap: ByteSize(pick(
                self.stdout_cap.0,
                default.stdout_cap.0,
                builtin.stdout_cap.0,
            )),
            stderr_cap: ByteSize(pick(
                self.stderr_cap.0,
                default.stderr_cap.0,
                builtin.stderr_cap.0,
            )),
            tmp_size: ByteSize(pick(
                self.tmp_size.0,
                default.tmp_size.0,
                builtin.tmp_size.0,
            )),
            output_size: ByteSize(pick(
                self.output_size.0,
                default.output_size.0,
                builtin.output_size.0,
            )),
        };
        let max = max.resolve_max();
        let above = |name: &'static str, asked: String, ceiling: String| LimitAboveCeiling {
            name,
            asked,
            ceiling,
        };
        if r.timeout > max.timeout {
            return Err(above(
                "timeout",
                crate::units::HumanDuration(r.timeout).to_string(),
                crate::units::HumanDuration(max.timeout).to_string(),
            ));
        }
        let sizes = [
            ("memory", r.memory, max.memory),
            ("file_size", r.file_size, max.file_size),
            ("stdout_cap", r.stdout_cap, max.stdout_cap),
            ("stderr_cap", r.stderr_cap, max.stderr_cap),
            ("tmp_size", r.tmp_size, max.tmp_size),
            ("output_size", r.output_size, max.output_size),
        ];
        for (name, asked, ceiling) in sizes {
            if asked.0 > ceiling.0 {
                return Err(above(name, asked.to_string(), ceiling.to_string()));
            }
        }
        let counts = [
            ("cpu_seconds", r.cpu_seconds, max.cpu_seconds),
            (
                "cpu_millis",
                u64::from(r.cpu_quota_millis),
                u64::from(max.cpu_quota_millis),
            ),
            ("pids", u64::from(r.pids), u64::from(max.pids)),
            ("open_files", r.open_files, max.open_files),
        ];
        for (name, asked, ceiling) in counts {
            if asked > ceiling {
                return Err(above(name, asked.to_string(), ceiling.to_string()));
            }
        }
        Ok(r)
    }

    /// Unset (zero) limits replaced by the built-in defaults; no ceiling applied. The
    /// sandbox calls this on whatever it is given, so zero never means "unlimited".
    pub fn or_builtin_defaults(&self) -> Limits {
        let unlimited = Limits {
            timeout: Duration::MAX,
            memory: ByteSize(u64::MAX),
            cpu_seconds: u64::MAX,
            cpu_quota_millis: u32::MAX,
            pids: u32::MAX,
            file_size: ByteSize(u64::MAX),
            open_files: u64::MAX,
            stdout_cap: ByteSize(u64::MAX),
            stderr_cap: ByteSize(u64::MAX),
            tmp_size: ByteSize(u64::MAX),
            output_size: ByteSize(u64::MAX),
        };
        self.resolve(&Limits::default(), &unlimited)
            .unwrap_or_else(|_| Limits::default())
    }

    /// Ceilings with unset (zero) entries replaced by the built-in ceilings.
    fn resolve_max(&self) -> Limits {
        let b = Limits::max();
        let z = |v: u64, d: u64| if v == 0 { d } else { v };
        Limits {
            timeout: if self.timeout.is_zero() {
                b.timeout
            } else {
                self.timeout
            },
            memory: ByteSize(z(self.memory.0, b.memory.0)),
            cpu_seconds: z(self.cpu_seconds, b.cpu_seconds),
            cpu_quota_millis: if self.cpu_quota_millis == 0 {
                b.cpu_quota_millis
            } else {
                self.cpu_quota_millis
            },
            pids: if self.pids == 0 { b.pids } else { self.pids },
            file_size: ByteSize(z(self.file_size.0, b.file_size.0)),
            open_files: z(self.open_files, b.open_files),
            stdout_cap: ByteSize(z(self.stdout_cap.0, b.stdout_cap.0)),
            stderr_cap: ByteSize(z(self.stderr_cap.0, b.stderr_cap.0)),
            tmp_size: ByteSize(z(self.tmp_size.0, b.tmp_size.0)),
            output_size: ByteSize(z(self.output_size.0, b.output_size.0)),
        }
    }
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
    /// Bytes given to the program on standard input (digested with the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Vec<u8>>,
    /// Standard input is streamed by the caller while the program runs (a pipe, a
    /// terminal). Its bytes cannot be known in advance: the request says `stdin_stream:
    /// true` instead, so a fingerprint or an approval covers "some streamed input", never
    /// particular bytes. Exclusive with `stdin`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin_stream: bool,
    /// Run under a pseudo-terminal: stdin, stdout and stderr are one terminal (output
    /// arrives as one stream, as on a terminal). The window size travels with the stream.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tty: bool,
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
    /// Host paths bound into the sandbox (`--mount HOST:SANDBOX[:ro|rw]`), read-only unless
    /// a mount says `rw`. Checked by [`crate::mount::check_request`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<crate::mount::Mount>,
    /// Working directory inside the sandbox (`--workdir`); the workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// Unset (zero) limits take the configured defaults; see [`Limits::resolve`].
    #[serde(default = "Limits::unset")]
    pub limits: Limits,
    #[serde(default)]
    pub network: NetworkMode,
    /// Keep the temporary workspace after the run (for debugging).
    #[serde(default)]
    pub keep_workspace: bool,
    /// Allow executing files from writable places (otherwise they are `noexec`).
    #[serde(default)]
    pub allow_exec_in_writable: bool,
    /// The code context (a kernel that keeps its state between calls) the request runs in,
    /// instead of a fresh sandbox: its state decides the outcome, so it is a fact of the
    /// request (bound by the fingerprint, shown to an approver). Set by the front end that
    /// owns the context, never by the caller's request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// What the host directories the program sees read-only (the input directory and the
    /// read-only mounts) held when the request was admitted: host path -> a digest of the
    /// tree (`tree-v1:<sha256>`), or why it is not pinned (`unpinned: ...`). Filled by the
    /// gateway (a caller's value is replaced), so that an approval and an idempotency key
    /// cover what those directories hold, not only their names; checked again after an
    /// approval, before the run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned: BTreeMap<String, String>,
}

fn is_false(b: &bool) -> bool {
    !*b
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
            stdin_stream: false,
            tty: false,
            files: BTreeMap::new(),
            input_dir: None,
            output_dir: None,
            mounts: Vec::new(),
            workdir: None,
            limits: Limits::UNSET,
            network: NetworkMode::None,
            keep_workspace: false,
            allow_exec_in_writable: false,
            context: None,
            pinned: BTreeMap::new(),
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
            .field("stdin_stream", &self.stdin_stream)
            .field("tty", &self.tty)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .field("input_dir", &self.input_dir)
            .field("output_dir", &self.output_dir)
            .field("mounts", &self.mounts)
            .field("workdir", &self.workdir)
            .field("limits", &self.limits)
            .field("network", &self.network)
            .field("pinned", &self.pinned)
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
    /// How a warm pool served the run: `hit` (a pre-started sandbox) or `miss(<reason>)`
    /// (started cold, e.g. `miss(network)`). Absent when no pool was involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// The whole outcome of one run.
///
/// `stdout` and `stderr` are the bytes the program wrote (up to their caps), exactly. In
/// JSON each is a string: the text itself when it is valid UTF-8, else base64 with
/// `"stdout_encoding": "base64"` (resp. `stderr_encoding`); see [`crate::wire`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ExecResultWire", try_from = "ExecResultWire")]
pub struct ExecResult {
    pub sandbox_id: String,
    pub exit: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Total bytes the program wrote, captured or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub timed_out: bool,
    pub oom_killed: bool,
    /// Set when the run was cancelled (caller, kill switch); holds the reason.
    pub cancelled: Option<String>,
    /// The run's time in whole milliseconds (a floor of `duration_us`).
    pub duration_ms: u64,
    /// The run's time in microseconds, as the sandbox measured it: from the start of the
    /// run (workspace, cgroup, helper started or taken from a pool, plan, payload, helper
    /// reaped) to the end of its cleanup (output drained, cgroup and scratch directories
    /// removed). Results stored before this field read it as 0.
    pub duration_us: u64,
    pub usage: Usage,
    pub enforcement: Enforcement,
    /// Where the output files are (kept after the run).
    pub output_dir: Option<PathBuf>,
    /// Set when the workspace was kept.
    pub workspace: Option<PathBuf>,
    pub meter: Option<Meter>,
    /// Connections and requests the egress proxy refused.
    pub network_denials: u64,
    /// `host:port` of each refused target, once each (sorted).
    pub denied_hosts: Vec<String>,
    /// Set when output was left unread after the run ended: a pipe stayed open (a writer
    /// outside the run's process tree) past the drain's bound. Says why; `stdout`/`stderr`
    /// hold what arrived until then. `None`: both streams were read to their end.
    pub output_incomplete: Option<String>,
    /// Set when the program ran but its output files could not be copied out (too large,
    /// the host disk full): nothing of them is left on the host, while `stdout`, `stderr`
    /// and the exit status above are the program's own.
    pub copy_out_error: Option<CopyOutError>,
}

/// Why the output files of a run that ended could not be copied to the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyOutError {
    /// A stable code (`SBX_E1470` a cap, `SBX_E1459` an I/O error such as a full disk).
    pub code: String,
    /// Names the entry as seen inside (`/output/...`, control bytes and invalid UTF-8
    /// escaped), never a host staging path.
    pub message: String,
}

impl ExecResult {
    /// Standard output as text, invalid UTF-8 replaced (for display and tests).
    pub fn stdout_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.stdout)
    }
    /// Standard error as text, invalid UTF-8 replaced.
    pub fn stderr_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.stderr)
    }
}

/// The JSON form of [`ExecResult`]: byte fields as text or base64 with a flag.
#[derive(Serialize, Deserialize)]
struct ExecResultWire {
    sandbox_id: String,
    exit: ExitStatus,
    stdout: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stdout_encoding: Option<ByteEncoding>,
    stderr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stderr_encoding: Option<ByteEncoding>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    stdout_bytes: u64,
    stderr_bytes: u64,
    timed_out: bool,
    oom_killed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cancelled: Option<String>,
    duration_ms: u64,
    #[serde(default)]
    duration_us: u64,
    usage: Usage,
    enforcement: Enforcement,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workspace: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meter: Option<Meter>,
    #[serde(default)]
    network_denials: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    denied_hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_incomplete: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    copy_out_error: Option<CopyOutError>,
}

impl From<ExecResult> for ExecResultWire {
    fn from(r: ExecResult) -> Self {
        let (stdout, stdout_encoding) = wire::encode(&r.stdout);
        let (stderr, stderr_encoding) = wire::encode(&r.stderr);
        ExecResultWire {
            sandbox_id: r.sandbox_id,
            exit: r.exit,
            stdout,
            stdout_encoding,
            stderr,
            stderr_encoding,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            stdout_bytes: r.stdout_bytes,
            stderr_bytes: r.stderr_bytes,
            timed_out: r.timed_out,
            oom_killed: r.oom_killed,
            cancelled: r.cancelled,
            duration_ms: r.duration_ms,
            duration_us: r.duration_us,
            usage: r.usage,
            enforcement: r.enforcement,
            output_dir: r.output_dir,
            workspace: r.workspace,
            meter: r.meter,
            network_denials: r.network_denials,
            denied_hosts: r.denied_hosts,
            output_incomplete: r.output_incomplete,
            copy_out_error: r.copy_out_error,
        }
    }
}

impl TryFrom<ExecResultWire> for ExecResult {
    type Error = String;
    fn try_from(w: ExecResultWire) -> Result<Self, String> {
        Ok(ExecResult {
            sandbox_id: w.sandbox_id,
            exit: w.exit,
            stdout: wire::decode(w.stdout, w.stdout_encoding)?,
            stderr: wire::decode(w.stderr, w.stderr_encoding)?,
            stdout_truncated: w.stdout_truncated,
            stderr_truncated: w.stderr_truncated,
            stdout_bytes: w.stdout_bytes,
            stderr_bytes: w.stderr_bytes,
            timed_out: w.timed_out,
            oom_killed: w.oom_killed,
            cancelled: w.cancelled,
            duration_ms: w.duration_ms,
            duration_us: w.duration_us,
            usage: w.usage,
            enforcement: w.enforcement,
            output_dir: w.output_dir,
            workspace: w.workspace,
            meter: w.meter,
            network_denials: w.network_denials,
            denied_hosts: w.denied_hosts,
            output_incomplete: w.output_incomplete,
            copy_out_error: w.copy_out_error,
        })
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn streamed_stdin_is_in_the_request_as_a_flag_not_as_bytes() {
        let mut req = ExecRequest::new(["cat"]);
        req.stdin_stream = true;
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["stdin_stream"], true);
        assert!(v.get("stdin").is_none());
        let plain = serde_json::to_value(ExecRequest::new(["cat"])).unwrap();
        assert!(plain.get("stdin_stream").is_none() && plain.get("tty").is_none());
        let back: ExecRequest = serde_json::from_value(v).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn result_bytes_round_trip_through_json() {
        let r = ExecResult {
            sandbox_id: "s".into(),
            exit: ExitStatus::Code(0),
            stdout: vec![0x1f, 0x8b, 0, 0xff],
            stderr: b"warn\n".to_vec(),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_bytes: 4,
            stderr_bytes: 5,
            timed_out: false,
            oom_killed: false,
            cancelled: None,
            duration_ms: 1,
            duration_us: 1_250,
            usage: Usage::default(),
            enforcement: Enforcement::default(),
            output_dir: None,
            workspace: None,
            meter: None,
            network_denials: 0,
            denied_hosts: Vec::new(),
            output_incomplete: Some("stdout was still open".into()),
            copy_out_error: Some(CopyOutError {
                code: "SBX_E1459".into(),
                message: "no space".into(),
            }),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["output_incomplete"], "stdout was still open");
        assert_eq!(v["copy_out_error"]["code"], "SBX_E1459");
        assert_eq!(v["stdout"], "H4sA/w==");
        assert_eq!(v["stdout_encoding"], "base64");
        assert_eq!(v["stderr"], "warn\n");
        assert!(v.get("stderr_encoding").is_none());
        assert_eq!(v["duration_us"], 1_250);
        assert_eq!(serde_json::from_value::<ExecResult>(v).unwrap(), r);
    }

    #[test]
    fn a_result_stored_before_duration_us_still_reads() {
        let old = serde_json::json!({
            "sandbox_id": "s", "exit": {"code": 0}, "stdout": "", "stderr": "",
            "stdout_truncated": false, "stderr_truncated": false, "stdout_bytes": 0,
            "stderr_bytes": 0, "timed_out": false, "oom_killed": false, "duration_ms": 3,
            "usage": {}, "enforcement": {"tier": null}
        });
        let r: ExecResult = serde_json::from_value(old).unwrap();
        assert_eq!((r.duration_ms, r.duration_us), (3, 0));
    }
}
