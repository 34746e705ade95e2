//! Who is calling: an API key (a tenant and scopes) or a capability token (one sandbox,
//! maybe one directory, fewer scopes, an expiry). `Caller` is an extractor any route module
//! (the API, MCP, the dashboard) uses; a refused scope is answered 403 and recorded.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use chrono::Utc;
use sandboxio_core::Verdict;
use sandboxio_gateway::credential::{self, Credential, CredentialKind, Scope};

use crate::backend::server_record;
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::state::AppState;

/// The scopes that may see sandboxes (list them, read one's details).
pub const SEE_SANDBOXES: [Scope; 4] = [Scope::Read, Scope::Exec, Scope::RunCode, Scope::Files];

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub credential: Credential,
    pub ctx: RequestCtx,
}

/// The token of an `Authorization: Bearer` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?;
    let v = v.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let ctx = parts
            .extensions
            .get::<RequestCtx>()
            .cloned()
            .unwrap_or_else(|| RequestCtx::from_headers(&parts.headers));
        let Some(token) = bearer(&parts.headers) else {
            return Err(unauthenticated(state, &ctx, ServerError::Unauthenticated).await);
        };
        let c = match authenticate(state, token).await {
            Ok(c) => c,
            Err(e) => return Err(unauthenticated(state, &ctx, e).await),
        };
        let caller = Caller::admitted(state, c, ctx).await?;
        // For extractors that follow (a body's size limit is the caller's tenant's).
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// Records a refused credential (401: none, or an unknown, malformed, revoked or expired
/// one; at a bounded rate, never the secret) and gives the error back.
pub async fn unauthenticated(state: &AppState, ctx: &RequestCtx, e: ServerError) -> ServerError {
    state.refusals.refused(state, ctx, None, &e).await;
    e
}

/// The live credential of a bearer token (an API key or a capability token whose key is
/// live too).
pub async fn authenticate(state: &AppState, token: &str) -> Result<Credential, ServerError> {
    let (kind, id, secret) = credential::parse_token(token).ok_or(ServerError::BadCredential)?;
    let c = live_credential(state, id).await?;
    if !credential::secret_matches(&c, kind, secret) {
        return Err(ServerError::BadCredential);
    }
    Ok(c)
}

async fn load_credential(state: &AppState, id: String) -> Result<Option<Credential>, ServerError> {
    let store = state.backend.store().clone();
    tokio::task::spawn_blocking(move || store.credential(&id))
        .await
        .map_err(|_| ServerError::Internal {
            action: "checking a credential",
        })?
        .map_err(ServerError::from)
}

/// Credential `id` if it is live, and so is the key a capability token was minted from (a
/// token lives no longer than its key).
pub async fn live_credential(state: &AppState, id: &str) -> Result<Credential, ServerError> {
    let c = load_credential(state, id.to_string())
        .await?
        .filter(|c| c.is_live(Utc::now()))
        .ok_or(ServerError::BadCredential)?;
    if let Some(parent) = c.parent.clone() {
        let p = load_credential(state, parent).await?;
        if !p.is_some_and(|p| p.is_live(Utc::now())) {
            return Err(ServerError::BadCredential);
        }
    }
    Ok(c)
}

impl Caller {
    /// The caller of a request whose credential is now known: the request takes its place
    /// as the credential's tenant's (`crate::admission`) before anything else (a body) is
    /// read; refused (recorded) when that tenant holds its share or the server is full.
    pub async fn admitted(
        state: &AppState,
        credential: Credential,
        ctx: RequestCtx,
    ) -> Result<Caller, ServerError> {
        if let Err(e) = crate::admission::admit(&ctx, &credential) {
            state
                .refusals
                .refused(state, &ctx, Some(&credential.tenant), &e)
                .await;
            return Err(e);
        }
        Ok(Caller { credential, ctx })
    }

    /// A place among the tenant's long-polls, held while the guard lives; refused
    /// (recorded, 429 `SBX_E1818` with `Retry-After`) past the tenant's bound.
    pub async fn long_poll(
        &self,
        state: &AppState,
    ) -> Result<crate::admission::LongPoll, ServerError> {
        match state.admission.long_poll(self.tenant()) {
            Ok(g) => Ok(g),
            Err(e) => {
                state
                    .refusals
                    .refused(state, &self.ctx, Some(self.tenant()), &e)
                    .await;
                Err(e)
            }
        }
    }

    pub fn tenant(&self) -> &str {
        &self.credential.tenant
    }

    /// How the caller is named in records (`api key <id>` or `capability token <id>`), never
    /// the secret. No `name: value` shape, which the redactor would take for a secret.
    pub fn name(&self) -> String {
        match self.credential.kind {
            CredentialKind::ApiKey => format!("api key {}", self.credential.id),
            CredentialKind::Capability => format!("capability token {}", self.credential.id),
        }
    }

    pub fn is_capability(&self) -> bool {
        self.credential.kind == CredentialKind::Capability
    }

    /// Refuses (403, recorded, naming the first) unless the credential has one of `any`.
    pub async fn require_any(&self, state: &AppState, any: &[Scope]) -> Result<(), ServerError> {
        match any.iter().find(|s| self.credential.scopes.contains(**s)) {
            Some(_) => Ok(()),
            None => {
                self.require(state, any.first().copied().unwrap_or(Scope::Read))
                    .await
            }
        }
    }

    /// Refuses (403, recorded) unless the credential has `scope`.
    pub async fn require(&self, state: &AppState, scope: Scope) -> Result<(), ServerError> {
        if self.credential.scopes.contains(scope) {
            return Ok(());
        }
        let e = ServerError::MissingScope {
            scope: scope.as_str(),
        };
        let mut rec = server_record(
            "http.forbidden",
            self.tenant(),
            &self.ctx,
            Verdict::Deny,
            format!("{} lacks the `{scope}` scope", self.name()),
        );
        rec.error_code = Some(sandboxio_core::ErrorCode::code(&e).to_string());
        state.backend.record(rec).await;
        Err(e)
    }

    /// Refuses (403, recorded) a caller that may not act on a sandbox as a whole (delete,
    /// pause, resume, extend its lifetime: each ends or stops what runs in it, or keeps its
    /// workspace alive). An API key needs exec, run_code or files (what creates a
    /// sandbox). A capability token reaches only what its scopes and directory reach, so
    /// it needs exec or run_code (which already reach the whole sandbox) and no directory:
    /// a token for one directory's files never removes the rest.
    pub async fn require_whole_sandbox(&self, state: &AppState) -> Result<(), ServerError> {
        let scopes = &self.credential.scopes;
        let ok = if self.is_capability() {
            self.credential.dir.is_none()
                && (scopes.contains(Scope::Exec) || scopes.contains(Scope::RunCode))
        } else {
            [Scope::Exec, Scope::RunCode, Scope::Files]
                .iter()
                .any(|s| scopes.contains(*s))
        };
        if ok {
            return Ok(());
        }
        // The scope asked for is exec whatever the token lacks (a token with a directory
        // cannot carry it); the record says so.
        let e = ServerError::MissingScope { scope: "exec" };
        let mut rec = server_record(
            "http.forbidden",
            self.tenant(),
            &self.ctx,
            Verdict::Deny,
            format!(
                "{} may not act on the whole sandbox (needs the `exec` or `run_code` scope{})",
                self.name(),
                if self.credential.dir.is_some() {
                    " and no directory"
                } else {
                    ""
                }
            ),
        );
        rec.error_code = Some(sandboxio_core::ErrorCode::code(&e).to_string());
        state.backend.record(rec).await;
        Err(e)
    }

    /// Whether the caller may see sandbox `id` at all (a token sees only its own). Anything
    /// else answers 404, as if it did not exist.
    pub fn may_see_sandbox(&self, id: &str) -> bool {
        match &self.credential.sandbox {
            Some(s) => s == id,
            None => !self.is_capability(),
        }
    }

    /// Whether a file path is inside the directory a token is confined to.
    pub fn may_touch_path(&self, path: &str) -> bool {
        let Some(dir) = &self.credential.dir else {
            return true;
        };
        let (Some(dir), Some(path)) = (components(dir), components(path)) else {
            return false;
        };
        path.len() >= dir.len() && path[..dir.len()] == dir[..]
    }
}

/// The lexical components of a relative path (`.` and empty parts dropped); `None` when it
/// climbs (`..`) or is absolute.
pub fn components(p: &str) -> Option<Vec<&str>> {
    if p.starts_with('/') {
        return None;
    }
    let mut v = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => v.push(c),
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_refuse_climbing_and_absolute_paths() {
        assert_eq!(components("a/./b//c"), Some(vec!["a", "b", "c"]));
        assert_eq!(components("a/../b"), None);
        assert_eq!(components("/etc"), None);
        assert_eq!(components("."), Some(vec![]));
    }
}
