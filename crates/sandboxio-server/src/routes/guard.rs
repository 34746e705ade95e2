//! The prologue routes share, as extractors: the caller must hold a scope (refused 403 and
//! recorded, `Caller::require`), then the sandbox of the path's `{id}` must be the caller's
//! (404 otherwise, 410 for one lost at a restart), then the code context of `{cid}` must be
//! in it. A handler names what it needs in its signature:
//!
//! - [`Scoped<S>`]: the caller, holding scope `S`;
//! - [`InSandbox<S>`]: also the sandbox `{id}`;
//! - [`InContext`]: also the code context `{cid}` (scope `run_code`).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::extract::Path;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sandboxio_gateway::credential::Scope;

use crate::auth::Caller;
use crate::contexts::Context;
use crate::error::ServerError;
use crate::sessions::Session;
use crate::state::AppState;

/// A scope a route needs, as a type.
pub trait NeedsScope: Send + Sync {
    const SCOPE: Scope;
}

macro_rules! scope_type {
    ($name:ident, $scope:expr) => {
        #[doc = concat!("The `", stringify!($name), "` scope.")]
        pub struct $name;
        impl NeedsScope for $name {
            const SCOPE: Scope = $scope;
        }
    };
}

scope_type!(ReadScope, Scope::Read);
scope_type!(AdminScope, Scope::Admin);
scope_type!(RunCodeScope, Scope::RunCode);

/// The caller, holding scope `S`.
pub struct Scoped<S> {
    pub caller: Caller,
    _scope: PhantomData<S>,
}

impl<S: NeedsScope> Scoped<S> {
    /// A caller authenticated some other way (the dashboard's session), checked for `S`.
    pub async fn check(st: &AppState, caller: Caller) -> Result<Scoped<S>, ServerError> {
        caller.require(st, S::SCOPE).await?;
        Ok(Scoped {
            caller,
            _scope: PhantomData,
        })
    }
}

impl<S: NeedsScope> FromRequestParts<AppState> for Scoped<S> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, st).await?;
        Scoped::check(st, caller).await
    }
}

async fn param(parts: &mut Parts, st: &AppState, name: &str) -> Result<String, ServerError> {
    // A segment that is not UTF-8 once percent-decoded is the caller's error (422).
    let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, st).await?;
    params.get(name).cloned().ok_or(ServerError::Internal {
        action: "reading the path",
    })
}

/// The caller, holding scope `S`, and its sandbox of the path's `{id}`.
pub struct InSandbox<S> {
    pub caller: Caller,
    pub session: Arc<Session>,
    _scope: PhantomData<S>,
}

impl<S: NeedsScope> FromRequestParts<AppState> for InSandbox<S> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let Scoped { caller, .. } = Scoped::<S>::from_request_parts(parts, st).await?;
        let id = param(parts, st, "id").await?;
        let session = super::session_for(st, &caller, &id)?;
        Ok(InSandbox {
            caller,
            session,
            _scope: PhantomData,
        })
    }
}

impl<S: NeedsScope> InSandbox<S> {
    /// A caller authenticated some other way (the E2B API) in `session`, checked for `S`.
    pub async fn check(
        st: &AppState,
        caller: Caller,
        session: Arc<Session>,
    ) -> Result<InSandbox<S>, ServerError> {
        caller.require(st, S::SCOPE).await?;
        Ok(InSandbox {
            caller,
            session,
            _scope: PhantomData,
        })
    }
}

/// The caller (scope `run_code`), its sandbox `{id}` and the code context `{cid}` in it.
pub struct InContext {
    pub caller: Caller,
    pub session: Arc<Session>,
    pub context: Arc<Context>,
}

pub fn context_not_found(cid: &str) -> ServerError {
    ServerError::NotFound {
        what: "context",
        id: cid.chars().take(64).collect(),
    }
}

impl FromRequestParts<AppState> for InContext {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let InSandbox {
            caller, session, ..
        } = InSandbox::<RunCodeScope>::from_request_parts(parts, st).await?;
        let cid = param(parts, st, "cid").await?;
        let context = session
            .contexts
            .get(&cid)
            .ok_or_else(|| context_not_found(&cid))?;
        Ok(InContext {
            caller,
            session,
            context,
        })
    }
}
