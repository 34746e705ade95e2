//! Signing in and out of the dashboard.
//!
//! `POST /dashboard/signin` takes the key as `Authorization: Bearer sbxk_...` (what the
//! dashboard's page sends), or as `{"key": "sbxk_..."}` in a JSON body (neither can a
//! cross-site form send without a preflight), checks it like the API does, and answers the
//! CSRF token with the session cookie. Capability tokens cannot sign in. Both are
//! recorded, and so is a refused key. A key in the header is known before any body is
//! read, as on every other route; one in the body is read as a request whose credential is
//! not known yet: with a place of the small pool kept for those, within a short time
//! (`crate::admission`), so slow bodies that fill that pool hold up only sign-ins that
//! send their key the same way.

use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxio_core::Verdict;
use sandboxio_gateway::credential::{CredentialKind, Scope};
use serde::{Deserialize, Serialize};

use super::operator::Operator;
use super::signin::set_cookie;
use crate::auth::{authenticate, unauthenticated, Caller};
use crate::backend::server_record;
use crate::body::{parse_json, read_limited};
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInBody {
    pub key: String,
}

#[derive(Debug, Serialize)]
pub struct SignedIn {
    pub tenant: String,
    pub scopes: Vec<String>,
    pub csrf: String,
}

pub async fn sign_in(
    State(st): State<AppState>,
    ctx: axum::Extension<RequestCtx>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ServerError> {
    let key = match crate::auth::bearer(&headers) {
        // No body is read.
        Some(k) => k.to_string(),
        None => {
            let bytes = match read_limited(body, st.opts.json_limit).await {
                Ok(b) => b,
                Err(e) => {
                    // Refused for want of a place or of time: recorded like the server's
                    // other busy refusals.
                    st.refusals.refused(&st, &ctx.0, None, &e).await;
                    return Err(e);
                }
            };
            parse_json::<SignInBody>(&bytes)?.key
        }
    };
    let credential = match authenticate(&st, key.trim()).await {
        Ok(c) if c.kind == CredentialKind::ApiKey => c,
        Ok(_) => return Err(unauthenticated(&st, &ctx.0, ServerError::BadCredential).await),
        Err(e) => return Err(unauthenticated(&st, &ctx.0, e).await),
    };
    let caller = Caller::admitted(&st, credential, ctx.0).await?;
    // The dashboard shows the tenant's approvals, denials and running work: a key that may
    // read them (read, approve or admin), as the API asks; a metrics, exec or files key
    // alone is refused and recorded.
    let scopes = &caller.credential.scopes;
    if ![Scope::Read, Scope::Approve, Scope::Admin]
        .iter()
        .any(|s| scopes.contains(*s))
    {
        caller.require(&st, Scope::Read).await?;
    }
    let (cookie, csrf) = st.signins.create(&caller.credential.id);
    let rec = server_record(
        "dashboard.signin",
        caller.tenant(),
        &caller.ctx,
        Verdict::Allow,
        format!("{} signed in to the dashboard", caller.name()),
    );
    st.backend.record(rec).await;
    let answer = SignedIn {
        tenant: caller.tenant().to_string(),
        scopes: caller
            .credential
            .scopes
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
        csrf,
    };
    let tls = st.opts.tls.is_some();
    Ok(([(SET_COOKIE, set_cookie(Some(&cookie), tls))], Json(answer)).into_response())
}

pub async fn sign_out(
    State(st): State<AppState>,
    op: Operator,
    headers: axum::http::HeaderMap,
) -> Result<Response, ServerError> {
    if let Some(c) = super::signin::cookie_of(&headers) {
        st.signins.remove(&c);
    }
    let rec = server_record(
        "dashboard.signout",
        op.caller.tenant(),
        &op.caller.ctx,
        Verdict::Allow,
        format!("{} signed out of the dashboard", op.caller.name()),
    );
    st.backend.record(rec).await;
    let tls = st.opts.tls.is_some();
    Ok((
        [(SET_COOKIE, set_cookie(None, tls))],
        axum::http::StatusCode::NO_CONTENT,
    )
        .into_response())
}
