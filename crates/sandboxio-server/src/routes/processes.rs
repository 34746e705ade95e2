//! What runs in a sandbox: list, read (a background process's output and outcome, with an
//! optional long-poll) and kill. A kill cancels the operation: its whole process tree is
//! killed and its one record says it was cancelled.

use std::time::Duration;

use crate::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use sandboxio_core::Verdict;
use sandboxio_gateway::credential::Scope;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::backend::server_record;
use crate::error::ServerError;
use crate::options::MAX_WAIT;
use crate::problem::Problem;
use crate::processes::{ProcState, ProcessView};
use crate::routes::session_for;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get_one, kill))
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessView>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ProcessQuery {
    /// Seconds to wait for it to end (at most 60) before answering.
    pub wait: Option<u64>,
}

async fn require_exec(st: &AppState, caller: &Caller) -> Result<(), ServerError> {
    if caller.credential.scopes.contains(Scope::RunCode) {
        return Ok(());
    }
    caller.require(st, Scope::Exec).await
}

fn not_found(pid: &str) -> ServerError {
    ServerError::NotFound {
        what: "process",
        id: pid.chars().take(64).collect(),
    }
}

/// The sandbox's processes: running ones and background ones that ended.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes", tag = "exec",
    params(("id" = String, Path)),
    responses((status = 200, body = ProcessList), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ProcessList>, ServerError> {
    require_exec(&st, &caller).await?;
    let s = session_for(&st, &caller, &id)?;
    let processes = s.processes.list().iter().map(|p| p.view(false)).collect();
    Ok(Json(ProcessList { processes }))
}

/// One process, with its output so far (background) and its outcome once it ended.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes/{pid}", tag = "exec",
    params(("id" = String, Path), ("pid" = String, Path), ProcessQuery),
    responses((status = 200, body = ProcessView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path((id, pid)): Path<(String, String)>,
    Query(q): Query<ProcessQuery>,
) -> Result<Json<ProcessView>, ServerError> {
    require_exec(&st, &caller).await?;
    let s = session_for(&st, &caller, &id)?;
    let p = s.processes.get(&pid).ok_or_else(|| not_found(&pid))?;
    if let Some(w) = q.wait.filter(|w| *w > 0) {
        let _poll = caller.long_poll(&st).await?;
        p.wait(Duration::from_secs(w).min(MAX_WAIT)).await;
    }
    Ok(Json(p.view(p.background)))
}

/// Kills a running process (its whole tree; its record says cancelled), or forgets one
/// that ended.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/processes/{pid}", tag = "exec",
    params(("id" = String, Path), ("pid" = String, Path)),
    responses((status = 204), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn kill(
    State(st): State<AppState>,
    caller: Caller,
    Path((id, pid)): Path<(String, String)>,
) -> Result<StatusCode, ServerError> {
    require_exec(&st, &caller).await?;
    let s = session_for(&st, &caller, &id)?;
    let p = s.processes.get(&pid).ok_or_else(|| not_found(&pid))?;
    if p.state() == ProcState::Running {
        let why = format!("killed over the API by {}", caller.name());
        p.kill(&why);
        let mut rec = server_record(
            "process.kill",
            caller.tenant(),
            &caller.ctx,
            Verdict::Allow,
            format!("process {} of sandbox {} {why}", p.id, s.id),
        );
        rec.session_id = Some(s.id.clone());
        st.backend.record(rec).await;
    } else {
        s.processes.remove(&pid);
    }
    Ok(StatusCode::NO_CONTENT)
}
