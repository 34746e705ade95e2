//! The dashboard's buttons. Each is the API's own handler called with the signed-in
//! caller: the same scopes (a refusal is answered 403 and recorded), the same gateway
//! admin operations and records, the approver named in the record. The session extractor
//! has already checked the CSRF token.

use crate::extract::Path;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::operator::Operator;
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::model::{ApprovalView, DecideBody, KillBody, KillView};
use crate::routes::guard::Scoped;
use crate::routes::{admin, approvals};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    pub reason: Option<String>,
}

pub async fn kill(
    State(st): State<AppState>,
    op: Operator,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<KillView>, ServerError> {
    let reason = body.reason.unwrap_or_default();
    let scoped = Scoped::check(&st, op.caller).await?;
    admin::kill(State(st), scoped, ApiJson(KillBody { reason })).await
}

pub async fn resume(
    State(st): State<AppState>,
    op: Operator,
) -> Result<Json<KillView>, ServerError> {
    let scoped = Scoped::check(&st, op.caller).await?;
    admin::resume(State(st), scoped).await
}

pub async fn approve(
    State(st): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<ApprovalView>, ServerError> {
    let body = DecideBody {
        reason: body.reason,
    };
    approvals::approve(State(st), op.caller, Path(id), ApiJson(body)).await
}

pub async fn deny(
    State(st): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<ApprovalView>, ServerError> {
    let body = DecideBody {
        reason: body.reason,
    };
    approvals::deny(State(st), op.caller, Path(id), ApiJson(body)).await
}
