//! `Operator`: a signed-in browser, as the same [`Caller`] the API uses (so scopes,
//! tenants and recorded refusals work the same). Every request needs the session cookie;
//! every request that changes something also needs the session's CSRF token in
//! `x-csrf-token`. A request with a wrong or missing token is refused and recorded.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Method;
use chrono::Utc;
use sandboxio_core::{ErrorCode, Verdict};
use sandboxio_gateway::credential::CredentialKind;

use super::signin::{cookie_of, CSRF_HEADER};
use crate::auth::{unauthenticated, Caller};
use crate::backend::server_record;
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::state::AppState;
use sandboxio_gateway::credential::same_secret;

#[derive(Debug, Clone)]
pub struct Operator {
    pub caller: Caller,
    pub csrf: String,
    /// The session cookie's value (a stream checks the session is still there).
    pub cookie: String,
}

/// The signed-in caller of a request, without the CSRF check (for pages and reads).
pub async fn signed_in(parts: &Parts, st: &AppState) -> Result<Operator, ServerError> {
    let ctx = parts
        .extensions
        .get::<RequestCtx>()
        .cloned()
        .unwrap_or_else(|| RequestCtx::from_headers(&parts.headers));
    // No cookie is a browser not signed in (the page asks it to); a cookie that names no
    // live session is a refused credential, recorded.
    let cookie = cookie_of(&parts.headers).ok_or(ServerError::NoSession)?;
    let Some(session) = st.signins.get(&cookie) else {
        return Err(unauthenticated(st, &ctx, ServerError::NoSession).await);
    };
    let store = st.backend.store().clone();
    let id = session.credential.clone();
    let found = tokio::task::spawn_blocking(move || store.credential(&id))
        .await
        .map_err(|_| ServerError::Internal {
            action: "checking a credential",
        })??;
    // A revoked or expired key ends its sessions.
    let Some(credential) =
        found.filter(|c| c.kind == CredentialKind::ApiKey && c.is_live(Utc::now()))
    else {
        st.signins.remove(&cookie);
        return Err(unauthenticated(st, &ctx, ServerError::NoSession).await);
    };
    Ok(Operator {
        caller: Caller::admitted(st, credential, ctx).await?,
        csrf: session.csrf,
        cookie,
    })
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let op = signed_in(parts, st).await?;
        if matches!(parts.method, Method::GET | Method::HEAD) {
            return Ok(op);
        }
        let given = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if same_secret(given, &op.csrf) {
            return Ok(op);
        }
        let e = ServerError::Csrf;
        let mut rec = server_record(
            "dashboard.csrf",
            op.caller.tenant(),
            &op.caller.ctx,
            Verdict::Deny,
            format!(
                "{} sent `{} {}` without the session's CSRF token",
                op.caller.name(),
                parts.method,
                parts.uri.path().chars().take(128).collect::<String>()
            ),
        );
        rec.error_code = Some(e.code().to_string());
        st.backend.record(rec).await;
        Err(e)
    }
}
