//! Streamable HTTP at `/mcp` inside `sandboxio serve`: the server's credential check
//! (`Authorization: Bearer <API key>`, the same `Caller` extractor as the `/v1` API) runs
//! before the MCP service sees the request, and the caller travels with it to the
//! handler, which checks the tool's scope and acts as the key's tenant.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use sandboxio_server::auth::Caller;
use sandboxio_server::AppState;
use utoipa_axum::router::OpenApiRouter;

use crate::handler::{Front, McpOptions, SandboxioMcp};

/// Where the service is mounted.
pub const PATH: &str = "/mcp";

/// Authenticates before MCP sees anything: no credential, or a bad one, is answered by
/// the server (401, problem+json) and never reaches a handler.
async fn authenticate(caller: Caller, mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The caller the server authenticated for this request.
pub(crate) fn caller(cx: &RequestContext<RoleServer>) -> Option<Caller> {
    cx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

/// The `/mcp` route set, for `sandboxio_server::app::router`'s `extra` list.
pub fn routes(opts: McpOptions, state: AppState) -> OpenApiRouter<AppState> {
    let front = Front::Http(state.clone());
    // Every request carries a bearer credential, which a page that rebinds a name to this
    // address cannot supply: the `Host` allowlist (a defence for unauthenticated local
    // servers) would only refuse legitimate names of this host.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(SandboxioMcp::new(opts.clone(), front.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    OpenApiRouter::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn_with_state(state, auth_layer))
}

async fn auth_layer(
    State(_): State<AppState>,
    caller: Caller,
    req: Request,
    next: Next,
) -> Response {
    authenticate(caller, req, next).await
}
