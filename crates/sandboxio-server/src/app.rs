//! The whole HTTP application: `/healthz`, `/readyz`, the `/v1` API and its OpenAPI
//! document, with the layers every request passes (ids and trace context, the concurrency
//! limit, the request timeout) and problem answers for unknown routes.
//!
//! Other front ends mount here: pass their `OpenApiRouter`s to [`router`]; they share the
//! state, the layers, the `Caller` extractor (API keys, scopes, tenants) and the OpenAPI
//! document.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::admission::{Gated, Ticket};
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandboxio",
        description = "Run code and call tools in sandboxes behind a policy gateway: every operation passes the kill switch, policy, rate limits, budgets and approvals, and leaves one record in the audit trail."
    ),
    modifiers(&Bearer),
    tags(
        (name = "sandboxes", description = "sandboxes as sessions with a workspace"),
        (name = "exec", description = "commands and code, one operation each"),
        (name = "contexts", description = "stateful code contexts: a kernel keeps variables between calls"),
        (name = "files", description = "files of a sandbox's workspace"),
        (name = "approvals", description = "asks waiting for a person"),
        (name = "admin", description = "kill switch and costs"),
        (name = "operations", description = "health and readiness"),
    )
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Refuses new work while draining, gives the request its place ([`Ticket`]: taken when
/// its credential is known, see `crate::admission`), bounds its time, and records a
/// refusal of admission (at a bounded rate, `crate::refusals`).
async fn admission(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let ticket = Arc::new(Ticket::new(
        st.admission.clone(),
        req.method(),
        req.uri().path(),
    ));
    let mut ctx = req
        .extensions()
        .get::<RequestCtx>()
        .cloned()
        .unwrap_or_else(|| RequestCtx::from_headers(req.headers()));
    ctx.ticket = Some(ticket.clone());
    if st.draining.load(Ordering::SeqCst) {
        let e = ServerError::Busy { limit: 0 };
        st.refusals.refused(&st, &ctx, None, &e).await;
        return e.into_response();
    }
    req.extensions_mut().insert(ctx);
    let req = req.map(|b| Body::new(Gated::new(b, ticket.clone())));
    let limit = st.opts.request_timeout;
    let res = match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        // The handler is dropped: an operation it awaited is cancelled and still recorded.
        Err(_) => ServerError::Timeout {
            secs: limit.as_secs(),
        }
        .into_response(),
    };
    ticket.end();
    res
}

async fn wrong_method(req: Request) -> Response {
    ServerError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().chars().take(256).collect(),
    }
    .into_response()
}

async fn no_route(req: Request) -> Response {
    ServerError::NoRoute {
        method: req.method().to_string(),
        path: req.uri().path().chars().take(256).collect(),
    }
    .into_response()
}

/// The application, with `extra` route sets mounted beside the API.
pub fn router(state: AppState, extra: Vec<OpenApiRouter<AppState>>) -> Router {
    let mut api = OpenApiRouter::with_openapi(ApiDoc::openapi()).merge(crate::routes::api());
    for r in extra {
        api = api.merge(r);
    }
    let (api, mut doc) = api.split_for_parts();
    let (health, health_doc) = crate::routes::health::routes().split_for_parts();
    doc.merge(health_doc);
    let api = api
        .route("/v1/openapi.json", get(move || async move { Json(doc) }))
        .layer(middleware::from_fn_with_state(state.clone(), admission));
    Router::new()
        .merge(health)
        .merge(api)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn(crate::context::stamp))
        .with_state(state)
}
