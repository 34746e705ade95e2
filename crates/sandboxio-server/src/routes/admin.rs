//! The kill switch (scope `admin`; global: it stops every tenant) and costs (scope `read`,
//! the caller's tenant only). Admin actions are records too.

use std::time::Duration;

use crate::extract::Query;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use sandboxio_core::{HumanDuration, Money};
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::store::LedgerLine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::model::{KillBody, KillView};
use crate::problem::Problem;
use crate::routes::guard::{AdminScope, ReadScope, Scoped};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(kill_state, kill, resume))
        .routes(routes!(costs))
}

async fn blocking<T: Send + 'static>(
    action: &'static str,
    f: impl FnOnce() -> Result<T, sandboxio_gateway::GatewayError> + Send + 'static,
) -> Result<T, ServerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ServerError::Internal { action })?
        .map_err(ServerError::from)
}

async fn view(st: &AppState) -> Result<KillView, ServerError> {
    let store = st.backend.store().clone();
    let stored = blocking("reading the kill switch", move || store.kill_state()).await?;
    // One the store could not take holds in this server all the same: shown as engaged.
    let k = stored.or_else(|| {
        st.backend.gateway().kill_latched().map(|mut k| {
            k.reason = format!(
                "{} (held by this server only: the store could not take it)",
                k.reason
            );
            k
        })
    });
    Ok(KillView {
        engaged: k.is_some(),
        reason: k.as_ref().map(|k| k.reason.clone()),
        by: k.as_ref().map(|k| k.by.clone()),
        at: k.map(|k| k.at),
    })
}

/// The kill switch's state.
#[utoipa::path(get, path = "/v1/kill", tag = "admin",
    responses((status = 200, body = KillView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn kill_state(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<KillView>, ServerError> {
    if !caller.credential.scopes.contains(Scope::Admin) {
        caller.require(&st, Scope::Read).await?;
    }
    Ok(Json(view(&st).await?))
}

/// Engages the kill switch (persisted): everything is denied and what runs is cancelled.
#[utoipa::path(post, path = "/v1/kill", tag = "admin", request_body = KillBody,
    responses((status = 200, body = KillView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn kill(
    State(st): State<AppState>,
    Scoped { caller, .. }: Scoped<AdminScope>,
    ApiJson(body): ApiJson<KillBody>,
) -> Result<Json<KillView>, ServerError> {
    if body.reason.trim().is_empty() {
        return Err(ServerError::BadValue {
            field: "reason",
            why: "say why the kill switch is engaged".into(),
        });
    }
    // An operator action through the gateway: it cancels what this process runs, ends
    // pending asks as denials and leaves its own record (actor: the key's name).
    // A refusal (the store could not take the switch) is the answer, with its code.
    let engaged = st
        .backend
        .gateway()
        .operator(
            caller.tenant(),
            &caller.name(),
            sandboxio_core::AdminAction::Kill {
                reason: body.reason.clone(),
            },
        )
        .await;
    // What this process runs is stopped even then (the brake works here at least).
    st.backend
        .cancel_all(&format!("kill switch: {}", body.reason));
    engaged?;
    Ok(Json(view(&st).await?))
}

/// Releases the kill switch.
#[utoipa::path(delete, path = "/v1/kill", tag = "admin",
    responses((status = 200, body = KillView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn resume(
    State(st): State<AppState>,
    Scoped { caller, .. }: Scoped<AdminScope>,
) -> Result<Json<KillView>, ServerError> {
    st.backend
        .gateway()
        .operator(
            caller.tenant(),
            &caller.name(),
            sandboxio_core::AdminAction::Resume,
        )
        .await?;
    Ok(Json(view(&st).await?))
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct CostsQuery {
    /// How far back, e.g. `24h` (default), at most 366 days.
    pub since: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Costs {
    pub since: DateTime<Utc>,
    /// Decimal text.
    pub total: String,
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<LedgerLine>,
}

/// Settled charges of the caller's tenant.
#[utoipa::path(get, path = "/v1/costs", tag = "admin", params(CostsQuery),
    responses((status = 200, body = Costs), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn costs(
    State(st): State<AppState>,
    Scoped { caller, .. }: Scoped<ReadScope>,
    Query(q): Query<CostsQuery>,
) -> Result<Json<Costs>, ServerError> {
    if caller.is_capability() {
        return Err(ServerError::TenantWide {
            what:
                "a capability token reaches its own sandbox only, and costs are the whole tenant's",
        });
    }
    let back = match q.since.as_deref() {
        None => Duration::from_secs(24 * 3600),
        Some(s) => s
            .parse::<HumanDuration>()
            .map_err(|e| ServerError::BadValue {
                field: "since",
                why: e.to_string(),
            })?
            .as_duration(),
    };
    let back = back.min(Duration::from_secs(366 * 24 * 3600));
    let now = Utc::now();
    let since = now - chrono::Duration::from_std(back).unwrap_or(chrono::Duration::zero());
    let store = st.backend.store().clone();
    let lines = blocking("reading the ledger", move || store.ledger(since, now)).await?;
    let entries: Vec<LedgerLine> = lines
        .into_iter()
        .filter(|l| l.tenant == caller.tenant())
        .collect();
    let mut total = Money::ZERO;
    for l in &entries {
        total = total
            .checked_add(l.amount)
            .map_err(|_| ServerError::Internal {
                action: "adding up costs",
            })?;
    }
    Ok(Json(Costs {
        since,
        total: total.to_string(),
        entries,
    }))
}
