//! Approvals of the caller's tenant: list, read, approve, deny, wait for a decision, and the
//! outcome of the operation that asked. Another tenant's approval is 404, and so is, for a
//! capability token, one asked by another sandbox than its own.

use std::time::Duration;

use crate::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::store::{Approval, ApprovalState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::answer;
use crate::auth::Caller;
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::model::{
    ApprovalList, ApprovalView, ApprovalsQuery, DecideBody, OutcomeView, WaitQuery,
};
use crate::options::MAX_WAIT;
use crate::problem::Problem;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get_one))
        .routes(routes!(approve))
        .routes(routes!(deny))
        .routes(routes!(wait))
        .routes(routes!(outcome))
}

const POLL: Duration = Duration::from_millis(100);

async fn blocking<T: Send + 'static>(
    action: &'static str,
    f: impl FnOnce() -> Result<T, sandboxio_gateway::GatewayError> + Send + 'static,
) -> Result<T, ServerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ServerError::Internal { action })?
        .map_err(ServerError::from)
}

/// The tenant's approval `id`, or 404.
async fn find(st: &AppState, caller: &Caller, id: &str) -> Result<Approval, ServerError> {
    let store = st.backend.store().clone();
    let key = id.to_string();
    let a = blocking("reading an approval", move || store.get_approval(&key)).await?;
    a.filter(|a| visible(caller, a))
        .ok_or_else(|| ServerError::NotFound {
            what: "approval",
            id: id.chars().take(64).collect(),
        })
}

/// The asking operation as the approval holds it (its request view).
fn operation_of(a: &Approval) -> serde_json::Value {
    serde_json::from_str(&a.operation).unwrap_or(serde_json::Value::Null)
}

/// Whether the caller may see approval `a`: one of its tenant's and, for a capability
/// token, one asked by its own sandbox (none for a token confined to a directory: an
/// approval shows commands and paths of the whole sandbox).
fn visible(caller: &Caller, a: &Approval) -> bool {
    if a.tenant != caller.tenant() || caller.credential.dir.is_some() {
        return false;
    }
    match &caller.credential.sandbox {
        Some(s) => operation_of(a)["principal"]["session"].as_str() == Some(s.as_str()),
        None => !caller.is_capability(),
    }
}

async fn see(st: &AppState, caller: &Caller) -> Result<(), ServerError> {
    if caller.credential.scopes.contains(Scope::Approve) {
        return Ok(());
    }
    caller.require(st, Scope::Read).await
}

fn wait_for(q: &WaitQuery) -> Duration {
    Duration::from_secs(q.timeout.unwrap_or(30)).min(MAX_WAIT)
}

/// The tenant's approvals (pending by default).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalsQuery),
    responses((status = 200, body = ApprovalList), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Query(q): Query<ApprovalsQuery>,
) -> Result<Json<ApprovalList>, ServerError> {
    see(&st, &caller).await?;
    let state = match q.state.as_deref().unwrap_or("pending") {
        "all" => None,
        "pending" => Some(ApprovalState::Pending),
        "approved" => Some(ApprovalState::Approved),
        "denied" => Some(ApprovalState::Denied),
        "expired" => Some(ApprovalState::Expired),
        "used" => Some(ApprovalState::Used),
        other => {
            return Err(ServerError::BadValue {
                field: "state",
                why: format!(
                    "unknown state `{other}` (pending, approved, denied, expired, used, all)"
                ),
            })
        }
    };
    let store = st.backend.store().clone();
    let all = blocking("listing approvals", move || {
        store.expire_approvals(Utc::now())?;
        store.list_approvals(state)
    })
    .await?;
    let approvals = all
        .into_iter()
        .filter(|a| visible(&caller, a))
        .map(ApprovalView::of)
        .collect();
    Ok(Json(ApprovalList { approvals }))
}

/// One approval.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals", params(("id" = String, Path)),
    responses((status = 200, body = ApprovalView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ApprovalView>, ServerError> {
    see(&st, &caller).await?;
    Ok(Json(ApprovalView::of(find(&st, &caller, &id).await?)))
}

async fn decide(
    st: AppState,
    caller: Caller,
    id: String,
    approve: bool,
    reason: Option<String>,
) -> Result<Json<ApprovalView>, ServerError> {
    caller.require(&st, Scope::Approve).await?;
    let a = find(&st, &caller, &id).await?;
    // An operator action through the gateway: one record naming the key that decided;
    // already decided or expired is 409 with the gateway's code.
    let decided = st
        .backend
        .gateway()
        .decide_approval(caller.tenant(), &caller.name(), &a.id, approve, reason)
        .await?;
    Ok(Json(ApprovalView::of(decided)))
}

/// Approves: the waiting operation then runs (once, for exactly the request it asked for).
#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals",
    params(("id" = String, Path)), request_body = DecideBody,
    responses((status = 200, body = ApprovalView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn approve(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecideBody>,
) -> Result<Json<ApprovalView>, ServerError> {
    decide(st, caller, id, true, body.reason).await
}

/// Denies: the waiting operation is denied at the approval layer.
#[utoipa::path(post, path = "/v1/approvals/{id}/deny", tag = "approvals",
    params(("id" = String, Path)), request_body = DecideBody,
    responses((status = 200, body = ApprovalView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn deny(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecideBody>,
) -> Result<Json<ApprovalView>, ServerError> {
    decide(st, caller, id, false, body.reason).await
}

/// Long-poll: answers when the approval is no longer pending, or after `timeout` seconds
/// (at most 60) with it still pending.
#[utoipa::path(get, path = "/v1/approvals/{id}/wait", tag = "approvals",
    params(("id" = String, Path), WaitQuery),
    responses((status = 200, body = ApprovalView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn wait(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> Result<Json<ApprovalView>, ServerError> {
    see(&st, &caller).await?;
    let _poll = caller.long_poll(&st).await?;
    let deadline = tokio::time::Instant::now() + wait_for(&q);
    loop {
        let a = find(&st, &caller, &id).await?;
        if a.state != ApprovalState::Pending || tokio::time::Instant::now() >= deadline {
            return Ok(Json(ApprovalView::of(a)));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Long-poll: the outcome of the operation that asked for this approval (200 with the
/// record and result when it ran, a problem when it was denied, 202 while it still waits).
#[utoipa::path(get, path = "/v1/approvals/{id}/outcome", tag = "approvals",
    params(("id" = String, Path), WaitQuery),
    responses((status = 200, body = OutcomeView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn outcome(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> Result<Response, ServerError> {
    // The outcome holds the operation's record and output: for a caller that may read
    // approvals, or that could have asked for the operation itself (the scope of its kind:
    // an agent waiting for its own command); never a metrics or admin key alone, nor a
    // capability token for another sandbox (404, as for the approval).
    let a = find(&st, &caller, &id).await?;
    let scopes = &caller.credential.scopes;
    let own = match operation_of(&a)["args"]["kind"].as_str() {
        Some("exec") => Some(Scope::Exec),
        Some("run_code") => Some(Scope::RunCode),
        Some(k) if k.starts_with("file") => Some(Scope::Files),
        _ => None,
    };
    if !own.is_some_and(|s| scopes.contains(s)) {
        see(&st, &caller).await?;
    }
    let _poll = caller.long_poll(&st).await?;
    let got = st
        .backend
        .pending_outcome(caller.tenant(), &id, wait_for(&q))
        .await
        .ok_or_else(|| ServerError::NotFound {
            what: "pending operation",
            id: id.chars().take(64).collect(),
        })?;
    Ok(match got {
        None => answer::asked(&id, &caller.ctx),
        Some(Ok(out)) => answer::outcome(out, &caller.ctx),
        Some(Err((code, why))) => {
            tracing::warn!(code = %code, "an approved operation failed in the gateway: {why}");
            let mut p = Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error",
                &code,
                "the gateway could not complete this operation",
            );
            p.approval_id = Some(id);
            p.into_response()
        }
    })
}
