//! Stateful code contexts over the API: create (a kernel starts in the sandbox), list, run
//! code (each call one `run_code` operation with its record, answered whole or streamed),
//! interrupt, restart, delete.

use std::sync::Arc;

use crate::extract::Path;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use sandboxio_core::{HumanDuration, Language, OperationArgs, Verdict};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::answer;
use crate::auth::Caller;
use crate::backend::{server_record, session_submission};
use crate::body::ApiJson;
use crate::contexts::call::Call;
use crate::contexts::kernel::{self, Started};
use crate::contexts::{lang_name, Context};
use crate::error::ServerError;
use crate::launch::{launch, Mode};
use crate::model::{OutcomeView, RunCommon};
use crate::problem::Problem;
use crate::routes::guard::{context_not_found as not_found, InContext, InSandbox, RunCodeScope};
use crate::sessions::Session;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(remove))
        .routes(routes!(run))
        .routes(routes!(interrupt))
        .routes(routes!(restart))
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContext {
    /// `python` or `node`.
    #[schema(value_type = String, example = "python")]
    pub language: Language,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInContext {
    pub code: String,
    /// This call's timeout, e.g. `10s`: the cell is interrupted when it passes.
    #[schema(value_type = Option<String>)]
    pub timeout: Option<HumanDuration>,
    pub idempotency_key: Option<String>,
    /// Why the agent wants this; shown to approvers.
    pub rationale: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextView {
    pub id: String,
    pub sandbox_id: String,
    pub language: String,
    /// The interpreter's version inside the sandbox.
    pub version: String,
    pub created_at: DateTime<Utc>,
    /// `ready`, or `ended` (restart it).
    pub state: String,
    /// The kernel's process in the sandbox's process list.
    pub process_id: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextList {
    pub contexts: Vec<ContextView>,
}

fn view(s: &Session, c: &Context) -> ContextView {
    let k = c.kernel();
    ContextView {
        id: c.id.clone(),
        sandbox_id: s.id.clone(),
        language: lang_name(c.language).to_string(),
        version: k.as_ref().map(|k| k.version.clone()).unwrap_or_default(),
        created_at: c.created_at,
        state: if k.as_ref().is_some_and(|k| k.alive()) {
            "ready".into()
        } else {
            "ended".into()
        },
        process_id: k.map(|k| k.process.id.clone()).unwrap_or_default(),
    }
}

async fn record(st: &AppState, caller: &Caller, s: &Session, event: &str, what: String) {
    let mut rec = server_record(event, caller.tenant(), &caller.ctx, Verdict::Allow, what);
    rec.session_id = Some(s.id.clone());
    st.backend.record(rec).await;
}

/// Starts a kernel; the answer when it could not.
async fn start(
    st: &AppState,
    caller: &Caller,
    s: &Arc<Session>,
    language: Language,
) -> Result<Result<Arc<kernel::Kernel>, Response>, ServerError> {
    Ok(match kernel::start(st, s, language, &caller.ctx).await? {
        Started::Ready(k) => Ok(k),
        Started::Refused(p) => Err(p.into_response()),
        Started::Asked(id) => Err(answer::asked(&id, &caller.ctx)),
    })
}

/// Creates a code context: a Python or Node kernel starts inside the sandbox (one
/// `run_code` operation, decided by the chain) and keeps variables between calls.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts", tag = "contexts",
    params(("id" = String, Path)), request_body = CreateContext,
    responses((status = 201, body = ContextView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn create(
    State(st): State<AppState>,
    InSandbox {
        caller, session: s, ..
    }: InSandbox<RunCodeScope>,
    ApiJson(body): ApiJson<CreateContext>,
) -> Result<Response, ServerError> {
    if s.contexts.count() >= st.opts.max_contexts {
        return Err(ServerError::BadValue {
            field: "language",
            why: format!(
                "sandbox `{}` already has {} code contexts (the most it may hold)",
                s.id, st.opts.max_contexts
            ),
        });
    }
    let k = match start(&st, &caller, &s, body.language).await? {
        Ok(k) => k,
        Err(res) => return Ok(res),
    };
    let c = s.contexts.add(body.language, k);
    record(
        &st,
        &caller,
        &s,
        "context.create",
        format!(
            "{} code context {} created in sandbox {} by {}",
            lang_name(c.language),
            c.id,
            s.id,
            caller.name()
        ),
    )
    .await;
    Ok((StatusCode::CREATED, Json(view(&s, &c))).into_response())
}

/// The sandbox's code contexts.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/contexts", tag = "contexts",
    params(("id" = String, Path)),
    responses((status = 200, body = ContextList), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn list(
    InSandbox { session: s, .. }: InSandbox<RunCodeScope>,
) -> Result<Json<ContextList>, ServerError> {
    let contexts = s.contexts.list().iter().map(|c| view(&s, c)).collect();
    Ok(Json(ContextList { contexts }))
}

/// Runs code in the context: stdout, stderr, the value of the last expression, rich
/// results (`image/png`, `text/html`) and an error with its traceback, in `output`.
/// Streamed with `Accept: application/x-ndjson` or `text/event-stream`.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{cid}/run", tag = "contexts",
    params(("id" = String, Path), ("cid" = String, Path)), request_body = RunInContext,
    responses((status = 200, body = OutcomeView,
            description = "the outcome (`output`: value, rich, error); with `Accept: application/x-ndjson` or `text/event-stream`, a stream"),
        (status = 202, body = Problem), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn run(
    State(st): State<AppState>,
    InContext {
        caller,
        session: s,
        context: c,
    }: InContext,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RunInContext>,
) -> Result<Response, ServerError> {
    let k = c.kernel().ok_or_else(|| not_found(&c.id))?;
    let common = RunCommon {
        timeout: body.timeout,
        idempotency_key: body.idempotency_key,
        rationale: body.rationale,
        ..RunCommon::default()
    };
    let extra = super::exec::extras(&st, common)?;
    let args = OperationArgs::RunCode {
        language: c.language,
        code: body.code,
    };
    let mut sub = session_submission(&s, args, &caller.ctx, extra);
    // The context's state decides the outcome: it is part of the request (an idempotency
    // key used in another context, or for a plain run_code, is another request).
    if let Some(req) = sub.op.exec.as_mut() {
        req.context = Some(c.id.clone());
    }
    sub.labels.insert("code_context".into(), c.id.clone());
    sub.executor = Some(Arc::new(Call {
        kernel: k,
        context_id: c.id.clone(),
        sandbox_id: s.id.clone(),
        tier: s.spec.tier,
    }));
    let mode = match Mode::of(&headers, false) {
        Mode::Background => Mode::Wait,
        m => m,
    };
    launch(
        &st,
        &s,
        sub,
        "run_code",
        mode,
        &caller.ctx,
        &caller.credential.id,
    )
    .await
}

/// Interrupts the cell running in the context (Python: `KeyboardInterrupt`; Node: the
/// script is stopped). Its variables are kept.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{cid}/interrupt", tag = "contexts",
    params(("id" = String, Path), ("cid" = String, Path)),
    responses((status = 204), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn interrupt(
    State(st): State<AppState>,
    InContext {
        caller,
        session: s,
        context: c,
    }: InContext,
) -> Result<StatusCode, ServerError> {
    let k = c.kernel().ok_or_else(|| not_found(&c.id))?;
    k.send(&serde_json::json!({"op": "interrupt"})).await;
    record(
        &st,
        &caller,
        &s,
        "context.interrupt",
        format!("code context {} interrupted by {}", c.id, caller.name()),
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Restarts the context: its kernel is ended (variables lost) and a new one started.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{cid}/restart", tag = "contexts",
    params(("id" = String, Path), ("cid" = String, Path)),
    responses((status = 200, body = ContextView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn restart(
    State(st): State<AppState>,
    InContext {
        caller,
        session: s,
        context: c,
    }: InContext,
) -> Result<Response, ServerError> {
    if let Some(old) = c.kernel() {
        old.kill("the context is being restarted");
    }
    let k = match start(&st, &caller, &s, c.language).await? {
        Ok(k) => k,
        Err(res) => return Ok(res),
    };
    c.replace(k);
    record(
        &st,
        &caller,
        &s,
        "context.restart",
        format!("code context {} restarted by {}", c.id, caller.name()),
    )
    .await;
    Ok(Json(view(&s, &c)).into_response())
}

/// Deletes the context and ends its kernel.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/contexts/{cid}", tag = "contexts",
    params(("id" = String, Path), ("cid" = String, Path)),
    responses((status = 204), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn remove(
    State(st): State<AppState>,
    InSandbox {
        caller, session: s, ..
    }: InSandbox<RunCodeScope>,
    Path(ids): Path<(String, String)>,
) -> Result<StatusCode, ServerError> {
    let cid = ids.1;
    let c = s
        .contexts
        .remove(&cid, "the context was deleted")
        .ok_or_else(|| not_found(&cid))?;
    record(
        &st,
        &caller,
        &s,
        "context.delete",
        format!("code context {} deleted by {}", c.id, caller.name()),
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}
