//! Commands and code in a sandbox, each one operation through the gateway's chain.

use crate::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use sandboxio_core::OperationArgs;
use sandboxio_gateway::credential::Scope;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::backend::{session_submission, SubmitExtras};
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::launch::{launch, Mode};
use crate::model::{ExecBody, OutcomeView, RunCodeBody, RunCommon};
use crate::problem::Problem;
use crate::processes::ProcessView;
use crate::routes::session_for;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(run_code))
}

pub(crate) fn extras(st: &AppState, c: RunCommon) -> Result<SubmitExtras, ServerError> {
    let timeout = c.timeout.map(|t| t.as_duration());
    if let Some(t) = timeout {
        if t.is_zero() || t > st.opts.request_timeout {
            return Err(ServerError::BadValue {
                field: "timeout",
                why: format!(
                    "must be more than 0 and at most the request timeout ({} s)",
                    st.opts.request_timeout.as_secs()
                ),
            });
        }
    }
    let idempotency_key = c.key()?;
    let stdin = match c.stdin {
        Some(text) => Some(
            sandboxio_core::wire::decode(text, c.stdin_encoding).map_err(|why| {
                ServerError::BadValue {
                    field: "stdin",
                    why,
                }
            })?,
        ),
        None if c.stdin_encoding.is_some() => {
            return Err(ServerError::BadValue {
                field: "stdin_encoding",
                why: "given without `stdin`".into(),
            })
        }
        None => None,
    };
    Ok(SubmitExtras {
        idempotency_key,
        rationale: c.rationale,
        env: c.env,
        stdin,
        timeout,
        content: None,
    })
}

async fn run(
    st: AppState,
    caller: Caller,
    id: String,
    args: OperationArgs,
    extra: SubmitExtras,
    mode: Mode,
) -> Result<Response, ServerError> {
    let s = session_for(&st, &caller, &id)?;
    let kind = match args {
        OperationArgs::RunCode { .. } => "run_code",
        _ => "exec",
    };
    let sub = session_submission(&s, args, &caller.ctx, extra);
    launch(&st, &s, sub, kind, mode, &caller.ctx, &caller.credential.id).await
}

/// Runs a command in the sandbox and answers when it finished: the result (exit status,
/// output, usage, enforcement) and the operation's record. A denial is a problem naming the
/// layer, the rules and the reason; an `ask` is 202 with the approval to wait for.
/// With `Accept: application/x-ndjson` or `text/event-stream` the output is streamed as it
/// happens (`start`, `stdout`, `stderr`, `exit`, then `result` or `error`); with
/// `"background": true` the answer is 201 with the process at once.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", tag = "exec",
    params(("id" = String, Path)), request_body = ExecBody,
    responses((status = 200, body = OutcomeView,
            description = "the outcome; with `Accept: application/x-ndjson` or `text/event-stream`, a stream of messages"),
        (status = 201, body = ProcessView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn exec(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ServerError> {
    caller.require(&st, Scope::Exec).await?;
    let extra = extras(&st, body.common())?;
    let mode = Mode::of(&headers, body.background);
    run(
        st,
        caller,
        id,
        OperationArgs::Exec { argv: body.argv },
        extra,
        mode,
    )
    .await
}

/// Runs code (python, node or bash) in the sandbox.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/run_code", tag = "exec",
    params(("id" = String, Path)), request_body = RunCodeBody,
    responses((status = 200, body = OutcomeView,
            description = "the outcome; with `Accept: application/x-ndjson` or `text/event-stream`, a stream of messages"),
        (status = 201, body = ProcessView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn run_code(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RunCodeBody>,
) -> Result<Response, ServerError> {
    caller.require(&st, Scope::RunCode).await?;
    let extra = extras(&st, body.common())?;
    let mode = Mode::of(&headers, body.background);
    let args = OperationArgs::RunCode {
        language: body.language,
        code: body.code,
    };
    run(st, caller, id, args, extra, mode).await
}
