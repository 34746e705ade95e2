//! Sandboxes as sessions: create, list, get, extend, delete; capability tokens for one.

use crate::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use sandboxio_core::Verdict;
use sandboxio_gateway::credential::{self, CapabilitySpec, Scope, Scopes};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{components, Caller};
use crate::backend::server_record;
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::model::{CreateSandbox, ExtendBody, MintToken, MintedToken, SandboxList, SandboxView};
use crate::options::MAX_TOKEN_TTL;
use crate::problem::Problem;
use crate::routes::session_for;
use crate::sessions::SessionSpec;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get_one, delete_one))
        .routes(routes!(extend))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(mint_token))
        .routes(routes!(revoke_token))
}

/// Any of these scopes lets a key act on sandboxes.
const ACT: [Scope; 3] = [Scope::Exec, Scope::RunCode, Scope::Files];
use crate::auth::SEE_SANDBOXES as SEE;

/// Creates a sandbox with a fresh workspace.
#[utoipa::path(post, path = "/v1/sandboxes", tag = "sandboxes", request_body = CreateSandbox,
    responses((status = 201, body = SandboxView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateSandbox>,
) -> Result<Response, ServerError> {
    if caller.is_capability() {
        return Err(ServerError::MissingScope { scope: "exec" });
    }
    caller.require_any(&st, &ACT).await?;
    let o = &st.opts;
    let lifetime = body.lifetime.map(|d| d.as_duration()).unwrap_or(o.lifetime);
    if lifetime.is_zero() || lifetime > o.max_lifetime {
        return Err(ServerError::BadValue {
            field: "lifetime",
            why: format!(
                "must be more than 0 and at most {} s",
                o.max_lifetime.as_secs()
            ),
        });
    }
    let idle = body
        .idle_timeout
        .map(|d| d.as_duration())
        .unwrap_or(o.idle_timeout);
    if idle.is_zero() || idle > o.max_lifetime {
        return Err(ServerError::BadValue {
            field: "idle_timeout",
            why: format!(
                "must be more than 0 and at most {} s (the longest lifetime)",
                o.max_lifetime.as_secs()
            ),
        });
    }
    let cfg = st.backend.gateway().config();
    let asked = body.limits.clone().unwrap_or_default();
    let mut limits = asked.resolve(&cfg.limits_default, &cfg.limits_max)?;
    if asked.timeout.is_none() {
        // The configured default may be longer than a request may last here.
        limits.timeout = limits.timeout.min(o.request_timeout);
    }
    if limits.timeout.is_zero() || limits.timeout > o.request_timeout {
        return Err(ServerError::BadValue {
            field: "limits.timeout",
            why: format!(
                "must be more than 0 and at most the request timeout ({} s)",
                o.request_timeout.as_secs()
            ),
        });
    }
    crate::labels::check(&body.labels)?;
    for (name, value) in &body.env {
        if let Some(why) = sandboxio_core::operation::env_problem(name, value) {
            return Err(ServerError::BadValue {
                field: "env",
                why: format!("{name:?}: {why}"),
            });
        }
    }
    let tier = body
        .tier
        .unwrap_or(st.backend.gateway().config().default_tier);
    if let Err(why) = sandboxio_gateway::Gateway::tier_supported(tier) {
        return Err(ServerError::BadValue { field: "tier", why });
    }
    let spec = SessionSpec {
        tier,
        limits,
        env: body.env,
        labels: body.labels,
        idle_timeout: idle,
        lifetime,
    };
    let s = match st.sessions.create(caller.tenant(), spec).await {
        Ok(s) => s,
        Err(e) => {
            // A quota reached is recorded (at a bounded rate).
            st.refusals
                .refused(&st, &caller.ctx, Some(caller.tenant()), &e)
                .await;
            return Err(e);
        }
    };
    let mut rec = server_record(
        "sandbox.create",
        caller.tenant(),
        &caller.ctx,
        Verdict::Allow,
        format!("sandbox {} created by {}", s.id, caller.name()),
    );
    rec.session_id = Some(s.id.clone());
    rec.isolation = Some(s.spec.tier);
    st.backend.record(rec).await;
    Ok((StatusCode::CREATED, Json(SandboxView::of(&s))).into_response())
}

/// The caller's sandboxes.
#[utoipa::path(get, path = "/v1/sandboxes", tag = "sandboxes",
    responses((status = 200, body = SandboxList), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<SandboxList>, ServerError> {
    caller.require_any(&st, &SEE).await?;
    let sandboxes = st
        .sessions
        .list(caller.tenant())
        .iter()
        .filter(|s| caller.may_see_sandbox(&s.id))
        .map(|s| SandboxView::of(s))
        .collect();
    let lost = if caller.is_capability() {
        Vec::new()
    } else {
        st.sessions.lost_list(caller.tenant())
    };
    Ok(Json(SandboxList { sandboxes, lost }))
}

/// One sandbox (404 for another tenant's).
#[utoipa::path(get, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = SandboxView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SandboxView>, ServerError> {
    caller.require_any(&st, &SEE).await?;
    let s = session_for(&st, &caller, &id)?;
    Ok(Json(SandboxView::of(&s)))
}

/// Closes a sandbox: what runs in it is cancelled and its workspace removed.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 204), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn delete_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ServerError> {
    caller.require_whole_sandbox(&st).await?;
    let s = match session_for(&st, &caller, &id) {
        Err(ServerError::Lost { .. }) => {
            // A lost sandbox's report is acknowledged: it is forgotten.
            let lost = st.sessions.forget_lost(caller.tenant(), &id);
            if let Some(lost) = lost {
                let mut rec = server_record(
                    "sandbox.delete",
                    caller.tenant(),
                    &caller.ctx,
                    Verdict::Allow,
                    format!("lost sandbox {} forgotten by {}", lost.id, caller.name()),
                );
                rec.session_id = Some(lost.id);
                st.backend.record(rec).await;
            }
            return Ok(StatusCode::NO_CONTENT);
        }
        other => other?,
    };
    st.sessions
        .remove(caller.tenant(), &s.id, "deleted")
        .ok_or(ServerError::NotFound {
            what: "sandbox",
            id: s.id.clone(),
        })?;
    let mut rec = server_record(
        "sandbox.delete",
        caller.tenant(),
        &caller.ctx,
        Verdict::Allow,
        format!("sandbox {} deleted by {}", s.id, caller.name()),
    );
    rec.session_id = Some(s.id.clone());
    st.backend.record(rec).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Extends a sandbox's lifetime (capped at the server's maximum from creation).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/extend", tag = "sandboxes",
    params(("id" = String, Path)), request_body = ExtendBody,
    responses((status = 200, body = SandboxView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn extend(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExtendBody>,
) -> Result<Json<SandboxView>, ServerError> {
    caller.require_whole_sandbox(&st).await?;
    let s = session_for(&st, &caller, &id)?;
    let by = body.by.as_duration();
    if by.is_zero() || by > st.opts.max_lifetime {
        return Err(ServerError::BadValue {
            field: "by",
            why: format!(
                "must be more than 0 and at most {} s (a sandbox lives at most that long from its creation)",
                st.opts.max_lifetime.as_secs()
            ),
        });
    }
    s.extend(by, st.opts.max_lifetime);
    s.touch();
    Ok(Json(SandboxView::of(&s)))
}

/// Pauses a sandbox: what runs in it is cancelled (each recorded, its reservation
/// released), its files stay, and nothing starts in it until it is resumed.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = SandboxView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn pause(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SandboxView>, ServerError> {
    caller.require_whole_sandbox(&st).await?;
    let s = session_for(&st, &caller, &id)?;
    crate::lifecycle::pause(&st, &s, &caller.name(), &caller.ctx).await?;
    Ok(Json(SandboxView::of(&s)))
}

/// Resumes a paused sandbox.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = SandboxView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn resume(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SandboxView>, ServerError> {
    caller.require_whole_sandbox(&st).await?;
    let s = session_for(&st, &caller, &id)?;
    crate::lifecycle::resume(&st, &s, &caller.name(), &caller.ctx).await?;
    Ok(Json(SandboxView::of(&s)))
}

/// Mints a capability token for this sandbox: at most the key's scopes, optionally one
/// directory, always an expiry. The token is shown once.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/tokens", tag = "sandboxes",
    params(("id" = String, Path)), request_body = MintToken,
    responses((status = 201, body = MintedToken), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn mint_token(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MintToken>,
) -> Result<Response, ServerError> {
    if caller.is_capability() {
        // A token cannot mint tokens.
        return Err(ServerError::MissingScope { scope: "admin" });
    }
    let s = session_for(&st, &caller, &id)?;
    let mut scopes = Vec::new();
    for name in &body.scopes {
        scopes.push(name.parse::<Scope>().map_err(|why| ServerError::BadValue {
            field: "scopes",
            why,
        })?);
    }
    let scopes = Scopes::new(scopes);
    if scopes.is_empty() {
        return Err(ServerError::BadValue {
            field: "scopes",
            why: "a token needs at least one scope".into(),
        });
    }
    for sc in scopes.iter() {
        if matches!(sc, Scope::Admin | Scope::Approve | Scope::Metrics) {
            return Err(ServerError::BadValue {
                field: "scopes",
                why: format!("a capability token cannot carry `{sc}`"),
            });
        }
        caller.require(&st, sc).await?;
    }
    if let Some(dir) = &body.dir {
        if components(dir).is_none() {
            return Err(ServerError::BadValue {
                field: "dir",
                why: format!("`{dir}` is not a relative path inside the workspace"),
            });
        }
        if scopes.contains(Scope::Exec) || scopes.contains(Scope::RunCode) {
            return Err(ServerError::BadValue {
                field: "dir",
                why: "a token confined to a directory cannot carry `exec` or `run_code` (a program sees the whole workspace)".into(),
            });
        }
    }
    let ttl = body.ttl.as_duration();
    if ttl.is_zero() || ttl > MAX_TOKEN_TTL {
        return Err(ServerError::BadValue {
            field: "ttl",
            why: format!(
                "must be more than 0 and at most {} s",
                MAX_TOKEN_TTL.as_secs()
            ),
        });
    }
    let expires_at = crate::sessions::add_saturating(Utc::now(), ttl);
    let m = credential::mint_capability(
        &caller.credential,
        CapabilitySpec {
            sandbox: s.id.clone(),
            dir: body.dir.clone(),
            scopes: scopes.clone(),
            expires_at,
            label: body.label.clone(),
        },
    );
    let store = st.backend.store().clone();
    let row = m.credential.clone();
    tokio::task::spawn_blocking(move || store.create_credential(&row))
        .await
        .map_err(|_| ServerError::Internal {
            action: "storing a token",
        })??;
    let mut rec = server_record(
        "token.mint",
        caller.tenant(),
        &caller.ctx,
        Verdict::Allow,
        format!(
            "capability token {} for sandbox {} ({scopes}) minted by {}",
            m.credential.id,
            s.id,
            caller.name()
        ),
    );
    rec.session_id = Some(s.id.clone());
    st.backend.record(rec).await;
    let view = MintedToken {
        id: m.credential.id.clone(),
        token: m.token,
        sandbox: s.id.clone(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        dir: body.dir,
        expires_at,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Revokes a capability token of the caller's tenant.
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 204), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn revoke_token(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ServerError> {
    let not_found = || ServerError::NotFound {
        what: "token",
        id: id.chars().take(64).collect(),
    };
    let store = st.backend.store().clone();
    let key = id.clone();
    let found = tokio::task::spawn_blocking(move || store.credential(&key))
        .await
        .map_err(|_| ServerError::Internal {
            action: "reading a token",
        })??;
    let c = found
        .filter(|c| c.tenant == caller.tenant() && c.kind == credential::CredentialKind::Capability)
        .ok_or_else(not_found)?;
    // A token may revoke itself; otherwise a key of the tenant that may act on sandboxes.
    if c.id != caller.credential.id {
        if caller.is_capability() {
            return Err(not_found());
        }
        caller.require_any(&st, &ACT).await?;
    }
    let store = st.backend.store().clone();
    let key = c.id.clone();
    tokio::task::spawn_blocking(move || store.revoke_credential(&key, Utc::now()))
        .await
        .map_err(|_| ServerError::Internal {
            action: "revoking a token",
        })??;
    let rec = server_record(
        "token.revoke",
        caller.tenant(),
        &caller.ctx,
        Verdict::Allow,
        format!("capability token {} revoked by {}", c.id, caller.name()),
    );
    st.backend.record(rec).await;
    Ok(StatusCode::NO_CONTENT)
}
