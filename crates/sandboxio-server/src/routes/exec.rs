//! Commands and code in a sandbox, each one operation through the gateway's chain.

use axum::extract::{Path, State};
use axum::response::Response;
use sandboxio_core::OperationArgs;
use sandboxio_gateway::credential::Scope;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::answer;
use crate::auth::Caller;
use crate::backend::{session_submission, SubmitExtras};
use crate::body::ApiJson;
use crate::error::ServerError;
use crate::model::{ExecBody, OutcomeView, RunCodeBody, RunCommon};
use crate::problem::Problem;
use crate::routes::session_for;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(run_code))
}

fn extras(st: &AppState, c: RunCommon) -> Result<SubmitExtras, ServerError> {
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
    Ok(SubmitExtras {
        idempotency_key: c.key()?,
        rationale: c.rationale,
        env: c.env,
        stdin: c.stdin.map(String::into_bytes),
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
) -> Result<Response, ServerError> {
    let s = session_for(&st, &caller, &id)?;
    let _busy = s.begin();
    let sub = session_submission(&s, args, &caller.ctx, extra);
    let done = st.backend.submit(sub, Some(s.cancel.clone())).await?;
    Ok(answer::submitted(done, &caller.ctx))
}

/// Runs a command in the sandbox and answers when it finished: the result (exit status,
/// output, usage, enforcement) and the operation's record. A denial is a problem naming the
/// layer, the rules and the reason; an `ask` is 202 with the approval to wait for.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", tag = "exec",
    params(("id" = String, Path)), request_body = ExecBody,
    responses((status = 200, body = OutcomeView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn exec(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ServerError> {
    caller.require(&st, Scope::Exec).await?;
    let extra = extras(&st, body.common())?;
    run(
        st,
        caller,
        id,
        OperationArgs::Exec { argv: body.argv },
        extra,
    )
    .await
}

/// Runs code (python, node or bash) in the sandbox.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/run_code", tag = "exec",
    params(("id" = String, Path)), request_body = RunCodeBody,
    responses((status = 200, body = OutcomeView), (status = 202, body = Problem),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn run_code(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RunCodeBody>,
) -> Result<Response, ServerError> {
    caller.require(&st, Scope::RunCode).await?;
    let extra = extras(&st, body.common())?;
    let args = OperationArgs::RunCode {
        language: body.language,
        code: body.code,
    };
    run(st, caller, id, args, extra).await
}
