//! A command with its standard input streamed over a WebSocket
//! (`GET /v1/sandboxes/{id}/exec/ws`, scope exec).
//!
//! The client's first message is the exec request as JSON text (the body of `POST .../exec`
//! without `stdin` or `background`). Then, from the client: binary messages are standard
//! input; text `{"type":"stdin","data":"..."}` is input as text; `{"type":"eof"}` closes
//! standard input; `{"type":"kill"}` cancels the command. From the server: the same messages
//! as a streamed exec, one a text message each (`start`, `stdout`, `stderr`, `exit`, then
//! `result` or `error`), then a close. A client that goes away cancels the command. The
//! request records `stdin_stream: true`: an approval covers "some streamed input", never
//! particular bytes, and an idempotency key is refused (`SBX_E1005`: it could not bind them).

use crate::extract::Path;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use sandboxio_core::OperationArgs;
use sandboxio_gateway::credential::Scope;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::answer;
use crate::auth::Caller;
use crate::backend::{session_submission, Step};
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::model::ExecBody;
use crate::problem::Problem;
use crate::processes::{command_of, ProcState};
use crate::routes::session_for;
use crate::sessions::Session;
use crate::state::AppState;
use crate::stream;

/// How long the client has to send its request after the upgrade.
const FIRST_MESSAGE: std::time::Duration = std::time::Duration::from_secs(10);
/// Standard input chunks buffered toward the program.
const STDIN_CHUNKS: usize = 16;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(exec_ws))
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Control {
    Stdin { data: String },
    Eof,
    Kill,
}

/// Upgrades to a WebSocket that runs one command with streamed standard input.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/exec/ws", tag = "exec",
    params(("id" = String, Path)),
    responses((status = 101, description = "switching to the WebSocket protocol"),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn exec_ws(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ServerError> {
    // Not a WebSocket handshake: a coded problem, like every refusal (axum's is plain text).
    let ws = ws.map_err(|e| ServerError::BadValue {
        field: "WebSocket handshake",
        why: e.body_text(),
    })?;
    caller.require(&st, Scope::Exec).await?;
    let s = session_for(&st, &caller, &id)?;
    // A paused sandbox refuses before the upgrade, with a plain problem answer.
    s.run_token()?;
    let limit = st.opts.quota(caller.tenant()).json_limit;
    Ok(ws
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| {
            let revoked = st.watch_credential(&caller.credential.id);
            run(st, s, caller.ctx, revoked, socket)
        }))
}

async fn close(mut socket: WebSocket, msg: Value) {
    let _ = socket.send(Message::Text(msg.to_string().into())).await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: 1000,
            reason: "".into(),
        })))
        .await;
}

fn problem_message(p: Problem) -> Value {
    json!({"type": "error", "problem": p})
}

/// The first message: the request.
async fn request(socket: &mut WebSocket) -> Result<ExecBody, ServerError> {
    let first = tokio::time::timeout(FIRST_MESSAGE, socket.recv()).await;
    let text = match first {
        Ok(Some(Ok(Message::Text(t)))) => t,
        Ok(Some(Ok(Message::Binary(b)))) => String::from_utf8_lossy(&b).into_owned().into(),
        _ => {
            return Err(ServerError::MalformedJson {
                why: "the first message must be the exec request as JSON".into(),
            })
        }
    };
    let body: ExecBody = crate::body::parse_json(text.as_bytes())?;
    if body.stdin.is_some() || body.background {
        return Err(ServerError::BadValue {
            field: "stdin",
            why: "over a WebSocket, standard input is streamed and the command runs attached"
                .into(),
        });
    }
    Ok(body)
}

async fn run(
    st: AppState,
    s: std::sync::Arc<Session>,
    ctx: RequestCtx,
    revoked: crate::revocation::Revoked,
    mut socket: WebSocket,
) {
    let body = match request(&mut socket).await {
        Ok(b) => b,
        Err(e) => return close(socket, problem_message(e.problem())).await,
    };
    let extra = match super::exec::extras(&st, body.common()) {
        Ok(x) => x,
        Err(e) => return close(socket, problem_message(e.problem())).await,
    };
    let args = OperationArgs::Exec { argv: body.argv };
    let command = command_of(&args);
    let mut sub = session_submission(&s, args, &ctx, extra);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>(STDIN_CHUNKS);
    if let Some(req) = sub.op.exec.as_mut() {
        req.stdin_stream = true;
    }
    sub.stream.stdin = Some(stdin_rx);
    let token = match s.run_token() {
        Ok(t) => t,
        Err(e) => return close(socket, problem_message(e.problem())).await,
    };
    let _busy = s.begin();
    let mut run = st.backend.start(sub, Some(token), true);
    let proc = s.processes.add("exec", command, false, run.token.clone());
    // Its credential revoked or expired: the command is cancelled, and the socket closes
    // with its outcome.
    proc.cancel_when(crate::revocation::CANCELLED, revoked.wait_owned());
    let start = json!({"type": "start", "process_id": proc.id, "sandbox_id": s.id});
    let started = socket
        .send(Message::Text(start.to_string().into()))
        .await
        .is_ok();
    let mut stdin = Some(stdin_tx);
    if !started {
        s.processes.remove(&proc.id);
        return;
    }
    loop {
        tokio::select! {
            step = run.next() => {
                let last = match step {
                    Step::Event(ev) => {
                        let m = stream::event_message(&ev).to_string();
                        if socket.send(Message::Text(m.into())).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Step::Done(Ok(out)) if answer::ran(&out.record) => {
                        proc.finish(ProcState::Exited, Some(out.record.operation_id.clone()), json!(null));
                        let rec = serde_json::to_value(&out.record).unwrap_or_default();
                        let result = out.result.as_ref().and_then(|r| serde_json::to_value(r).ok());
                        stream::result_message(&rec, result.as_ref())
                    }
                    Step::Done(Ok(out)) => {
                        proc.finish(ProcState::Failed, Some(out.record.operation_id.clone()), json!(null));
                        problem_message(answer::stopped(&out, &ctx))
                    }
                    Step::Done(Err(e)) => problem_message(e.problem()),
                    Step::Asked(id) => problem_message(answer::asked_problem(&id, &ctx)),
                };
                s.processes.remove(&proc.id);
                return close(socket, last).await;
            }
            msg = socket.recv() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    if let Some(tx) = &stdin {
                        let _ = tx.send(b.to_vec()).await;
                    }
                }
                Some(Ok(Message::Text(t))) => match serde_json::from_str::<Control>(&t) {
                    Ok(Control::Stdin { data }) => {
                        if let Some(tx) = &stdin {
                            let _ = tx.send(data.into_bytes()).await;
                        }
                    }
                    Ok(Control::Eof) => stdin = None,
                    Ok(Control::Kill) => proc.kill("killed by its WebSocket client"),
                    Err(e) => {
                        let p = ServerError::InvalidBody { why: e.to_string() }.problem();
                        if socket.send(Message::Text(problem_message(p).to_string().into())).await.is_err() {
                            break;
                        }
                    }
                },
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                // Closed, gone or broken: the command is cancelled (dropping `run`).
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
            },
        }
    }
    s.processes.remove(&proc.id);
    drop(run);
}
