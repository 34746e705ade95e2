//! The `/v1` API, one module per resource. Each module returns an `OpenApiRouter`, so its
//! routes and their OpenAPI description come from the same code; other front ends (MCP, the
//! dashboard, an E2B-compatible API) add theirs the same way (see `crate::app`).

use std::sync::Arc;

use utoipa_axum::router::OpenApiRouter;

use crate::auth::Caller;
use crate::error::ServerError;
use crate::sessions::Session;
use crate::state::AppState;

pub mod admin;
pub mod approvals;
pub mod audit;
pub mod contexts;
pub mod exec;
pub mod files;
pub mod guard;
pub mod health;
pub mod processes;
pub mod sandboxes;
pub mod ws;

/// Every `/v1` route of the API.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(sandboxes::routes())
        .merge(exec::routes())
        .merge(processes::routes())
        .merge(contexts::routes())
        .merge(ws::routes())
        .merge(files::routes())
        .merge(approvals::routes())
        .merge(admin::routes())
        .merge(audit::routes())
}

/// The caller's sandbox `id`: another tenant's, or another sandbox than a token's, is 404.
pub fn session_for(st: &AppState, caller: &Caller, id: &str) -> Result<Arc<Session>, ServerError> {
    if !caller.may_see_sandbox(id) {
        return Err(not_found(id));
    }
    if let Some(s) = st.sessions.get(caller.tenant(), id) {
        return Ok(s);
    }
    match st.sessions.lost(caller.tenant(), id) {
        Some(lost) => Err(ServerError::Lost {
            id: lost.id,
            reason: lost.reason,
        }),
        None => Err(not_found(id)),
    }
}

fn not_found(id: &str) -> ServerError {
    ServerError::NotFound {
        what: "sandbox",
        id: id.chars().take(64).collect(),
    }
}
