//! `AuditEvent`: the audit rendering of an [`OperationRecord`], and `meter_of`, the metering
//! rendering. Both are pure functions of the (already redacted) record.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sandboxio_core::{
    Enforcement, IsolationTier, Layer, Meter, Money, OperationRecord, OperationStatus, RuleRef,
    Verdict,
};
use serde::{Deserialize, Serialize};

use crate::error::AuditError;

/// One audit event. Every sink renders the same JSON line: [`AuditEvent::as_json`].
///
/// Field order is the seed's (`ts` .. `network_denials`), then the decision, cost,
/// enforcement, reliability and approval fields, then `code` (present only with
/// `capture_code`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub ts: DateTime<Utc>,
    /// "exec" | "run_code" | "file_read" | "file_write" | ...
    pub event: String,
    #[serde(default)]
    pub sandbox_id: Option<String>,
    pub backend: String,
    #[serde(default)]
    pub isolation: Option<IsolationTier>,
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub code_sha256: Option<String>,
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Blocked egress attempts, where the backend reports them.
    pub network_denials: u64,
    /// `host:port` of each refused egress target (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_hosts: Vec<String>,

    pub operation_id: String,
    pub tool_name: String,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub signal: Option<i32>,
    pub status: OperationStatus,
    /// The verdict of the chain.
    pub decision: Verdict,
    /// The layer that decided.
    pub layer: Layer,
    #[serde(default)]
    pub rules: Vec<RuleRef>,
    pub reason: String,
    #[serde(default)]
    pub error_code: Option<String>,
    /// Decimal strings, never floats.
    #[serde(default)]
    pub cost_reserved: Option<Money>,
    #[serde(default)]
    pub cost_settled: Option<Money>,
    /// The isolation actually achieved.
    #[serde(default)]
    pub enforcement: Option<Enforcement>,
    /// Output left unread after the run ended, and why (absent: read to its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_incomplete: Option<String>,
    #[serde(default)]
    pub fingerprint: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub replayed: bool,
    pub attempts: u32,
    #[serde(default)]
    pub approval_id: Option<String>,
    #[serde(default)]
    pub approver: Option<String>,
    #[serde(default)]
    pub approval_wait_ms: Option<u64>,
    #[serde(default)]
    pub latency_budget_violated: bool,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub span_id: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A `tool_call`'s arguments, redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Only with `capture_code`; redacted like everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl AuditEvent {
    /// Renders the event from a record. Pass the REDACTED record: the `Auditor` does.
    pub fn from_record(rec: &OperationRecord, capture_code: bool) -> AuditEvent {
        AuditEvent {
            ts: rec.ts,
            event: rec.event.clone(),
            sandbox_id: rec.sandbox_id.clone(),
            backend: rec.backend.clone(),
            isolation: rec.isolation,
            tenant_id: rec.tenant_id.clone(),
            session_id: rec.session_id.clone(),
            code_sha256: rec.code_sha256.clone(),
            argv: rec.argv.clone(),
            exit_code: rec.exit_code,
            duration_ms: rec.duration_ms,
            bytes_in: rec.bytes_in,
            bytes_out: rec.bytes_out,
            network_denials: rec.network_denials,
            denied_hosts: rec.denied_hosts.clone(),
            operation_id: rec.operation_id.clone(),
            tool_name: rec.tool_name.clone(),
            agent_id: rec.agent_id.clone(),
            path: rec.path.clone(),
            signal: rec.signal,
            status: rec.status,
            decision: rec.verdict,
            layer: rec.layer,
            rules: rec.rules.clone(),
            reason: rec.reason.clone(),
            error_code: rec.error_code.clone(),
            cost_reserved: rec.cost_reserved,
            cost_settled: rec.cost_settled,
            enforcement: rec.enforcement.clone(),
            output_incomplete: rec.output_incomplete.clone(),
            fingerprint: rec.fingerprint.clone(),
            idempotency_key: rec.idempotency_key.clone(),
            replayed: rec.replayed,
            attempts: rec.attempts,
            approval_id: rec.approval_id.clone(),
            approver: rec.approver.clone(),
            approval_wait_ms: rec.approval_wait_ms,
            latency_budget_violated: rec.latency_budget_violated,
            trace_id: rec.trace_id.clone(),
            span_id: rec.span_id.clone(),
            labels: rec.labels.clone(),
            arguments: rec.arguments.clone(),
            code: if capture_code { rec.code.clone() } else { None },
        }
    }

    /// The one JSON line (without newline) every sink writes.
    pub fn as_json(&self) -> Result<String, AuditError> {
        serde_json::to_string(self).map_err(|e| AuditError::Render { why: e.to_string() })
    }
}

/// The metering rendering of a record (seed `002_*`: duration and backend, no cost).
pub fn meter_of(rec: &OperationRecord) -> Meter {
    Meter {
        duration_ms: rec.duration_ms,
        backend: rec.backend.clone(),
        pool: None,
    }
}
