//! E2B's lifecycle REST API over sandboxio's sessions: create (a template is a sandboxio
//! profile: tier and limits; `timeout` is the sandbox's lifetime; `metadata` its labels,
//! so costs and records carry them; `envVars` every command's environment), list, get,
//! kill, set the timeout, connect. Authenticated by `X-API-Key` = a sandboxio API key.
//! Options sandboxio cannot honour (internet access, network rules, MCP, volumes, auto
//! pause) are refused with `SBX_E2503`; pause and resume are the server's own (`connect`
//! resumes); metrics, logs, snapshots and forks answer 501 with `SBX_E2504`: never a
//! success that did nothing.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::body::AfterAuth;
use crate::extract::{Path, Query};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use sandboxio_core::Verdict;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{api_caller, ApiCaller, Ctx};
use super::error::E2bError;
use super::registry::Entry;
use super::{E2b, ENVD_VERSION};
use crate::auth::{Caller, SEE_SANDBOXES};
use crate::backend::server_record;
use crate::error::ServerError;
use crate::sessions::{Session, SessionSpec};
use crate::state::AppState;

/// E2B's default sandbox timeout, when the request gives none.
const DEFAULT_TIMEOUT_S: i64 = 300;
/// The label that names a sandbox's E2B template.
const TEMPLATE_LABEL: &str = "e2b_template";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(default)]
    timeout: Option<i64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default)]
    auto_resume: Option<Value>,
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    network: Option<Value>,
    #[serde(default)]
    mcp: Option<Value>,
    #[serde(default)]
    iam: Option<Value>,
    #[serde(default)]
    volume_mounts: Option<Value>,
    #[serde(default)]
    secure: Option<bool>,
    #[serde(default)]
    auto_pause_memory: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct TimeoutBody {
    #[serde(default)]
    timeout: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default)]
    metadata: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    next_token: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    started_after: Option<String>,
    #[serde(default)]
    template: Option<String>,
}

fn rest(r: Result<(StatusCode, Value), E2bError>) -> Response {
    match r {
        Ok((StatusCode::NO_CONTENT, _)) => StatusCode::NO_CONTENT.into_response(),
        Ok((s, v)) => (s, Json(v)).into_response(),
        Err(e) => rest_err(&e),
    }
}

pub fn rest_err(e: &E2bError) -> Response {
    (e.status(), Json(e.rest_body())).into_response()
}

fn parse<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, E2bError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| E2bError::BadRequest {
        why: format!("the body is not valid: {e}"),
    })
}

/// The API-key caller of a lifecycle call, allowed to act on sandboxes.
async fn acting(
    st: &AppState,
    h: &HeaderMap,
    ctx: crate::context::RequestCtx,
) -> Result<Caller, E2bError> {
    let caller = api_caller(st, h, ctx).await?;
    may_act(st, &caller).await?;
    Ok(caller)
}

async fn may_act(st: &AppState, caller: &Caller) -> Result<(), E2bError> {
    caller.require_whole_sandbox(st).await?;
    Ok(())
}

fn timeout_of(secs: i64, max: Duration) -> Result<Duration, E2bError> {
    if secs <= 0 || secs as u64 > max.as_secs() {
        return Err(E2bError::BadTimeout {
            secs,
            max: max.as_secs(),
        });
    }
    Ok(Duration::from_secs(secs as u64))
}

fn unsupported(what: &str, why: &'static str) -> E2bError {
    E2bError::Unsupported {
        what: what.into(),
        why,
    }
}

fn present(v: &Option<Value>) -> bool {
    v.as_ref().is_some_and(|v| match v {
        Value::Null | Value::Bool(false) => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    })
}

/// Refuses what sandboxio cannot honour, naming it.
fn check_options(b: &NewSandbox) -> Result<(), E2bError> {
    if b.allow_internet_access == Some(true) || present(&b.network) {
        return Err(unsupported(
            "network",
            "network access comes from sandboxio's `[network]` config and policy, not the request; leave `allow_internet_access` and `network` unset",
        ));
    }
    if present(&b.mcp) {
        return Err(unsupported("mcp", "use sandboxio's MCP server (`/mcp`)"));
    }
    if present(&b.volume_mounts) {
        return Err(unsupported("volume_mounts", "sandboxes have one workspace"));
    }
    if present(&b.iam) {
        return Err(unsupported("iam", "workload identity is not provided"));
    }
    if b.auto_pause == Some(true) || present(&b.auto_resume) || present(&b.auto_pause_memory) {
        return Err(unsupported(
            "auto pause",
            "a sandbox is closed when its timeout passes",
        ));
    }
    let _ = b.secure;
    if let Some(m) = &b.metadata {
        crate::labels::check(m)?;
    }
    for (name, value) in b.env_vars.iter().flatten() {
        if let Some(why) = sandboxio_core::operation::env_problem(name, value) {
            return Err(E2bError::BadRequest {
                why: format!("envVars {name:?}: {why}"),
            });
        }
    }
    Ok(())
}

fn mib(b: sandboxio_core::ByteSize) -> u64 {
    b.bytes() / (1 << 20)
}

/// E2B's `Sandbox` (create and connect answers), with the envd access token.
/// E2B's `Sandbox`, with an access token given to `token_for` (the calls made with it act
/// as that credential).
fn sandbox_json(e2b: &E2b, e: &Entry, token_for: &Caller) -> Value {
    let token = e2b
        .registry
        .access_token(&e.sandbox_id, &token_for.credential.id);
    json!({
        "templateID": e.template,
        "sandboxID": e.sandbox_id,
        "clientID": "sandboxio",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": token,
        // The interpreter SDK sends this on its context calls, which carry no other token.
        "trafficAccessToken": token,
        "alias": e.template,
    })
}

/// E2B's `ListedSandbox` / `SandboxDetail` (no access token).
fn detail_json(e: &Entry, s: &Session) -> Value {
    let l = &s.spec.limits;
    json!({
        "templateID": e.template,
        "sandboxID": e.sandbox_id,
        "clientID": "sandboxio",
        "alias": e.template,
        "startedAt": s.created_at.to_rfc3339(),
        "endAt": s.expires_at().to_rfc3339(),
        "cpuCount": (l.cpu_quota_millis.div_ceil(1000)).max(1),
        "memoryMB": mib(l.memory),
        "diskSizeMB": mib(l.output_size),
        "state": s.state(),
        "envdVersion": ENVD_VERSION,
        "metadata": e.metadata,
    })
}

async fn record(st: &AppState, caller: &Caller, sandbox: &str, event: &str, reason: String) {
    let mut rec = server_record(event, caller.tenant(), &caller.ctx, Verdict::Allow, reason);
    rec.session_id = Some(sandbox.to_string());
    st.backend.record(rec).await;
}

/// The caller's E2B sandbox `id` (another tenant's, or one not made over E2B, is 404).
fn find(
    st: &AppState,
    e2b: &E2b,
    caller: &Caller,
    id: &str,
) -> Result<(Arc<Entry>, Arc<Session>), E2bError> {
    let nf = || {
        E2bError::Server(ServerError::NotFound {
            what: "sandbox",
            id: id.chars().take(64).collect(),
        })
    };
    if !caller.may_see_sandbox(id) {
        return Err(nf());
    }
    let e = match e2b.registry.get(id) {
        Ok(e) => e.filter(|e| e.tenant == caller.tenant()).ok_or_else(nf)?,
        // Damaged facts name no tenant: reported only to a tenant that has the sandbox.
        Err(d) if st.sessions.get(caller.tenant(), id).is_some() => {
            return Err(super::auth::damaged(id, d))
        }
        Err(_) => return Err(nf()),
    };
    let Some(s) = st.sessions.get(caller.tenant(), id) else {
        e2b.registry.remove(id);
        return Err(nf());
    };
    Ok((e, s))
}

/// What a lifecycle call on sandbox `{id}` needs from its caller, as a type.
pub trait Access: Send + Sync {
    /// Whether the call changes the sandbox (which needs a scope that acts on sandboxes).
    const ACTS: bool;
}

/// A call that only reads the sandbox.
pub struct Reads;
impl Access for Reads {
    const ACTS: bool = false;
}

/// A call that changes the sandbox.
pub struct Acts;
impl Access for Acts {
    const ACTS: bool = true;
}

/// The sandbox of a lifecycle call and who calls.
pub struct Target {
    pub caller: Caller,
    pub entry: Arc<Entry>,
    pub session: Arc<Session>,
}

/// The prologue of the lifecycle calls on `/sandboxes/{id}`, as an extractor: the API-key
/// caller (allowed to act when `A` acts), then the caller's sandbox `{id}`. The outcome is
/// kept for the handler, which answers an error in E2B's REST form.
pub struct OnSandbox<A>(pub Result<Target, E2bError>, pub PhantomData<A>);

impl<A: Access> FromRequestParts<AppState> for OnSandbox<A> {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Infallible> {
        let Ctx(ctx) = Ctx::from_request_parts(parts, st).await?;
        let id = Path::<String>::from_request_parts(parts, st)
            .await
            .map(|Path(id)| id)
            .map_err(|_| E2bError::BadRequest {
                why: "the path names no sandbox".into(),
            });
        let outcome = async {
            let id = id?;
            let e2b = parts
                .extensions
                .get::<Arc<E2b>>()
                .ok_or(ServerError::Internal {
                    action: "finding the E2B state",
                })?;
            let caller = if A::ACTS {
                acting(st, &parts.headers, ctx).await?
            } else {
                let c = api_caller(st, &parts.headers, ctx).await?;
                c.require_any(st, &SEE_SANDBOXES).await?;
                c
            };
            let (entry, session) = find(st, e2b, &caller, &id)?;
            Ok(Target {
                caller,
                entry,
                session,
            })
        };
        Ok(OnSandbox(outcome.await, PhantomData))
    }
}

/// `POST /v2/sandboxes` (and the older `POST /sandboxes`).
/// The key is checked from the headers before the body is read.
pub async fn create(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    ApiCaller(caller): ApiCaller,
    AfterAuth(body): AfterAuth,
) -> Response {
    rest(create_inner(&st, &e2b, caller, &body).await)
}

async fn create_inner(
    st: &AppState,
    e2b: &E2b,
    caller: Result<Caller, E2bError>,
    body: &[u8],
) -> Result<(StatusCode, Value), E2bError> {
    let caller = caller?;
    if caller.is_capability() {
        return Err(ServerError::MissingScope { scope: "exec" }.into());
    }
    may_act(st, &caller).await?;
    let b: NewSandbox = serde_json::from_slice(body).map_err(|e| E2bError::BadRequest {
        why: format!("the body is not valid: {e}"),
    })?;
    check_options(&b)?;
    let template =
        e2b.config
            .template(&b.template_id)
            .ok_or_else(|| E2bError::UnknownTemplate {
                name: b.template_id.chars().take(64).collect(),
            })?;
    let o = &st.opts;
    let lifetime = timeout_of(b.timeout.unwrap_or(DEFAULT_TIMEOUT_S), o.max_lifetime)?;
    // The template's limits, else the configured `[limits]`, under `[limits.max]`.
    let cfg = st.backend.gateway().config();
    let limits = crate::model::LimitsBody {
        timeout: template.timeout,
        memory: template.memory,
        cpu_quota_millis: template.cpu_millis,
        pids: template.pids,
        ..Default::default()
    }
    .resolve(&cfg.limits_default, &cfg.limits_max)?;
    let metadata = b.metadata.unwrap_or_default();
    let mut labels = metadata.clone();
    labels.insert(TEMPLATE_LABEL.into(), b.template_id.clone());
    let spec = SessionSpec {
        tier: template
            .tier
            .unwrap_or(st.backend.gateway().config().default_tier),
        limits,
        env: b.env_vars.unwrap_or_default(),
        labels,
        // E2B has no idle timeout: the sandbox lives until its timeout (which may be set later).
        idle_timeout: o.max_lifetime,
        lifetime,
    };
    let s = match st.sessions.create(caller.tenant(), spec).await {
        Ok(s) => s,
        Err(e) => {
            // A quota reached is recorded (at a bounded rate).
            st.refusals
                .refused(st, &caller.ctx, Some(caller.tenant()), &e)
                .await;
            return Err(e.into());
        }
    };
    let entry = Arc::new(e2b.registry.entry(
        &s.id,
        caller.tenant(),
        &caller.credential.id,
        &b.template_id,
        &metadata,
    ));
    e2b.registry.insert(entry.clone());
    record(
        st,
        &caller,
        &s.id,
        "sandbox.create",
        format!(
            "sandbox {} created from E2B template {} by {}",
            s.id,
            b.template_id.chars().take(64).collect::<String>(),
            caller.name()
        ),
    )
    .await;
    Ok((StatusCode::CREATED, sandbox_json(e2b, &entry, &caller)))
}

fn metadata_filter(q: &ListQuery) -> BTreeMap<String, String> {
    // `metadata` is `k=v&k2=v2`, itself URL-encoded once more by the SDK.
    q.metadata
        .as_deref()
        .map(|m| {
            m.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (unescape(k), unescape(v)))
                .collect()
        })
        .unwrap_or_default()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /v2/sandboxes` (and `GET /sandboxes`): the tenant's running E2B sandboxes.
pub async fn list(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, ServerError>,
) -> Response {
    let go = async {
        let caller = api_caller(&st, &headers, ctx).await?;
        caller.require_any(&st, &SEE_SANDBOXES).await?;
        let Query(q) = q?;
        e2b.registry
            .prune(|e| st.sessions.get(&e.tenant, &e.sandbox_id).is_some());
        let want = metadata_filter(&q);
        let states: Vec<&str> = q
            .state
            .as_deref()
            .map(|s| s.split(',').map(str::trim).collect())
            .unwrap_or_else(|| vec!["running", "paused"]);
        let _ = (&q.order, &q.started_after, &q.next_token);
        let mut out = Vec::new();
        {
            for s in st.sessions.list(caller.tenant()) {
                if !states.contains(&s.state()) {
                    continue;
                }
                if !caller.may_see_sandbox(&s.id) {
                    continue;
                }
                // A damaged facts file is logged and left out of the list; a call on the
                // sandbox itself answers SBX_E2514.
                let e = match e2b.registry.get(&s.id) {
                    Ok(Some(e)) => e,
                    Ok(None) => continue,
                    Err(d) => {
                        super::auth::log_damaged(&s.id, &d);
                        continue;
                    }
                };
                if want.iter().any(|(k, v)| e.metadata.get(k) != Some(v)) {
                    continue;
                }
                if q.template.as_deref().is_some_and(|t| t != e.template) {
                    continue;
                }
                out.push(detail_json(&e, &s));
            }
        }
        if let Some(n) = q.limit {
            out.truncate(n as usize);
        }
        Ok::<_, E2bError>((StatusCode::OK, Value::Array(out)))
    };
    rest(go.await)
}

/// `GET /sandboxes/{id}`.
pub async fn get_one(OnSandbox(t, _): OnSandbox<Reads>) -> Response {
    let go = async {
        let t = t?;
        Ok::<_, E2bError>((StatusCode::OK, detail_json(&t.entry, &t.session)))
    };
    rest(go.await)
}

/// `DELETE /sandboxes/{id}`: closes it (what runs in it is cancelled, its workspace removed).
pub async fn kill(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    OnSandbox(t, _): OnSandbox<Acts>,
) -> Response {
    let go = async {
        let Target {
            caller,
            entry: e,
            session: s,
        } = t?;
        st.sessions
            .remove(caller.tenant(), &s.id, "killed over the E2B API");
        e2b.registry.remove(&e.sandbox_id);
        record(
            &st,
            &caller,
            &s.id,
            "sandbox.delete",
            format!(
                "sandbox {} killed over the E2B API by {}",
                s.id,
                caller.name()
            ),
        )
        .await;
        Ok::<_, E2bError>((StatusCode::NO_CONTENT, Value::Null))
    };
    rest(go.await)
}

/// `POST /sandboxes/{id}/timeout`: the sandbox now ends `timeout` seconds from now.
pub async fn set_timeout(
    State(st): State<AppState>,
    OnSandbox(t, _): OnSandbox<Acts>,
    AfterAuth(body): AfterAuth,
) -> Response {
    let go = async {
        let Target {
            caller, session: s, ..
        } = t?;
        let b: TimeoutBody = parse(&body)?;
        let t = timeout_of(b.timeout.unwrap_or(0), st.opts.max_lifetime)?;
        let end = s.set_end(
            crate::sessions::add_saturating(Utc::now(), t),
            st.opts.max_lifetime,
        );
        record(
            &st,
            &caller,
            &s.id,
            "sandbox.timeout",
            format!(
                "sandbox {} now ends at {} (set by {})",
                s.id,
                end.to_rfc3339(),
                caller.name()
            ),
        )
        .await;
        Ok::<_, E2bError>((StatusCode::NO_CONTENT, Value::Null))
    };
    rest(go.await)
}

/// `POST /v2/sandboxes/{id}/connect` (and `/sandboxes/{id}/connect`): the running sandbox
/// with its access token; a longer `timeout` extends it.
pub async fn connect(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    OnSandbox(t, _): OnSandbox<Acts>,
    AfterAuth(body): AfterAuth,
) -> Response {
    let go = async {
        let Target {
            caller,
            entry: e,
            session: s,
        } = t?;
        let b: TimeoutBody = parse(&body)?;
        // The request is checked whole before anything changes: a bad `timeout` resumes
        // nothing.
        let extend = b
            .timeout
            .map(|secs| timeout_of(secs, st.opts.max_lifetime))
            .transpose()?;
        // Connecting to a paused sandbox resumes it, as in E2B.
        crate::lifecycle::resume(&st, &s, &caller.name(), &caller.ctx).await?;
        if let Some(t) = extend {
            let want = crate::sessions::add_saturating(Utc::now(), t);
            if want > s.expires_at() {
                s.set_end(want, st.opts.max_lifetime);
            }
        }
        s.touch();
        // The token is the caller's own: what it reaches is what the caller may.
        Ok::<_, E2bError>((StatusCode::OK, sandbox_json(&e2b, &e, &caller)))
    };
    rest(go.await)
}

/// `POST /sandboxes/{id}/pause`: what runs in it is cancelled (each recorded, its
/// reservation released), its files stay; 409 when it is already paused.
pub async fn pause(State(st): State<AppState>, OnSandbox(t, _): OnSandbox<Acts>) -> Response {
    let go = async {
        let Target {
            caller, session: s, ..
        } = t?;
        if crate::lifecycle::pause(&st, &s, &caller.name(), &caller.ctx).await? {
            Ok::<_, E2bError>((StatusCode::NO_CONTENT, Value::Null))
        } else {
            Ok((
                StatusCode::CONFLICT,
                json!({"code": 409, "message": format!("sandbox {} is already paused", s.id)}),
            ))
        }
    };
    rest(go.await)
}

/// `POST /sandboxes/{id}/resume` (E2B's older call; `connect` resumes too).
pub async fn resume(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    OnSandbox(t, _): OnSandbox<Acts>,
) -> Response {
    let go = async {
        let Target {
            caller,
            entry: e,
            session: s,
        } = t?;
        if !crate::lifecycle::resume(&st, &s, &caller.name(), &caller.ctx).await? {
            return Ok((
                StatusCode::CONFLICT,
                json!({"code": 409, "message": format!("sandbox {} is not paused", s.id)}),
            ));
        }
        Ok::<_, E2bError>((StatusCode::CREATED, sandbox_json(&e2b, &e, &caller)))
    };
    rest(go.await)
}

/// Lifecycle calls sandboxio does not implement: 501 with the code, after authentication.
pub async fn not_implemented(
    State(st): State<AppState>,
    Ctx(ctx): Ctx,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let go = async {
        api_caller(&st, &headers, ctx).await?;
        Err::<(StatusCode, Value), E2bError>(E2bError::NotImplemented {
            method: uri.path().chars().take(128).collect(),
        })
    };
    rest(go.await)
}
