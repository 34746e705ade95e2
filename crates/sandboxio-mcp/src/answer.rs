//! The chain's outcome as an MCP tool result. A program that ran is a result whatever its
//! exit status (the agent reads `exit_code`); a call a layer stopped, or one that failed,
//! is a tool error whose structured content names the layer, the rules, the reason, the
//! code and, for an ask, the approval.

use rmcp::model::CallToolResult;
use sandboxio_core::{ErrorCode, ExitStatus, Layer, OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::Outcome;
use serde::Serialize;

use crate::args::{Denial, FileOutput, RunOutput};
use crate::error::McpError;

/// The denial a record describes (for a call that did not produce its result).
pub fn denial(rec: &OperationRecord) -> Denial {
    Denial {
        code: rec
            .error_code
            .clone()
            .unwrap_or_else(|| default_code(rec).to_string()),
        layer: rec.layer.as_str().to_string(),
        rules: rec.rules.iter().map(|r| r.to_string()).collect(),
        reason: rec.reason.clone(),
        approval_id: rec.approval_id.clone(),
        operation_id: Some(rec.operation_id.clone()),
    }
}

/// A record without an error code was stopped by policy (the only layer that decides
/// without one) or failed in the sandbox.
fn default_code(rec: &OperationRecord) -> &'static str {
    match (rec.layer, rec.verdict) {
        (Layer::Policy, _) | (_, Verdict::Deny) => "SBX_E1550",
        _ => "SBX_E1514",
    }
}

fn structured<T: Serialize>(v: &T) -> CallToolResult {
    CallToolResult::structured(serde_json::to_value(v).unwrap_or_default())
}

/// A denial as a tool error (structured content and a one-line text).
pub fn refused(d: &Denial) -> CallToolResult {
    let mut r = CallToolResult::structured_error(serde_json::to_value(d).unwrap_or_default());
    let rules = if d.rules.is_empty() {
        String::new()
    } else {
        format!(" (rules: {})", d.rules.join(", "))
    };
    let ask = d
        .approval_id
        .as_ref()
        .map(|a| format!("; approval `{a}`"))
        .unwrap_or_default();
    r.content = vec![rmcp::model::ContentBlock::text(format!(
        "sandboxio[{}]: denied at {}: {}{rules}{ask}",
        d.code, d.layer, d.reason
    ))];
    r
}

/// A front-end error (bad arguments, unknown sandbox) as a tool error the agent can read.
pub fn error(e: &McpError) -> CallToolResult {
    let mut r = CallToolResult::structured_error(serde_json::json!({
        "code": e.code(),
        "layer": "admit",
        "rules": [],
        "reason": e.to_string(),
    }));
    r.content = vec![rmcp::model::ContentBlock::text(format!(
        "error[{}]: {e}",
        e.code()
    ))];
    r
}

fn stopped(o: &Outcome) -> bool {
    o.record.verdict != Verdict::Allow
        || matches!(
            o.record.status,
            OperationStatus::Denied | OperationStatus::Error
        )
}

/// `exec` and `run_code`.
pub fn run(o: &Outcome, sandbox_id: &str) -> CallToolResult {
    match (&o.result, stopped(o)) {
        // A failed copy-out is an error record, but the program ran: its output stands.
        (Some(r), stop) if !stop || r.copy_out_error.is_some() => {
            let (exit_code, signal) = match r.exit {
                ExitStatus::Code(c) => (Some(c), None),
                ExitStatus::Signal(s) => (None, Some(s)),
            };
            structured(&RunOutput {
                exit_code,
                signal,
                stdout: r.stdout_lossy().into_owned(),
                stderr: r.stderr_lossy().into_owned(),
                stdout_truncated: r.stdout_truncated,
                stderr_truncated: r.stderr_truncated,
                timed_out: r.timed_out,
                oom_killed: r.oom_killed,
                cancelled: r.cancelled.clone(),
                output_incomplete: r.output_incomplete.clone(),
                copy_out_error: r
                    .copy_out_error
                    .as_ref()
                    .map(|e| format!("[{}] {}", e.code, e.message)),
                duration_ms: r.duration_ms,
                operation_id: o.record.operation_id.clone(),
                sandbox_id: sandbox_id.to_string(),
            })
        }
        _ => refused(&denial(&o.record)),
    }
}

/// `read_file`, `write_file`, `list_files`.
pub fn file(o: &Outcome, sandbox_id: &str) -> CallToolResult {
    let Some(v) = o.tool_output.as_ref().filter(|_| !stopped(o)) else {
        return refused(&denial(&o.record));
    };
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    structured(&FileOutput {
        path: text("path").unwrap_or_default(),
        content: text("content"),
        content_base64: text("content_base64"),
        size: v.get("size").and_then(|x| x.as_u64()),
        entries: v.get("entries").and_then(|x| x.as_array()).cloned(),
        operation_id: o.record.operation_id.clone(),
        sandbox_id: sandbox_id.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxio_core::RuleRef;

    fn rec(layer: Layer, verdict: Verdict, status: OperationStatus) -> OperationRecord {
        let mut r = OperationRecord::new("op-1", "exec");
        r.layer = layer;
        r.verdict = verdict;
        r.status = status;
        r.reason = "no policy rule allows `exec`".into();
        r
    }

    #[test]
    fn a_policy_denial_is_a_structured_tool_error_naming_layer_rule_and_code() {
        let mut r = rec(Layer::Policy, Verdict::Deny, OperationStatus::Denied);
        r.rules = vec![RuleRef {
            id: "no-curl".into(),
            file: Some("p.toml".into()),
            line: Some(3),
        }];
        let o = Outcome {
            record: r,
            result: None,
            tool_output: None,
        };
        let res = run(&o, "sbx");
        assert_eq!(res.is_error, Some(true));
        let d: Denial = serde_json::from_value(res.structured_content.unwrap()).unwrap();
        assert_eq!(d.layer, "policy");
        assert_eq!(d.code, "SBX_E1550");
        assert_eq!(d.rules.len(), 1);
        assert!(d.rules[0].contains("no-curl"), "{:?}", d.rules);
        assert_eq!(d.operation_id.as_deref(), Some("op-1"));
    }

    #[test]
    fn an_approval_timeout_carries_the_approval_id() {
        let mut r = rec(Layer::Approval, Verdict::Deny, OperationStatus::Denied);
        r.error_code = Some("SBX_E1555".into());
        r.approval_id = Some("apr_1".into());
        let o = Outcome {
            record: r,
            result: None,
            tool_output: None,
        };
        let res = file(&o, "sbx");
        let d: Denial = serde_json::from_value(res.structured_content.unwrap()).unwrap();
        assert_eq!(d.code, "SBX_E1555");
        assert_eq!(d.approval_id.as_deref(), Some("apr_1"));
        let text = format!("{:?}", res.content);
        assert!(text.contains("apr_1"), "{text}");
    }
}
