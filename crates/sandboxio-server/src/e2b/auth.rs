//! Who calls the E2B API. The lifecycle API takes a sandboxio API key as E2B's
//! `X-API-Key` (`E2B_API_KEY`), mapped to its tenant and scopes like a bearer token. envd
//! and the code interpreter are reached with `E2b-Sandbox-Id` / `E2b-Sandbox-Port` and the
//! sandbox's access token (`X-Access-Token`, or the interpreter's
//! `E2B-Traffic-Access-Token`). A token is given to one credential (create: the creating
//! key; connect: the caller) and names it; a call made with it acts as that credential,
//! which must still be live, with its scopes, its sandbox and its directory.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;

use super::error::E2bError;
use super::registry::Entry;
use super::E2b;
use crate::auth::{authenticate, bearer, live_credential, unauthenticated, Caller};
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::sessions::Session;
use crate::state::AppState;

pub const API_KEY: &str = "x-api-key";
pub const SANDBOX_ID: &str = "e2b-sandbox-id";
pub const SANDBOX_PORT: &str = "e2b-sandbox-port";
pub const ACCESS_TOKEN: &str = "x-access-token";
pub const TRAFFIC_TOKEN: &str = "e2b-traffic-access-token";
pub const ENVD_PORT: &str = "49983";
pub const INTERPRETER_PORT: &str = "49999";

/// The request's trace context (stamped by the app's layer).
pub struct Ctx(pub RequestCtx);

fn ctx_of(parts: &Parts) -> RequestCtx {
    parts
        .extensions
        .get::<RequestCtx>()
        .cloned()
        .unwrap_or_else(|| RequestCtx::from_headers(&parts.headers))
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        Ok(Ctx(ctx_of(parts)))
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The caller of a lifecycle request: `X-API-Key` (or a bearer token).
pub async fn api_caller(st: &AppState, h: &HeaderMap, ctx: RequestCtx) -> Result<Caller, E2bError> {
    let Some(token) = header(h, API_KEY).or_else(|| bearer(h)) else {
        return Err(unauthenticated(st, &ctx, ServerError::Unauthenticated)
            .await
            .into());
    };
    let credential = match authenticate(st, token).await {
        Ok(c) => c,
        Err(e) => return Err(unauthenticated(st, &ctx, e).await.into()),
    };
    Ok(Caller::admitted(st, credential, ctx).await?)
}

/// The caller of a lifecycle request, authenticated in the prologue (from the headers,
/// before any body is read). The outcome is kept for the handler, which answers an error
/// in E2B's REST form.
pub struct ApiCaller(pub Result<Caller, E2bError>);

impl FromRequestParts<AppState> for ApiCaller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Infallible> {
        let ctx = ctx_of(parts);
        Ok(ApiCaller(api_caller(st, &parts.headers, ctx).await))
    }
}

/// Which in-sandbox service a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    Envd,
    Interpreter,
}

/// An authenticated call to a sandbox's envd or code interpreter.
pub struct InSandbox {
    pub caller: Caller,
    pub session: Arc<Session>,
    pub entry: Arc<Entry>,
}

/// The in-sandbox service a handler serves, as a type.
pub trait Service: Send + Sync {
    const PORT: Port;
}

/// envd (files, processes, filesystem RPCs).
pub struct Envd;
impl Service for Envd {
    const PORT: Port = Port::Envd;
}

/// The code interpreter.
pub struct Interpreter;
impl Service for Interpreter {
    const PORT: Port = Port::Interpreter;
}

/// The prologue every envd and interpreter handler shares, as an extractor: the call
/// authenticated into its sandbox on `S`'s port. The outcome is kept, not rejected, because
/// each handler answers an error in its own protocol's form (plain JSON, Connect unary,
/// Connect stream).
pub struct Sbx<S>(pub Result<InSandbox, E2bError>, pub PhantomData<S>);

impl<S: Service> FromRequestParts<AppState> for Sbx<S> {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Infallible> {
        let ctx = ctx_of(parts);
        let outcome = match parts.extensions.get::<Arc<E2b>>() {
            Some(e2b) => in_sandbox(st, e2b, &parts.headers, ctx.clone(), S::PORT).await,
            None => Err(E2bError::Server(ServerError::Internal {
                action: "finding the E2B state",
            })),
        };
        // An access token that does not open the sandbox is a refused credential.
        if let Err(e @ E2bError::AccessToken { .. }) = &outcome {
            use sandboxio_core::ErrorCode as _;
            st.refusals
                .refused_as(st, &ctx, None, e.code(), &e.to_string())
                .await;
        }
        Ok(Sbx(outcome, PhantomData))
    }
}

/// Authenticates a call into sandbox `E2b-Sandbox-Id` on `port`.
async fn in_sandbox(
    st: &AppState,
    e2b: &E2b,
    h: &HeaderMap,
    ctx: RequestCtx,
    port: Port,
) -> Result<InSandbox, E2bError> {
    let id = header(h, SANDBOX_ID).ok_or_else(|| E2bError::BadRequest {
        why: "the request names no sandbox (`E2b-Sandbox-Id`)".into(),
    })?;
    let want = match port {
        Port::Envd => ENVD_PORT,
        Port::Interpreter => INTERPRETER_PORT,
    };
    let given = header(h, SANDBOX_PORT).unwrap_or(ENVD_PORT);
    if given != want {
        return Err(E2bError::BadPort {
            port: given.chars().take(16).collect(),
        });
    }
    let gone = || E2bError::NoSandbox {
        id: id.chars().take(64).collect(),
    };
    let token = header(h, ACCESS_TOKEN).or_else(|| match port {
        Port::Interpreter => header(h, TRAFFIC_TOKEN),
        Port::Envd => None,
    });
    // The credential the token was given to (create: the creating key; connect: the
    // caller that connected); the call acts as it.
    // Checked before the sandbox is looked up: without a token of this sandbox id, an
    // unknown sandbox and another's answer the same (no oracle of which ids exist). A
    // token is derived from the sandbox id, so only its holder learns that it is gone
    // (E2B's `is_running`) or that its facts are damaged.
    let Some(holder) = token.and_then(|t| e2b.registry.credential_of(id, t)) else {
        return Err(E2bError::AccessToken {
            sandbox: id.chars().take(64).collect(),
        });
    };
    let entry = match e2b.registry.get(id) {
        Ok(e) => e.ok_or_else(gone)?,
        Err(d) => return Err(damaged(id, d)),
    };
    let Some(session) = st.sessions.get(&entry.tenant, id) else {
        e2b.registry.remove(id);
        return Err(gone());
    };
    let refused = || E2bError::AccessToken {
        sandbox: entry.sandbox_id.clone(),
    };
    // Its expiry and revocation apply (and a capability token's key's); a token of another
    // tenant's credential or a capability token for another sandbox never acts here.
    let credential = match live_credential(st, holder).await {
        Ok(c) => c,
        Err(e) => return Err(unauthenticated(st, &ctx, e).await.into()),
    };
    let caller = Caller::admitted(st, credential, ctx).await?;
    if caller.tenant() != entry.tenant || !caller.may_see_sandbox(id) {
        return Err(refused());
    }
    Ok(InSandbox {
        caller,
        session,
        entry,
    })
}

/// Logs a sandbox whose E2B facts file is damaged (the file is left for the operator).
pub(super) fn log_damaged(id: &str, d: &super::persist::Damaged) {
    tracing::error!(sandbox = %id, path = %d.path.display(), "a sandbox's E2B facts are damaged: {}", d.why);
}

/// A sandbox whose E2B facts file is damaged: answered with its own code, logged once per
/// request, and the file left for the operator.
pub(super) fn damaged(id: &str, d: super::persist::Damaged) -> E2bError {
    log_damaged(id, &d);
    E2bError::DamagedFacts {
        id: id.chars().take(64).collect(),
        path: d.path,
        why: d.why,
    }
}
