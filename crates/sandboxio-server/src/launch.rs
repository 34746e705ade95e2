//! An exec or run_code in a sandbox, as a process the API can list and kill, answered the
//! way the caller asked:
//!
//! - **wait** (the default): one JSON answer when it finished;
//! - **stream** (`Accept: application/x-ndjson` or `text/event-stream`): its output and
//!   exit as they happen, then its record (see `crate::stream`);
//! - **background** (`"background": true`): 201 with the process at once; its output is
//!   kept for `GET /v1/sandboxes/{id}/processes/{pid}`.
//!
//! Whatever the mode, a stop by the chain before anything ran answers as a problem with its
//! status, and an `ask` answers 202 with the approval id. A client that goes away cancels
//! what it waited for or streamed (not a background process); so does a `DELETE` of the
//! process. Each is one operation with one record.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxio_core::ExecEvent;
use sandboxio_gateway::{Outcome, Submission};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::answer;
use crate::backend::{Run, Step};
use crate::context::{OperationId, RequestCtx};
use crate::error::ServerError;
use crate::processes::{command_of, ProcState, Process};
use crate::sessions::{Busy, Session};
use crate::starts::Starting;
use crate::state::AppState;
use crate::stream::{self, Format};

/// How long a streamed or background start waits for the chain's first word (a denial, an
/// ask, the first output) before it answers anyway.
const FIRST_WORD: Duration = Duration::from_millis(250);
/// A streamed answer's heartbeat while nothing else happens.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A client that takes none of a stream's messages for this long is cut off (and what it
/// streamed is cancelled).
pub const STALL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Wait,
    Stream(Format),
    Background,
}

impl Mode {
    pub fn of(headers: &axum::http::HeaderMap, background: bool) -> Mode {
        if background {
            return Mode::Background;
        }
        match Format::negotiate(headers) {
            Some(f) => Mode::Stream(f),
            None => Mode::Wait,
        }
    }
}

/// The state a process ends in for its outcome.
fn end_state(out: &Outcome) -> ProcState {
    if answer::ran(&out.record) {
        if out.result.as_ref().is_some_and(|r| r.cancelled.is_some()) {
            ProcState::Cancelled
        } else {
            ProcState::Exited
        }
    } else if out.record.status == sandboxio_core::OperationStatus::Cancelled {
        ProcState::Cancelled
    } else {
        ProcState::Failed
    }
}

/// The JSON the request would have answered with, for a process's outcome.
fn outcome_json(out: &Outcome, ctx: &RequestCtx) -> (ProcState, Value) {
    let v = if answer::ran(&out.record) {
        json!({
            "record": out.record,
            "result": out.result,
            "output": out.tool_output,
        })
    } else {
        serde_json::to_value(answer::stopped(out, ctx)).unwrap_or_default()
    };
    (end_state(out), v)
}

/// The state a process ends in, without its outcome.
fn state_of(res: &Result<Box<Outcome>, ServerError>) -> ProcState {
    match res {
        Ok(out) => end_state(out),
        Err(_) => ProcState::Failed,
    }
}

fn finish(proc: &Process, res: &Result<Box<Outcome>, ServerError>, ctx: &RequestCtx) {
    match res {
        Ok(out) => {
            let (state, v) = outcome_json(out, ctx);
            proc.finish(state, Some(out.record.operation_id.clone()), v);
        }
        Err(e) => proc.finish(
            ProcState::Failed,
            None,
            serde_json::to_value(e.problem()).unwrap_or_default(),
        ),
    }
}

/// Starts `sub` in sandbox `s` as a process of `kind` and answers in `mode`.
pub async fn launch(
    st: &AppState,
    s: &Arc<Session>,
    sub: Submission,
    kind: &'static str,
    mode: Mode,
    ctx: &RequestCtx,
    credential: &str,
) -> Result<Response, ServerError> {
    if mode == Mode::Background {
        let limit = st.opts.quota(&s.tenant).max_background;
        if st.sessions.background_running(&s.tenant) >= limit {
            let e = ServerError::BackgroundQuota {
                tenant: s.tenant.clone(),
                limit,
            };
            st.refusals.refused(st, ctx, Some(&s.tenant), &e).await;
            return Err(e);
        }
    }
    let busy = s.begin();
    // Its turn among the execs starting (`crate::starts`): nothing is submitted before, so
    // a client that goes away while it waits starts nothing. A sandbox paused or deleted
    // meanwhile (its run token cancelled) takes it out of the queue at once with the
    // sandbox's refusal, so a pause does not wait for it to come to the front.
    let queued_in = s.run_token()?;
    let mut starting = tokio::select! {
        biased;
        p = st.starts.admit() => p,
        _ = queued_in.cancelled() => match s.run_token() {
            Err(refused) => return Err(refused),
            // Cancelled for another reason (a resume has already replaced the token): wait
            // for the turn as before.
            Ok(_) => st.starts.admit().await,
        },
    };
    let command = command_of(&sub.op.args);
    let events = mode != Mode::Wait;
    let mut run = st.backend.start(sub, Some(s.run_token()?), events);
    let proc = s
        .processes
        .add(kind, command, mode == Mode::Background, run.token.clone());
    // It lasts no longer than the credential it was started with (`crate::revocation`).
    proc.cancel_when(
        crate::revocation::CANCELLED,
        st.watch_credential(credential).wait_owned(),
    );
    let first = if mode == Mode::Wait {
        loop {
            match next(&mut run, &mut starting).await {
                Step::Event(_) => continue,
                other => break Some(other),
            }
        }
    } else {
        tokio::time::timeout(FIRST_WORD, next(&mut run, &mut starting))
            .await
            .ok()
    };
    let first_event = match first {
        Some(Step::Done(res)) => {
            if mode == Mode::Background {
                finish(&proc, &res, ctx);
            } else {
                // Answered here: the process leaves the list, and its outcome (the whole
                // answer again, as JSON) is built only for a caller already holding it
                // (a `GET` of the process waiting for its end, a listing in progress).
                s.processes.remove(&proc.id);
                if Arc::strong_count(&proc) > 1 {
                    finish(&proc, &res, ctx);
                } else {
                    proc.end(state_of(&res));
                }
            }
            let out = res?;
            if mode == Mode::Background && answer::ran(&out.record) {
                return Ok(created(&proc, &out.record.operation_id));
            }
            if mode == Mode::Background {
                s.processes.remove(&proc.id);
            }
            return Ok(answer::outcome(*out, ctx));
        }
        Some(Step::Asked(approval_id)) => {
            s.processes.remove(&proc.id);
            return Ok(answer::asked(&approval_id, ctx));
        }
        Some(Step::Event(ev)) => Some(ev),
        None => None,
    };
    match mode {
        Mode::Stream(format) => {
            let (tx, res) = stream::response(
                format,
                &[
                    ("sandboxio-process-id", proc.id.clone()),
                    ("sandboxio-sandbox-id", s.id.clone()),
                ],
            );
            let s = s.clone();
            let ctx = ctx.clone();
            let revoked = st.watch_credential(credential);
            tokio::spawn(async move {
                pump(
                    run,
                    first_event,
                    StreamOut {
                        tx,
                        format,
                        revoked,
                    },
                    &proc,
                    &s,
                    &ctx,
                    (busy, starting),
                )
                .await;
                s.processes.remove(&proc.id);
            });
            Ok(res)
        }
        _ => {
            if let Some(ev) = &first_event {
                proc.take_event(ev);
            }
            let ctx = ctx.clone();
            let p = proc.clone();
            tokio::spawn(collect(run, p, ctx, (busy, starting)));
            Ok(created(&proc, ""))
        }
    }
}

fn created(proc: &Process, operation_id: &str) -> Response {
    let mut res = (StatusCode::CREATED, Json(proc.view(true))).into_response();
    if !operation_id.is_empty() {
        res.extensions_mut()
            .insert(OperationId(operation_id.to_string()));
    }
    res
}

/// The next step of `run`; meanwhile its place among the execs starting is given back when
/// its hold time is over. Cancel-safe, like [`Run::next`].
async fn next(run: &mut Run, starting: &mut Starting) -> Step {
    loop {
        tokio::select! {
            biased;
            step = run.next() => return step,
            () = starting.hold_over() => {}
        }
    }
}

/// A background process: keeps its output and its outcome.
async fn collect(mut run: Run, proc: Arc<Process>, ctx: RequestCtx, held: (Busy, Starting)) {
    let (_busy, mut starting) = held;
    loop {
        match next(&mut run, &mut starting).await {
            Step::Event(ev) => proc.take_event(&ev),
            Step::Done(res) => {
                finish(&proc, &res, &ctx);
                return;
            }
            Step::Asked(id) => {
                // Only the first word can be an ask; should one come later, say so.
                let p = answer::asked_problem(&id, &ctx);
                proc.finish(
                    ProcState::Failed,
                    None,
                    serde_json::to_value(p).unwrap_or_default(),
                );
                return;
            }
        }
    }
}

/// Sends `b` to a streaming client; meanwhile the exec's place among those starting is
/// given back when its hold time is over (a client that reads slowly holds no one up).
async fn send(tx: &mpsc::Sender<Bytes>, b: Bytes, starting: &mut Starting) -> bool {
    let sending = tokio::time::timeout(STALL, tx.send(b));
    tokio::pin!(sending);
    loop {
        tokio::select! {
            biased;
            sent = &mut sending => return matches!(sent, Ok(Ok(()))),
            () = starting.hold_over() => {}
        }
    }
}

/// A streamed process: every event to the client as it comes, heartbeats while idle, the
/// record last. Returns early (dropping `run`, which cancels it) when the client is gone.
/// Where a streamed process's frames go: the response body's channel, in its format.
struct StreamOut {
    tx: mpsc::Sender<Bytes>,
    format: Format,
    /// The credential that opened the stream: once it is revoked or expires, the stream
    /// ends with `SBX_E1802` (and its command is cancelled).
    revoked: crate::revocation::Revoked,
}

async fn pump(
    mut run: Run,
    first: Option<ExecEvent>,
    out: StreamOut,
    proc: &Process,
    s: &Session,
    ctx: &RequestCtx,
    held: (Busy, Starting),
) {
    let StreamOut {
        tx,
        format,
        mut revoked,
    } = out;
    let (_busy, mut starting) = held;
    let start = json!({"type": "start", "process_id": proc.id, "sandbox_id": s.id});
    if !send(&tx, format.frame(&start), &mut starting).await {
        return;
    }
    if let Some(ev) = first {
        if !send(
            &tx,
            format.frame(&stream::event_message(&ev)),
            &mut starting,
        )
        .await
        {
            return;
        }
    }
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat.tick().await;
    loop {
        tokio::select! {
            biased;
            () = revoked.wait() => {
                proc.kill(crate::revocation::CANCELLED);
                let p = serde_json::to_value(ServerError::BadCredential.problem()).unwrap_or_default();
                let _ = send(&tx, format.frame(&error_message(p)), &mut starting).await;
                return;
            }
            step = next(&mut run, &mut starting) => {
                let last = match step {
                    Step::Event(ev) => {
                        if !send(&tx, format.frame(&stream::event_message(&ev)), &mut starting).await {
                            return;
                        }
                        beat.reset();
                        continue;
                    }
                    Step::Done(res) => {
                        finish(proc, &res, ctx);
                        match res {
                            Ok(out) if answer::ran(&out.record) => {
                                let rec = serde_json::to_value(&out.record).unwrap_or_default();
                                let result = out.result.as_ref().and_then(|r| serde_json::to_value(r).ok());
                                stream::result_message(&rec, result.as_ref())
                            }
                            Ok(out) => error_message(serde_json::to_value(answer::stopped(&out, ctx)).unwrap_or_default()),
                            Err(e) => error_message(serde_json::to_value(e.problem()).unwrap_or_default()),
                        }
                    }
                    Step::Asked(id) => {
                        error_message(serde_json::to_value(answer::asked_problem(&id, ctx)).unwrap_or_default())
                    }
                };
                let _ = send(&tx, format.frame(&last), &mut starting).await;
                return;
            }
            _ = beat.tick() => {
                if !send(&tx, format.heartbeat(), &mut starting).await {
                    return;
                }
            }
        }
    }
}

fn error_message(problem: Value) -> Value {
    json!({"type": "error", "problem": problem})
}
