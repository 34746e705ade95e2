//! The API's request and response bodies. Requests refuse unknown fields.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sandboxio_core::{ByteSize, HumanDuration, IsolationTier, Language, Limits};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ServerError;
use crate::sessions::Session;

/// Resource limits of a sandbox; each absent field keeps the safe default.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    /// Wall-clock timeout of each command, e.g. `30s`.
    #[schema(value_type = Option<String>, example = "30s")]
    pub timeout: Option<HumanDuration>,
    /// Memory, e.g. `512MiB`.
    #[schema(value_type = Option<String>, example = "512MiB")]
    pub memory: Option<ByteSize>,
    pub cpu_seconds: Option<u64>,
    /// CPU quota in thousandths of a core.
    pub cpu_quota_millis: Option<u32>,
    pub pids: Option<u32>,
    #[schema(value_type = Option<String>)]
    pub file_size: Option<ByteSize>,
    #[schema(value_type = Option<String>)]
    pub stdout_cap: Option<ByteSize>,
    #[schema(value_type = Option<String>)]
    pub stderr_cap: Option<ByteSize>,
    #[schema(value_type = Option<String>)]
    pub tmp_size: Option<ByteSize>,
}

/// The fewest processes a sandbox can run a command with: its init and the command (a
/// `pids` limit below it fails every exec in the sandbox at setup).
pub const MIN_PIDS: u32 = 2;

impl LimitsBody {
    /// A sandbox's limits: these where set, else the configured `[limits]` (the built-in
    /// defaults where it sets none), each checked against its `[limits.max]` ceiling.
    /// Each is what every command in the sandbox is held to, as the sandbox's view shows. A
    /// zero (which would not mean "no limit") and too few `pids` are the caller's mistakes
    /// (422 `SBX_E1810`), as is a limit above its ceiling.
    pub fn resolve(&self, default: &Limits, max: &Limits) -> Result<Limits, ServerError> {
        let zero = |field: &'static str| {
            Err(ServerError::BadValue {
                field,
                why: "must be more than 0 (leave it out for the server's default)".into(),
            })
        };
        let is_zero = |b: Option<ByteSize>| b.is_some_and(|b| b.0 == 0);
        if self.timeout.is_some_and(|t| t.as_duration().is_zero()) {
            return zero("limits.timeout");
        }
        if is_zero(self.memory) {
            return zero("limits.memory");
        }
        if self.cpu_seconds == Some(0) {
            return zero("limits.cpu_seconds");
        }
        if self.cpu_quota_millis == Some(0) {
            return zero("limits.cpu_quota_millis");
        }
        if is_zero(self.file_size) {
            return zero("limits.file_size");
        }
        if is_zero(self.stdout_cap) {
            return zero("limits.stdout_cap");
        }
        if is_zero(self.stderr_cap) {
            return zero("limits.stderr_cap");
        }
        if is_zero(self.tmp_size) {
            return zero("limits.tmp_size");
        }
        if let Some(p) = self.pids {
            if p < MIN_PIDS {
                return Err(ServerError::BadValue {
                    field: "limits.pids",
                    why: format!(
                        "must be at least {MIN_PIDS} (the sandbox's init and the command)"
                    ),
                });
            }
        }
        self.apply(default.clone())
            .resolve(default, max)
            .map_err(|e| ServerError::BadValue {
                field: "limits",
                why: e.to_string(),
            })
    }

    pub fn apply(&self, mut l: Limits) -> Limits {
        if let Some(v) = self.timeout {
            l.timeout = v.as_duration();
        }
        if let Some(v) = self.memory {
            l.memory = v;
        }
        if let Some(v) = self.cpu_seconds {
            l.cpu_seconds = v;
        }
        if let Some(v) = self.cpu_quota_millis {
            l.cpu_quota_millis = v;
        }
        if let Some(v) = self.pids {
            l.pids = v;
        }
        if let Some(v) = self.file_size {
            l.file_size = v;
        }
        if let Some(v) = self.stdout_cap {
            l.stdout_cap = v;
        }
        if let Some(v) = self.stderr_cap {
            l.stderr_cap = v;
        }
        if let Some(v) = self.tmp_size {
            l.tmp_size = v;
        }
        l
    }
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// `namespace` (default), `process` or `landlock`; the policy decides what is allowed.
    #[schema(value_type = Option<String>, example = "namespace")]
    pub tier: Option<IsolationTier>,
    pub limits: Option<LimitsBody>,
    /// Closed after this long without an operation, e.g. `10m`.
    #[schema(value_type = Option<String>, example = "10m")]
    pub idle_timeout: Option<HumanDuration>,
    /// Closed this long after creation unless extended, e.g. `1h`.
    #[schema(value_type = Option<String>, example = "1h")]
    pub lifetime: Option<HumanDuration>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Environment of every command run in it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxView {
    pub id: String,
    pub tenant: String,
    #[schema(value_type = String)]
    pub tier: IsolationTier,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub last_active_at: DateTime<Utc>,
    pub idle_timeout_s: u64,
    /// `running` or `paused` (nothing runs in a paused sandbox; its files stay).
    pub state: String,
    pub paused_at: Option<DateTime<Utc>>,
    /// When a restarted server restored it (what ran in it then did not survive).
    pub restored_at: Option<DateTime<Utc>>,
    /// Operations running in it now.
    pub running: usize,
    pub labels: BTreeMap<String, String>,
    /// The names of its environment variables (values are never returned).
    pub env: Vec<String>,
    #[schema(value_type = Object)]
    pub limits: Limits,
}

impl SandboxView {
    pub fn of(s: &Session) -> SandboxView {
        SandboxView {
            id: s.id.clone(),
            tenant: s.tenant.clone(),
            tier: s.spec.tier,
            created_at: s.created_at,
            expires_at: s.expires_at(),
            last_active_at: s.last_active(),
            idle_timeout_s: s.spec.idle_timeout.as_secs(),
            state: s.state().to_string(),
            paused_at: s.paused_at(),
            restored_at: s.restored_at,
            running: s.busy(),
            labels: s.spec.labels.clone(),
            env: s.spec.env.keys().cloned().collect(),
            limits: s.spec.limits.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxView>,
    /// Sandboxes a restart could not restore, with the reason (until deleted).
    #[serde(default)]
    pub lost: Vec<crate::manifest::Lost>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// How much longer it may live, e.g. `30m` (capped by the server's maximum lifetime).
    #[schema(value_type = String, example = "30m")]
    pub by: HumanDuration,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub argv: Vec<String>,
    /// Added to (and overriding) the sandbox's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Standard input: text, or base64 with `stdin_encoding: "base64"` (any bytes).
    pub stdin: Option<String>,
    /// `utf8` (the default: `stdin` is the text itself) or `base64`, as the answer's
    /// `stdout_encoding`.
    #[schema(value_type = Option<String>, example = "base64")]
    pub stdin_encoding: Option<sandboxio_core::wire::ByteEncoding>,
    /// This command's timeout, e.g. `5s` (at most the server's request timeout).
    #[schema(value_type = Option<String>)]
    pub timeout: Option<HumanDuration>,
    /// Same key and same request: the recorded outcome; different request: an error.
    pub idempotency_key: Option<String>,
    /// Why the agent wants this; shown to approvers.
    pub rationale: Option<String>,
    /// Answer at once with the process (201) and let it run; read its output and outcome
    /// at `/v1/sandboxes/{id}/processes/{pid}`, kill it with `DELETE` there.
    #[serde(default)]
    pub background: bool,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeBody {
    #[schema(value_type = String, example = "python")]
    pub language: Language,
    pub code: String,
    /// Added to (and overriding) the sandbox's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Standard input: text, or base64 with `stdin_encoding: "base64"` (any bytes).
    pub stdin: Option<String>,
    /// `utf8` (the default: `stdin` is the text itself) or `base64`, as the answer's
    /// `stdout_encoding`.
    #[schema(value_type = Option<String>, example = "base64")]
    pub stdin_encoding: Option<sandboxio_core::wire::ByteEncoding>,
    /// This command's timeout, e.g. `5s` (at most the server's request timeout).
    #[schema(value_type = Option<String>)]
    pub timeout: Option<HumanDuration>,
    /// Same key and same request: the recorded outcome; different request: an error.
    pub idempotency_key: Option<String>,
    /// Why the agent wants this; shown to approvers.
    pub rationale: Option<String>,
    /// Answer at once with the process (201) and let it run.
    #[serde(default)]
    pub background: bool,
}

/// Fields shared by exec and run_code.
#[derive(Debug, Clone, Default)]
pub struct RunCommon {
    /// Added to (and overriding) the sandbox's environment.
    pub env: BTreeMap<String, String>,
    /// Standard input: text, or base64 when `stdin_encoding` says so.
    pub stdin: Option<String>,
    pub stdin_encoding: Option<sandboxio_core::wire::ByteEncoding>,
    /// This command's timeout, e.g. `5s` (at most the server's request timeout).
    pub timeout: Option<HumanDuration>,
    /// Same key and same request: the recorded outcome; different request: an error.
    pub idempotency_key: Option<String>,
    /// Why the agent wants this; shown to approvers.
    pub rationale: Option<String>,
}

impl ExecBody {
    pub fn common(&self) -> RunCommon {
        RunCommon {
            env: self.env.clone(),
            stdin: self.stdin.clone(),
            stdin_encoding: self.stdin_encoding,
            timeout: self.timeout,
            idempotency_key: self.idempotency_key.clone(),
            rationale: self.rationale.clone(),
        }
    }
}

impl RunCodeBody {
    pub fn common(&self) -> RunCommon {
        RunCommon {
            env: self.env.clone(),
            stdin: self.stdin.clone(),
            stdin_encoding: self.stdin_encoding,
            timeout: self.timeout,
            idempotency_key: self.idempotency_key.clone(),
            rationale: self.rationale.clone(),
        }
    }
}

impl RunCommon {
    pub fn key(&self) -> Result<Option<sandboxio_core::IdempotencyKey>, ServerError> {
        self.idempotency_key
            .clone()
            .map(sandboxio_core::IdempotencyKey::new)
            .transpose()
            .map_err(|e| ServerError::BadValue {
                field: "idempotency_key",
                why: e.to_string(),
            })
    }
}

/// The answer to an operation that ran (or replayed): the record and the result.
// Borrowed: the answer is written straight from them, without a JSON tree of both first.
#[derive(Debug, Serialize, ToSchema)]
pub struct OutcomeView<'a> {
    #[schema(value_type = Object)]
    pub record: &'a sandboxio_core::OperationRecord,
    #[schema(value_type = Option<Object>)]
    pub result: Option<&'a sandboxio_core::ExecResult>,
    #[schema(value_type = Option<Object>)]
    pub output: Option<&'a serde_json::Value>,
}

/// Where the path of a file operation goes.
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    /// Relative to the sandbox's workspace.
    pub path: String,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DirQuery {
    /// A directory relative to the workspace (its root when absent).
    pub path: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileStat {
    pub path: String,
    pub name: String,
    pub is_dir: bool,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileList {
    pub path: String,
    pub entries: Vec<FileStat>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MintToken {
    /// A subset of the minting key's scopes; `exec` and `run_code` cannot be combined with
    /// `dir`.
    pub scopes: Vec<String>,
    /// Confine file operations to this directory of the workspace.
    pub dir: Option<String>,
    /// How long it lives, e.g. `15m` (at most 24h).
    #[schema(value_type = String, example = "15m")]
    pub ttl: HumanDuration,
    #[serde(default)]
    pub label: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MintedToken {
    pub id: String,
    /// Shown once.
    pub token: String,
    pub sandbox: String,
    pub scopes: Vec<String>,
    pub dir: Option<String>,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Seconds to wait for a change (at most 60).
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsQuery {
    /// `pending` (default), `approved`, `denied`, `expired`, `used` or `all`.
    pub state: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApprovalView {
    pub id: String,
    pub state: String,
    pub reason: String,
    pub rationale: String,
    /// The operation asked for (redacted JSON).
    #[schema(value_type = Object)]
    pub operation: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
}

impl ApprovalView {
    pub fn of(a: sandboxio_gateway::store::Approval) -> ApprovalView {
        ApprovalView {
            id: a.id,
            state: a.state.as_str().to_string(),
            reason: a.reason,
            rationale: a.rationale,
            operation: serde_json::from_str(&a.operation).unwrap_or(serde_json::Value::Null),
            created_at: a.created_at,
            expires_at: a.expires_at,
            decided_by: a.decided_by,
            decided_at: a.decided_at,
            decision_reason: a.decision_reason,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalView>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KillBody {
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct KillView {
    pub engaged: bool,
    pub reason: Option<String>,
    pub by: Option<String>,
    pub at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
}
