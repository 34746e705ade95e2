//! The typed configuration. Every security-relevant struct denies unknown keys.

use std::path::PathBuf;

use sandboxio_core::exec::defaults;
use sandboxio_core::{ByteSize, HumanDuration, IsolationTier, Limits, NetworkMode};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub sandbox: SandboxSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub network: NetworkSection,
    #[serde(default)]
    pub policy: PolicySection,
    #[serde(default)]
    pub state: StateSection,
    #[serde(default)]
    pub audit: AuditSection,
    #[serde(default)]
    pub telemetry: TelemetrySection,
    #[serde(default)]
    pub approvals: ApprovalsSection,
    /// `sandboxio serve`: tenant quotas and the approval webhook.
    #[serde(default)]
    pub server: crate::server::ServerSection,
    /// MCP servers proxied through the chain (`[[mcp.upstream]]`).
    #[serde(default, skip_serializing_if = "crate::mcp::McpSection::is_empty")]
    pub mcp: crate::mcp::McpSection,
    /// The E2B-compatible API of `sandboxio serve` (`docs/E2B.md`).
    #[serde(default)]
    pub e2b: crate::e2b::E2bSection,
    /// Budget ceilings, rate card and latency budgets; validated by the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<toml::Table>,
    /// Rate limits by action; validated by the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<toml::Table>,
    /// Secrets injected at the edge (`[[secrets]]`): the sandbox sees a placeholder, the
    /// egress proxy puts the value into requests to the bound hosts; validated by the
    /// gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretSection>,
}

/// One `[[secrets]]`: the variable `name` holds a placeholder inside the sandbox; the
/// egress proxy replaces it with the value, over TLS, for the bound hosts only. Exactly one
/// source: `env`, `file` or `stored`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSection {
    /// The variable the sandbox sees (an environment variable name).
    pub name: String,
    /// The supervisor's environment variable holding the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file holding the value (one trailing newline is not part of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// The value sealed in the state directory by `sandboxio secrets set NAME`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stored: bool,
    /// Host globs the value may be sent to (`api.example.com`, `*.example.com`); for a
    /// stored secret, empty means the hosts it was sealed with.
    #[serde(default)]
    pub hosts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// Tier used when a request names none.
    #[serde(default = "default_tier")]
    pub tier: IsolationTier,
    /// Allow the weaker `landlock` tier when user namespaces are unavailable.
    #[serde(default)]
    pub allow_landlock_fallback: bool,
    /// Keep temporary workspaces after runs.
    #[serde(default)]
    pub keep_workspace: bool,
    /// Where temporary workspaces are created (default: the system temp dir).
    #[serde(default)]
    pub work_root: Option<PathBuf>,
    /// Host environment variables passed into sandboxes.
    #[serde(default = "default_env_allowlist")]
    pub env_allowlist: Vec<String>,
    /// A cgroup2 directory this user may write, to create sandbox cgroups under (default:
    /// root's hierarchies, or the subtree systemd delegated to this user).
    #[serde(default)]
    pub cgroup_root: Option<PathBuf>,
}

fn default_tier() -> IsolationTier {
    IsolationTier::Namespace
}

fn default_env_allowlist() -> Vec<String> {
    defaults::ENV_ALLOWLIST
        .iter()
        .map(|s| s.to_string())
        .collect()
}

impl Default for SandboxSection {
    fn default() -> Self {
        SandboxSection {
            tier: default_tier(),
            allow_landlock_fallback: false,
            keep_workspace: false,
            work_root: None,
            env_allowlist: default_env_allowlist(),
            cgroup_root: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    #[serde(default = "d_timeout")]
    pub timeout: HumanDuration,
    #[serde(default = "d_memory")]
    pub memory: ByteSize,
    #[serde(default = "d_cpu_seconds")]
    pub cpu_seconds: u64,
    /// CPU quota in thousandths of a core (1000 = one core).
    #[serde(default = "d_cpu_millis")]
    pub cpu_millis: u32,
    #[serde(default = "d_pids")]
    pub pids: u32,
    #[serde(default = "d_file_size")]
    pub file_size: ByteSize,
    #[serde(default = "d_open_files")]
    pub open_files: u64,
    #[serde(default = "d_stdout_cap")]
    pub stdout_cap: ByteSize,
    #[serde(default = "d_stderr_cap")]
    pub stderr_cap: ByteSize,
    #[serde(default = "d_tmp_size")]
    pub tmp_size: ByteSize,
    #[serde(default = "d_output_size")]
    pub output_size: ByteSize,
    /// `[limits.max]`: ceilings no request may exceed (a request above one is denied).
    #[serde(default)]
    pub max: LimitsMaxSection,
}

/// `[limits.max]`: the ceilings of every limit. Defaults: `sandboxio_core::exec::defaults::MAX_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsMaxSection {
    #[serde(default = "m_timeout")]
    pub timeout: HumanDuration,
    #[serde(default = "m_memory")]
    pub memory: ByteSize,
    #[serde(default = "m_cpu_seconds")]
    pub cpu_seconds: u64,
    #[serde(default = "m_cpu_millis")]
    pub cpu_millis: u32,
    #[serde(default = "m_pids")]
    pub pids: u32,
    #[serde(default = "m_file_size")]
    pub file_size: ByteSize,
    #[serde(default = "m_open_files")]
    pub open_files: u64,
    #[serde(default = "m_stdout_cap")]
    pub stdout_cap: ByteSize,
    #[serde(default = "m_stderr_cap")]
    pub stderr_cap: ByteSize,
    #[serde(default = "m_tmp_size")]
    pub tmp_size: ByteSize,
    #[serde(default = "m_output_size")]
    pub output_size: ByteSize,
}

fn m_timeout() -> HumanDuration {
    HumanDuration(defaults::MAX_TIMEOUT)
}
fn m_memory() -> ByteSize {
    defaults::MAX_MEMORY
}
fn m_cpu_seconds() -> u64 {
    defaults::MAX_CPU_SECONDS
}
fn m_cpu_millis() -> u32 {
    defaults::MAX_CPU_QUOTA_MILLIS
}
fn m_pids() -> u32 {
    defaults::MAX_PIDS
}
fn m_file_size() -> ByteSize {
    defaults::MAX_FILE_SIZE
}
fn m_open_files() -> u64 {
    defaults::MAX_OPEN_FILES
}
fn m_stdout_cap() -> ByteSize {
    defaults::MAX_STDOUT_CAP
}
fn m_stderr_cap() -> ByteSize {
    defaults::MAX_STDERR_CAP
}
fn m_tmp_size() -> ByteSize {
    defaults::MAX_TMP_SIZE
}
fn m_output_size() -> ByteSize {
    defaults::MAX_OUTPUT_SIZE
}

impl Default for LimitsMaxSection {
    fn default() -> Self {
        LimitsMaxSection {
            timeout: m_timeout(),
            memory: m_memory(),
            cpu_seconds: m_cpu_seconds(),
            cpu_millis: m_cpu_millis(),
            pids: m_pids(),
            file_size: m_file_size(),
            open_files: m_open_files(),
            stdout_cap: m_stdout_cap(),
            stderr_cap: m_stderr_cap(),
            tmp_size: m_tmp_size(),
            output_size: m_output_size(),
        }
    }
}

impl LimitsMaxSection {
    pub fn to_limits(&self) -> Limits {
        Limits {
            timeout: self.timeout.0,
            memory: self.memory,
            cpu_seconds: self.cpu_seconds,
            cpu_quota_millis: self.cpu_millis,
            pids: self.pids,
            file_size: self.file_size,
            open_files: self.open_files,
            stdout_cap: self.stdout_cap,
            stderr_cap: self.stderr_cap,
            tmp_size: self.tmp_size,
            output_size: self.output_size,
        }
    }
}

fn d_timeout() -> HumanDuration {
    HumanDuration(defaults::TIMEOUT)
}
fn d_memory() -> ByteSize {
    defaults::MEMORY
}
fn d_cpu_seconds() -> u64 {
    defaults::CPU_SECONDS
}
fn d_cpu_millis() -> u32 {
    defaults::CPU_QUOTA_MILLIS
}
fn d_pids() -> u32 {
    defaults::PIDS
}
fn d_file_size() -> ByteSize {
    defaults::FILE_SIZE
}
fn d_open_files() -> u64 {
    defaults::OPEN_FILES
}
fn d_stdout_cap() -> ByteSize {
    defaults::STDOUT_CAP
}
fn d_stderr_cap() -> ByteSize {
    defaults::STDERR_CAP
}
fn d_tmp_size() -> ByteSize {
    defaults::TMP_SIZE
}
fn d_output_size() -> ByteSize {
    defaults::OUTPUT_SIZE
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            timeout: d_timeout(),
            memory: d_memory(),
            cpu_seconds: d_cpu_seconds(),
            cpu_millis: d_cpu_millis(),
            pids: d_pids(),
            file_size: d_file_size(),
            open_files: d_open_files(),
            stdout_cap: d_stdout_cap(),
            stderr_cap: d_stderr_cap(),
            tmp_size: d_tmp_size(),
            output_size: d_output_size(),
            max: LimitsMaxSection::default(),
        }
    }
}

impl LimitsSection {
    pub fn to_limits(&self) -> Limits {
        Limits {
            timeout: self.timeout.0,
            memory: self.memory,
            cpu_seconds: self.cpu_seconds,
            cpu_quota_millis: self.cpu_millis,
            pids: self.pids,
            file_size: self.file_size,
            open_files: self.open_files,
            stdout_cap: self.stdout_cap,
            stderr_cap: self.stderr_cap,
            tmp_size: self.tmp_size,
            output_size: self.output_size,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// `none` (default), `allowlist` or `full`.
    #[serde(default)]
    pub mode: NetworkModeName,
    /// `host:port` patterns for `allowlist` (`host` alone means ports 80 and 443,
    /// `host:*` any port, `*.example.com` its subdomains).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Finer egress rules (host globs, ports, schemes, HTTP methods and path prefixes,
    /// tenants); a connection is allowed by the first rule or `allow` pattern it matches.
    #[serde(default, rename = "rule", skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<EgressRuleSection>,
    /// Name servers (`ip:port`) the egress proxy asks; empty: the host's resolver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolver: Vec<String>,
    /// Addresses or CIDR blocks the SSRF guard lets through although they are private,
    /// loopback, link-local, CGNAT or metadata addresses (default: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_private: Vec<String>,
    /// A PEM file of extra CA certificates the egress proxy trusts (besides the system's)
    /// when it verifies an upstream it injects a secret for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<PathBuf>,
}

/// One `[[network.rule]]`: every list left empty matches anything except `ports`
/// (empty: 80 and 443). Methods and paths can only be checked on plain HTTP, so a rule
/// that names them never matches an HTTPS tunnel.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRuleSection {
    /// Host globs: `pypi.org`, `*.npmjs.org` (subdomains), `*` (any host).
    pub host: Vec<String>,
    #[serde(default)]
    pub ports: Vec<u16>,
    /// `http` (plain, forwarded) and/or `https` (a CONNECT tunnel).
    #[serde(default)]
    pub schemes: Vec<String>,
    /// HTTP methods (plain HTTP only).
    #[serde(default)]
    pub methods: Vec<String>,
    /// Path prefixes (plain HTTP only).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Tenants this rule applies to (globs like `acme-*`); empty: every tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkModeName {
    #[default]
    None,
    Allowlist,
    Full,
}

impl Default for NetworkSection {
    fn default() -> Self {
        NetworkSection {
            mode: NetworkModeName::None,
            allow: Vec::new(),
            rules: Vec::new(),
            resolver: Vec::new(),
            allow_private: Vec::new(),
            upstream_ca: None,
        }
    }
}

impl NetworkSection {
    pub fn to_mode(&self) -> NetworkMode {
        match self.mode {
            NetworkModeName::None => NetworkMode::None,
            NetworkModeName::Allowlist => NetworkMode::Allowlist {
                allow: self.allow.clone(),
            },
            NetworkModeName::Full => NetworkMode::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Policy files, composed in order. Empty means the built-in default policy.
    #[serde(default)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// Directory for the state database and audit trail. Default: `$SBX_STATE_DIR`, else
    /// `/var/lib/sandboxio` for root, else `$XDG_STATE_HOME/sandboxio`.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// How long finished journal rows and decided approvals are kept (default 7d); expired
    /// idempotency keys are deleted at the same time.
    #[serde(default)]
    pub retention: Option<HumanDuration>,
    /// A shared store for several replicas (PostgreSQL): `postgres://...`. Unset: the
    /// SQLite database in the state directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<crate::StateUrl>,
    /// Connections each process keeps to the shared store (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::PoolSize>,
    /// How long a replica's lease on its running work lasts without a heartbeat (default
    /// 10s, 2s to 10m); past it, other replicas mark that work interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<HumanDuration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSinkFailure {
    #[default]
    Warn,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// fsync after every record (durable, slowest).
    #[default]
    Always,
    /// Leave flushing to the OS.
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Audit trail file (JSON lines, hash-chained). Default: `<state dir>/audit.jsonl`.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub on_sink_failure: OnSinkFailure,
    /// Add the (redacted) code to audit events and spans.
    #[serde(default)]
    pub capture_code: bool,
    #[serde(default)]
    pub fsync: FsyncPolicy,
    /// Also log each event as a JSON line through the logger.
    #[serde(default)]
    pub log_events: bool,
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            file: None,
            on_sink_failure: OnSinkFailure::Warn,
            capture_code: false,
            fsync: FsyncPolicy::Always,
            log_events: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Same as `SBX_DEBUG=1`: raise log verbosity.
    #[serde(default)]
    pub debug: bool,
}

/// How long an `ask` waits for a person by default (`[approvals] timeout`).
pub const DEFAULT_APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);
/// The longest an `ask` may wait: a pending request holds its budget reservation meanwhile.
pub const MAX_APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Whether `d` is an acceptable approval wait (at least 1 s, at most a day).
pub fn check_approval_timeout(d: std::time::Duration) -> Result<(), String> {
    if d < std::time::Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    if d > MAX_APPROVAL_TIMEOUT {
        return Err("must be at most 24h".into());
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSection {
    /// How long a run waits for a person to approve an `ask` before it is denied.
    #[serde(default = "d_approval_timeout", deserialize_with = "approval_timeout")]
    pub timeout: HumanDuration,
}

fn d_approval_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_APPROVAL_TIMEOUT)
}

fn approval_timeout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HumanDuration, D::Error> {
    let t = HumanDuration::deserialize(d)?;
    check_approval_timeout(t.0).map_err(serde::de::Error::custom)?;
    Ok(t)
}

impl Default for ApprovalsSection {
    fn default() -> Self {
        ApprovalsSection {
            timeout: d_approval_timeout(),
        }
    }
}
