//! The one internal record every operation produces, allowed or not.
//!
//! Audit events, spans and meters are renderings of this record; redaction runs once on
//! it before any renderer sees it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::decision::{Layer, RuleRef, Verdict};
use crate::exec::Enforcement;
use crate::money::Money;
use crate::tier::IsolationTier;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// Ran and exited 0.
    Ok,
    /// Ran and exited non-zero or by a signal.
    Failed,
    /// Stopped by a layer before running.
    Denied,
    TimedOut,
    OomKilled,
    Cancelled,
    /// Found without an outcome after a crash.
    Interrupted,
    /// Answered from the idempotency record without running.
    Replayed,
    /// The runtime could not do its job (and so denied).
    Error,
    /// A warning record (e.g. budget warn fraction crossed), not an operation outcome.
    Warning,
}

impl OperationStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            OperationStatus::Ok => "ok",
            OperationStatus::Failed => "failed",
            OperationStatus::Denied => "denied",
            OperationStatus::TimedOut => "timed_out",
            OperationStatus::OomKilled => "oom_killed",
            OperationStatus::Cancelled => "cancelled",
            OperationStatus::Interrupted => "interrupted",
            OperationStatus::Replayed => "replayed",
            OperationStatus::Error => "error",
            OperationStatus::Warning => "warning",
        }
    }
}

/// One record per operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub operation_id: String,
    pub ts: DateTime<Utc>,
    /// "exec" | "run_code" | "file_read" | "file_write" | "file_delete" | "net_connect" |
    /// "tool_call" | "budget_warning" | ...
    pub event: String,
    pub tool_name: String,
    pub tenant_id: Option<String>,
    pub session_id: Option<String>,
    pub agent_id: Option<String>,
    pub backend: String,
    pub isolation: Option<IsolationTier>,
    pub sandbox_id: Option<String>,
    pub code_sha256: Option<String>,
    pub argv: Option<Vec<String>>,
    /// A `tool_call`'s arguments (redacted like everything else; a large value is kept as
    /// its size and digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Only with `capture_code`; redacted like everything else.
    pub code: Option<String>,
    pub path: Option<String>,
    /// The mounts of an exec or run_code request, as `HOST:SANDBOX:MODE` (host paths
    /// resolved), and its working directory inside the sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub network_denials: u64,
    /// `host:port` of each target the egress proxy refused during this operation (once
    /// each, sorted): an exec's or a browse's unlisted hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_hosts: Vec<String>,
    /// Output left unread after the run ended, and why (see `ExecResult.output_incomplete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_incomplete: Option<String>,
    pub status: OperationStatus,
    pub verdict: Verdict,
    pub layer: Layer,
    pub rules: Vec<RuleRef>,
    pub reason: String,
    pub error_code: Option<String>,
    pub cost_reserved: Option<Money>,
    pub cost_settled: Option<Money>,
    pub enforcement: Option<Enforcement>,
    pub fingerprint: Option<String>,
    pub idempotency_key: Option<String>,
    /// How long idempotency outcomes are retained, in seconds.
    pub idempotency_retention_s: Option<u64>,
    pub replayed: bool,
    /// For a replay: how the operation it replays ended (its `error_code` is copied too),
    /// so a front end answers a replay the way it answered the original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_status: Option<OperationStatus>,
    /// Attempts made (1 unless retried).
    pub attempts: u32,
    pub approval_id: Option<String>,
    pub approver: Option<String>,
    pub approval_wait_ms: Option<u64>,
    pub latency_budget_violated: bool,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    /// Free-form labels propagated from the request metadata (tenant-visible).
    pub labels: std::collections::BTreeMap<String, String>,
}

impl OperationRecord {
    /// A fresh record with nothing decided yet (denied at admit until filled in).
    pub fn new(operation_id: impl Into<String>, event: impl Into<String>) -> Self {
        let event = event.into();
        OperationRecord {
            operation_id: operation_id.into(),
            ts: Utc::now(),
            tool_name: event.clone(),
            event,
            tenant_id: None,
            session_id: None,
            agent_id: None,
            backend: String::new(),
            isolation: None,
            sandbox_id: None,
            code_sha256: None,
            argv: None,
            arguments: None,
            code: None,
            path: None,
            mounts: Vec::new(),
            workdir: None,
            exit_code: None,
            signal: None,
            duration_ms: 0,
            bytes_in: 0,
            bytes_out: 0,
            network_denials: 0,
            denied_hosts: Vec::new(),
            output_incomplete: None,
            status: OperationStatus::Denied,
            verdict: Verdict::Deny,
            layer: Layer::Admit,
            rules: Vec::new(),
            reason: String::new(),
            error_code: None,
            cost_reserved: None,
            cost_settled: None,
            enforcement: None,
            fingerprint: None,
            idempotency_key: None,
            idempotency_retention_s: None,
            replayed: false,
            replayed_status: None,
            attempts: 1,
            approval_id: None,
            approver: None,
            approval_wait_ms: None,
            latency_budget_violated: false,
            trace_id: None,
            span_id: None,
            labels: Default::default(),
        }
    }
}

/// Post-hoc cost attribution (seed `002_*`). Amounts are decimal, never float.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostEntry {
    pub object_id: String,
    pub description: String,
    pub interval_start: DateTime<Utc>,
    pub cost_usd: Money,
    pub labels: std::collections::BTreeMap<String, String>,
}
