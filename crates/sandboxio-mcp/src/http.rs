//! Streamable HTTP at `/mcp` inside `sandboxio serve`: the server's credential check
//! (`Authorization: Bearer <API key>`, the same `Caller` extractor as the `/v1` API) runs
//! before the MCP service sees the request, and the caller travels with it to the
//! handler, which checks the tool's scope and acts as the key's tenant.
//!
//! Each MCP session (`Mcp-Session-Id`) belongs to the key that opened it: a request of
//! another key naming it is answered 404, like a session that does not exist, so no
//! other key sees its messages (its asks), answers them or uses its sandboxes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use sandboxio_server::auth::Caller;
use sandboxio_server::AppState;
use utoipa_axum::router::OpenApiRouter;

use crate::handler::{Front, McpOptions, SandboxioMcp};

/// Where the service is mounted.
pub const PATH: &str = "/mcp";

/// The most MCP sessions one tenant may hold at once (by default).
pub const MAX_SESSIONS_PER_TENANT: usize = 64;
/// The most MCP sessions the server holds at once (by default).
pub const MAX_SESSIONS: usize = 1024;
/// How long a session may stay unused before it is closed (its sandboxes with it).
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(300);

/// The header naming a session.
const SESSION_HEADER: &str = "mcp-session-id";

tokio::task_local! {
    /// While a request opens a session: the lease its handler holds for as long as the
    /// session lives (the factory of handlers runs inside that request).
    static OPENING: Arc<()>;
}

/// The lease of the session being opened by the current request, if any.
pub(crate) fn opening_lease() -> Option<Arc<()>> {
    OPENING.try_with(|l| l.clone()).ok()
}

/// Who opened a session, and whether its handler still lives.
struct Owned {
    credential: String,
    tenant: String,
    alive: Weak<()>,
}

/// The sessions of `/mcp` and the key that opened each.
pub(crate) struct Owners {
    map: Mutex<HashMap<String, Owned>>,
    /// Sessions being opened now, per tenant (counted against the limits).
    opening: Mutex<HashMap<String, usize>>,
    manager: Arc<LocalSessionManager>,
    per_tenant: usize,
    total: usize,
}

/// A place taken for a session being opened, given back when the request ends.
struct Opening<'a> {
    owners: &'a Owners,
    tenant: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Ok(mut o) = self.owners.opening.lock() {
            if let Some(n) = o.get_mut(&self.tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    o.remove(&self.tenant);
                }
            }
        }
    }
}

impl Owners {
    /// Forgets sessions whose handler ended (closed, idle past the keep-alive), and lets
    /// the session manager drop them too.
    fn prune(&self, map: &mut HashMap<String, Owned>) {
        let dead: Vec<String> = map
            .iter()
            .filter(|(_, o)| o.alive.strong_count() == 0)
            .map(|(id, _)| id.clone())
            .collect();
        for id in dead {
            map.remove(&id);
            let manager = self.manager.clone();
            tokio::spawn(async move {
                let _ = manager.close_session(&id.as_str().into()).await;
            });
        }
    }

    /// Whether the session `id` lives and was opened by `credential`.
    fn owned_by(&self, id: &str, credential: &str) -> bool {
        let Ok(mut map) = self.map.lock() else {
            return false;
        };
        self.prune(&mut map);
        map.get(id).is_some_and(|o| o.credential == credential)
    }

    fn insert(&self, id: String, credential: String, tenant: String, alive: Weak<()>) {
        if let Ok(mut map) = self.map.lock() {
            map.insert(
                id,
                Owned {
                    credential,
                    tenant,
                    alive,
                },
            );
        }
    }

    /// A place for one more session of `tenant`, or why there is none.
    fn open(&self, tenant: &str) -> Result<Opening<'_>, String> {
        let Ok(mut map) = self.map.lock() else {
            return Err("the MCP sessions' state is unusable".into());
        };
        self.prune(&mut map);
        let Ok(mut opening) = self.opening.lock() else {
            return Err("the MCP sessions' state is unusable".into());
        };
        let mine = map.values().filter(|o| o.tenant == tenant).count()
            + opening.get(tenant).copied().unwrap_or(0);
        let all = map.len() + opening.values().sum::<usize>();
        if mine >= self.per_tenant {
            return Err(format!(
                "tenant `{tenant}` holds the most MCP sessions it may ({}); close one (DELETE /mcp) or let an idle one expire",
                self.per_tenant
            ));
        }
        if all >= self.total {
            return Err(format!(
                "the server holds the most MCP sessions it may ({}); try again later",
                self.total
            ));
        }
        *opening.entry(tenant.to_string()).or_insert(0) += 1;
        Ok(Opening {
            owners: self,
            tenant: tenant.to_string(),
        })
    }
}

/// Authenticates before MCP sees anything: no credential, or a bad one, is answered by
/// the server (401, problem+json) and never reaches a handler. A request naming a session
/// another key opened is answered like one naming no session that exists (404).
async fn authenticate(owners: &Owners, caller: Caller, mut req: Request, next: Next) -> Response {
    let credential = caller.credential.id.clone();
    let tenant = caller.tenant().to_string();
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    req.extensions_mut().insert(caller);
    let sent_json = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
    if let Some(id) = session {
        if !owners.owned_by(&id, &credential) {
            return sandboxio_server::ServerError::NotFound {
                what: "MCP session",
                id,
            }
            .into_response();
        }
        return coded(next.run(req).await, sent_json).await;
    }
    // No session named: this may open one (an `initialize`), owned by this key.
    let place = match owners.open(&tenant) {
        Ok(p) => p,
        Err(why) => {
            return sandboxio_server::problem::Problem::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "too many MCP sessions",
                "SBX_E1918",
                why,
            )
            .into_response()
        }
    };
    let lease = Arc::new(());
    let res = coded(OPENING.scope(lease.clone(), next.run(req)).await, sent_json).await;
    if let Some(id) = res
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        owners.insert(id.to_string(), credential, tenant, Arc::downgrade(&lease));
    }
    drop(place);
    res
}

/// The MCP transport's own refusals (a wrong `Accept` or `Content-Type`, a body that is not
/// JSON-RPC, an unknown session) come as plain text: answer them as the server answers
/// every refusal, a problem (`SBX_E1920`) with the transport's words as its detail and the
/// same status, except that a body sent as JSON which is not a JSON-RPC message is a bad
/// request (400), not an unsupported media type (the transport's 415).
async fn coded(res: Response, sent_json: bool) -> Response {
    let mut status = res.status();
    if sent_json && status == axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        status = axum::http::StatusCode::BAD_REQUEST;
    }
    let is_json = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("json") || ct.starts_with("text/event-stream"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return res;
    }
    let text = match axum::body::to_bytes(res.into_body(), 4096).await {
        Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b).trim().to_string(),
        _ => status.canonical_reason().unwrap_or("refused").to_string(),
    };
    sandboxio_server::problem::Problem::new(
        status,
        "MCP transport refused the request",
        "SBX_E1920",
        text,
    )
    .into_response()
}

/// The caller the server authenticated for this request.
pub(crate) fn caller(cx: &RequestContext<RoleServer>) -> Option<Caller> {
    cx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

/// The `/mcp` route set, for `sandboxio_server::app::router`'s `extra` list.
pub fn routes(mut opts: McpOptions, state: AppState) -> OpenApiRouter<AppState> {
    let front = Front::Http(state.clone());
    // MCP sandboxes count against the tenant's quota together with the HTTP API's.
    // (And the other way round: the HTTP API's creates count the MCP sessions' sandboxes.)
    let sessions = Arc::downgrade(&state.sessions);
    let quota = Arc::new(
        crate::sessions::Quota::new(move |tenant| {
            sessions
                .upgrade()
                .map_or((0, 0), |s| (s.max_for(tenant), s.list(tenant).len()))
        })
        .with_gate(state.sessions.quota_gate()),
    );
    let held = Arc::downgrade(&quota);
    state.sessions.count_elsewhere(Box::new(move |tenant| {
        held.upgrade().map_or(0, |q| q.held(tenant))
    }));
    opts.quota = Some(quota);
    // Every request carries a bearer credential, which a page that rebinds a name to this
    // address cannot supply: the `Host` allowlist (a defence for unauthenticated local
    // servers) would only refuse legitimate names of this host.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(opts.session_idle);
    let manager = Arc::new(manager);
    let owners = Arc::new(Owners {
        map: Mutex::new(HashMap::new()),
        opening: Mutex::new(HashMap::new()),
        manager: manager.clone(),
        per_tenant: opts.max_sessions_per_tenant,
        total: opts.max_sessions,
    });
    let service = StreamableHttpService::new(
        move || {
            let mut h = SandboxioMcp::new(opts.clone(), front.clone());
            h.lease = opening_lease();
            Ok(h)
        },
        manager,
        config,
    );
    OpenApiRouter::new()
        .route_service(PATH, service)
        .route_layer(middleware::from_fn_with_state(
            state,
            move |State(_): State<AppState>, caller: Caller, req: Request, next: Next| {
                let owners = owners.clone();
                async move { authenticate(&owners, caller, req, next).await }
            },
        ))
}
