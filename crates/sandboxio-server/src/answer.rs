//! From the chain's outcome to an HTTP answer an agent can act on: 200 with the record and
//! the result when it ran; a problem naming the layer, the rules and the reason when it was
//! stopped; 202 with the approval id and where to wait when it needs a person.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxio_core::{Layer, OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::Outcome;

use crate::backend::Submitted;
use crate::context::{OperationId, RequestCtx};
use crate::model::OutcomeView;
use crate::problem::Problem;

/// Codes the server adds: the gateway gives every denial its own code (per layer, in the
/// record); these name an approval still pending and, defensively, a denial without one.
pub mod codes {
    pub const APPROVAL_PENDING: &str = "SBX_E1821";
    pub const DENIED: &str = "SBX_E1826";
}

/// Whether the chain let the operation run (or replayed one that ran); a failed command
/// still ran. A replay answers like the run it replays: one whose run ended in an error
/// (an output that could not be copied out, say) is answered as that error again.
pub fn ran(rec: &OperationRecord) -> bool {
    let status = match (rec.status, rec.replayed_status) {
        (OperationStatus::Replayed, Some(original)) => original,
        (s, _) => s,
    };
    rec.verdict == Verdict::Allow
        && !matches!(
            status,
            OperationStatus::Denied | OperationStatus::Error | OperationStatus::Interrupted
        )
}

fn status_of(rec: &OperationRecord, code: &str) -> StatusCode {
    match code {
        // Files: a bad path, an escape, a missing file, too large to read.
        "SBX_E1480" => return StatusCode::BAD_REQUEST,
        "SBX_E1481" => return StatusCode::FORBIDDEN,
        "SBX_E1482" => return StatusCode::NOT_FOUND,
        "SBX_E1483" => return StatusCode::PAYLOAD_TOO_LARGE,
        "SBX_E1485" => return StatusCode::CONFLICT,
        // The program ran; its output could not be copied for the caller's reason: a name
        // the workspace already has, or more than the request's output cap.
        "SBX_E1474" => return StatusCode::CONFLICT,
        "SBX_E1470" => return StatusCode::UNPROCESSABLE_ENTITY,
        // The program the caller named could not be started (not found, not executable):
        // the request's fault, not the server's.
        // (Process and Landlock tiers: SBX_E1421 not in PATH, SBX_E1422 execve refused;
        // namespace tier: SBX_E1468.)
        "SBX_E1421" | "SBX_E1422" | "SBX_E1468" => return StatusCode::UNPROCESSABLE_ENTITY,
        // Idempotency: a different request, still running, interrupted.
        "SBX_E1505" | "SBX_E1506" | "SBX_E1512" => return StatusCode::CONFLICT,
        // A code context whose kernel has ended: the caller restarts it (not a server
        // fault to retry).
        crate::contexts::CONTEXT_GONE => return StatusCode::CONFLICT,
        _ => {}
    }
    match rec.layer {
        Layer::Admit => StatusCode::UNPROCESSABLE_ENTITY,
        Layer::KillSwitch => StatusCode::SERVICE_UNAVAILABLE,
        Layer::RateLimit => StatusCode::TOO_MANY_REQUESTS,
        Layer::Budget => StatusCode::PAYMENT_REQUIRED,
        _ if rec.status == OperationStatus::Error => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::FORBIDDEN,
    }
}

fn code_of(rec: &OperationRecord) -> &str {
    rec.error_code.as_deref().unwrap_or(codes::DENIED)
}

/// The problem for an operation the chain stopped (or that failed in the sandbox).
pub fn stopped(out: &Outcome, ctx: &RequestCtx) -> Problem {
    let rec = &out.record;
    let code = code_of(rec).to_string();
    let status = status_of(rec, &code);
    let title = if code == crate::contexts::CONTEXT_GONE {
        "context ended".to_string()
    } else if rec.verdict == Verdict::Deny {
        format!("denied by the {} layer", rec.layer)
    } else {
        format!("{} failed", rec.tool_name)
    };
    let mut p = Problem::new(status, &title, &code, rec.reason.clone());
    p.operation_id = Some(rec.operation_id.clone());
    p.trace_id = Some(ctx.trace_id.clone());
    p.layer = Some(rec.layer.to_string());
    p.rules = rec.rules.iter().map(ToString::to_string).collect();
    p.approval_id = rec.approval_id.clone();
    p.record = serde_json::to_value(rec).ok();
    if status == StatusCode::TOO_MANY_REQUESTS {
        p.retry_after_s = Some(1);
    }
    p
}

/// 200 with the outcome, or the problem that stopped it.
pub fn outcome(out: Outcome, ctx: &RequestCtx) -> Response {
    if !ran(&out.record) {
        return stopped(&out, ctx).into_response();
    }
    let op = out.record.operation_id.clone();
    let body = OutcomeView {
        record: &out.record,
        result: out.result.as_ref(),
        output: out.tool_output.as_ref(),
    };
    let mut res = (StatusCode::OK, Json(body)).into_response();
    res.extensions_mut().insert(OperationId(op));
    res
}

/// The problem (202) for an operation waiting for a person.
pub fn asked_problem(approval_id: &str, ctx: &RequestCtx) -> Problem {
    let mut p = Problem::new(
        StatusCode::ACCEPTED,
        "approval required",
        codes::APPROVAL_PENDING,
        format!(
            "policy asks a person to approve this operation: it runs once approval `{approval_id}` is given, and is denied if it is refused or times out"
        ),
    );
    p.layer = Some(Layer::Approval.to_string());
    p.approval_id = Some(approval_id.to_string());
    p.trace_id = Some(ctx.trace_id.clone());
    p.wait = Some(format!("/v1/approvals/{approval_id}/outcome?timeout=60"));
    p
}

/// 202 for an operation waiting for a person.
pub fn asked(approval_id: &str, ctx: &RequestCtx) -> Response {
    asked_problem(approval_id, ctx).into_response()
}

/// The answer for a submission.
pub fn submitted(s: Submitted, ctx: &RequestCtx) -> Response {
    match s {
        Submitted::Done(out) => outcome(*out, ctx),
        Submitted::Asked { approval_id } => asked(&approval_id, ctx),
    }
}
