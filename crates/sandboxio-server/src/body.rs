//! Request bodies: JSON read under a size limit, with unknown fields refused by the types
//! (`deny_unknown_fields`) and every failure a coded problem, never axum's plain text.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ServerError;
use crate::state::AppState;

/// The most a body read whole as bytes may hold (axum's own default for `Bytes`).
pub const BYTES_LIMIT: usize = 2 << 20;

/// A body read only once the request's credential is known (`crate::admission`): a
/// request refused before that gets an empty one, never read, and its handler answers the
/// refusal without waiting for a body it would not use.
pub struct AfterAuth(pub Bytes);

impl FromRequest<AppState> for AfterAuth {
    type Rejection = ServerError;

    async fn from_request(req: Request, _: &AppState) -> Result<Self, Self::Rejection> {
        let admitted = req
            .extensions()
            .get::<crate::context::RequestCtx>()
            .is_none_or(crate::admission::is_admitted);
        if !admitted {
            return Ok(AfterAuth(Bytes::new()));
        }
        read_limited(req.into_body(), BYTES_LIMIT)
            .await
            .map(AfterAuth)
    }
}

/// A JSON body of at most the configured JSON limit.
pub struct ApiJson<T>(pub T);

/// Reads a whole body of at most `limit` bytes.
pub async fn read_limited(body: Body, limit: usize) -> Result<Bytes, ServerError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let inner = e.into_inner();
        if inner
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            ServerError::TooLarge { limit }
        } else if let Some(r) = crate::admission::body_refused(inner.as_ref()) {
            match r {
                crate::admission::BodyRefused::Busy => ServerError::UnauthenticatedBusy,
                crate::admission::BodyRefused::TooSlow => ServerError::SlowBody {
                    secs: crate::admission::UNAUTHENTICATED_BODY_TIME.as_secs(),
                },
            }
        } else {
            ServerError::MalformedJson {
                why: "the body could not be read".into(),
            }
        }
    })
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ServerError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ServerError::MalformedJson {
            why: "the body is empty".into(),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        let why = e.to_string();
        match e.classify() {
            Category::Data => ServerError::InvalidBody { why },
            Category::Syntax | Category::Eof | Category::Io => ServerError::MalformedJson { why },
        }
    })
}

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ServerError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        // The caller's tenant's limit (the `Caller` extractor, which runs first, left it).
        let caller = req.extensions().get::<crate::auth::Caller>();
        let limit = caller
            .map(|c| state.opts.quota(c.tenant()).json_limit)
            .unwrap_or(state.opts.json_limit);
        let tenant = caller.map(|c| c.tenant().to_string());
        let ctx = req
            .extensions()
            .get::<crate::context::RequestCtx>()
            .cloned();
        let bytes = match read_limited(req.into_body(), limit).await {
            Ok(b) => b,
            Err(e) => {
                // A body refused for want of a place or time (the sign-in's, whose key is
                // in it) is recorded like the server's other busy refusals.
                if let Some(ctx) = &ctx {
                    state
                        .refusals
                        .refused(state, ctx, tenant.as_deref(), &e)
                        .await;
                }
                return Err(e);
            }
        };
        parse_json(&bytes).map(ApiJson)
    }
}
