//! The code interpreter (`e2b-code-interpreter`, port 49999) over code contexts: `/contexts`
//! (create, list, delete, restart) are the native context routes; `/execute` runs a cell
//! in a context (the language's default one unless `context_id` is given, created on first
//! use) as one `run_code` operation through the chain, carried out by the context's kernel,
//! and streams E2B's NDJSON: `stdout` / `stderr` as they happen, then `result` (the last
//! expression's value and rich results), `error` (name, value, traceback) and
//! `end_of_execution`. A stop before the cell ran is an HTTP error whose body names the
//! code, the layer and, for an ask, the approval id.

use std::sync::Arc;
use std::time::Duration;

use crate::extract::Path;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use sandboxio_core::{ExecEvent, Language, OperationArgs, OutputStream};
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::Outcome;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::auth::InSandbox as E2bCall;
use super::auth::{Interpreter, Sbx};
use super::connect::unary_request;
use super::error::E2bError;
use super::files::plain_err;
use super::native;
use crate::answer;
use crate::backend::{session_submission, Step, SubmitExtras};
use crate::body::{AfterAuth, ApiJson};
use crate::contexts::call::Call;
use crate::routes::contexts::{self as native_contexts, CreateContext};
use crate::routes::guard::{context_not_found, InContext, InSandbox, RunCodeScope};
use crate::state::AppState;

/// How long `/execute` waits for the chain's first word before it starts streaming.
const FIRST_WORD: Duration = Duration::from_millis(500);

#[derive(Debug, Deserialize)]
pub struct NewContext {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Execute {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<std::collections::BTreeMap<String, String>>,
}

fn language(name: Option<&str>) -> Result<Language, E2bError> {
    match name.unwrap_or("python") {
        "python" | "python3" => Ok(Language::Python),
        "js" | "javascript" | "node" => Ok(Language::Node),
        other => Err(E2bError::Unsupported {
            what: format!("language {}", other.chars().take(32).collect::<String>()),
            why: "code contexts run python or javascript (node)",
        }),
    }
}

fn e2b_language(native: &str) -> &str {
    match native {
        "node" => "javascript",
        other => other,
    }
}

/// E2B's `Context` for a native context view.
fn context_json(v: &Value) -> Value {
    json!({
        "id": v["id"],
        "language": e2b_language(v["language"].as_str().unwrap_or("python")),
        // The kernel runs in a directory of its own; the workspace is at $SANDBOX_INPUT.
        "cwd": "",
    })
}

async fn create_context(st: &AppState, r: &E2bCall, lang: Language) -> Result<Value, E2bError> {
    let scoped = InSandbox::<RunCodeScope>::check(st, r.caller.clone(), r.session.clone()).await?;
    let res = native_contexts::create(
        State(st.clone()),
        scoped,
        ApiJson(CreateContext { language: lang }),
    )
    .await;
    native::json(res).await
}

/// `POST /contexts`.
pub async fn create(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Interpreter>,
    AfterAuth(body): AfterAuth,
) -> Response {
    let go = async {
        let r = r?;
        let req: NewContext = unary_request(&body)?;
        if let Some(cwd) = req.cwd.as_deref().filter(|c| !c.is_empty()) {
            return Err(E2bError::Unsupported {
                what: format!("cwd {}", cwd.chars().take(64).collect::<String>()),
                why: "a kernel runs in a directory of its own; the workspace is at $SANDBOX_INPUT",
            });
        }
        let lang = language(req.language.as_deref())?;
        let v = create_context(&st, &r, lang).await?;
        Ok::<_, E2bError>(context_json(&v))
    };
    match go.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => plain_err(&e),
    }
}

/// `GET /contexts`.
pub async fn list(State(st): State<AppState>, Sbx(r, _): Sbx<Interpreter>) -> Response {
    let go = async {
        let r = r?;
        let scoped =
            InSandbox::<RunCodeScope>::check(&st, r.caller.clone(), r.session.clone()).await?;
        let res = native_contexts::list(scoped)
            .await
            .map(IntoResponse::into_response);
        let v = native::json(res).await?;
        let list: Vec<Value> = v["contexts"]
            .as_array()
            .map(|a| a.iter().map(context_json).collect())
            .unwrap_or_default();
        Ok::<_, E2bError>(Value::Array(list))
    };
    match go.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => plain_err(&e),
    }
}

/// `DELETE /contexts/{id}`.
pub async fn remove(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Interpreter>,
    Path(cid): Path<String>,
) -> Response {
    let go = async {
        let r = r?;
        let scoped =
            InSandbox::<RunCodeScope>::check(&st, r.caller.clone(), r.session.clone()).await?;
        let res = native_contexts::remove(
            State(st.clone()),
            scoped,
            Path((r.session.id.clone(), cid.clone())),
        )
        .await
        .map(IntoResponse::into_response);
        native::body(res).await?;
        if let Ok(mut d) = r.entry.default_contexts.lock() {
            d.retain(|_, v| *v != cid);
        }
        Ok::<_, E2bError>(())
    };
    match go.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => plain_err(&e),
    }
}

/// `POST /contexts/{id}/restart`.
pub async fn restart(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Interpreter>,
    Path(cid): Path<String>,
) -> Response {
    let go = async {
        let r = r?;
        r.caller.require(&st, Scope::RunCode).await?;
        let context = r
            .session
            .contexts
            .get(&cid)
            .ok_or_else(|| E2bError::Server(context_not_found(&cid)))?;
        let res = native_contexts::restart(
            State(st.clone()),
            InContext {
                caller: r.caller.clone(),
                session: r.session.clone(),
                context,
            },
        )
        .await;
        native::body(res).await?;
        Ok::<_, E2bError>(())
    };
    match go.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => plain_err(&e),
    }
}

/// The context a cell runs in: the one named, else the language's default (made on first
/// use, and again if its kernel ended).
async fn context_for(
    st: &AppState,
    r: &E2bCall,
    req: &Execute,
) -> Result<Arc<crate::contexts::Context>, E2bError> {
    let not_found = |id: &str| {
        E2bError::Server(crate::error::ServerError::NotFound {
            what: "context",
            id: id.chars().take(64).collect(),
        })
    };
    if let Some(id) = req.context_id.as_deref().filter(|s| !s.is_empty()) {
        return r.session.contexts.get(id).ok_or_else(|| not_found(id));
    }
    let lang = language(req.language.as_deref())?;
    let key = crate::contexts::lang_name(lang).to_string();
    let known = r
        .entry
        .default_contexts
        .lock()
        .ok()
        .and_then(|d| d.get(&key).cloned());
    if let Some(c) = known.and_then(|id| r.session.contexts.get(&id)) {
        if c.kernel().is_some_and(|k| k.alive()) {
            return Ok(c);
        }
        r.session.contexts.remove(&c.id, "its kernel ended");
    }
    let v = create_context(st, r, lang).await?;
    let id = v["id"].as_str().unwrap_or_default().to_string();
    if let Ok(mut d) = r.entry.default_contexts.lock() {
        d.insert(key, id.clone());
    }
    r.session.contexts.get(&id).ok_or_else(|| not_found(&id))
}

fn line(v: &Value) -> Bytes {
    Bytes::from(format!("{v}\n"))
}

fn output_line(stream: OutputStream, text: &str) -> Bytes {
    let kind = match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    };
    line(&json!({
        "type": kind,
        "text": text,
        "timestamp": Utc::now().to_rfc3339(),
    }))
}

/// The text of output whose chunks may split a UTF-8 character: a character left
/// incomplete at a chunk's end waits for the next chunk of its stream; bytes that are not
/// UTF-8 at all become U+FFFD.
#[derive(Default)]
struct Utf8Chunks {
    held: [Vec<u8>; 2],
}

/// How many bytes at the end of `b` start a character that is not complete yet.
fn incomplete_tail(b: &[u8]) -> usize {
    (1..=b.len().min(3))
        .find(|k| {
            std::str::from_utf8(&b[b.len() - k..])
                .err()
                .is_some_and(|e| e.valid_up_to() == 0 && e.error_len().is_none())
        })
        .unwrap_or(0)
}

impl Utf8Chunks {
    fn slot(stream: OutputStream) -> usize {
        match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        }
    }

    /// The line for `data`, or none while all of it waits for the rest of a character.
    fn line(&mut self, stream: OutputStream, data: &[u8]) -> Option<Bytes> {
        let held = &mut self.held[Self::slot(stream)];
        let mut bytes = std::mem::take(held);
        bytes.extend_from_slice(data);
        let cut = bytes.len() - incomplete_tail(&bytes);
        *held = bytes.split_off(cut);
        (!bytes.is_empty()).then(|| output_line(stream, &String::from_utf8_lossy(&bytes)))
    }

    /// What is still held (an incomplete character at the end of the output), as lines.
    fn rest(&mut self) -> Vec<Bytes> {
        [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .filter_map(|st| {
                let held = std::mem::take(&mut self.held[Self::slot(st)]);
                (!held.is_empty()).then(|| output_line(st, &String::from_utf8_lossy(&held)))
            })
            .collect()
    }
}

/// The closing lines of a cell that ran: its results, its error, the end.
fn closing(out: &Outcome) -> Vec<Bytes> {
    let mut lines = Vec::new();
    let o = out.tool_output.clone().unwrap_or_default();
    let mut main = json!({"type": "result", "is_main_result": true});
    let mut has_main = false;
    if let Some(text) = o["value"].as_str() {
        main["text"] = json!(text);
        has_main = true;
    }
    for r in o["rich"].as_array().cloned().unwrap_or_default() {
        let data = r["data"].clone();
        match r["mime"].as_str() {
            Some("image/png") => {
                main["png"] = data;
                has_main = true;
            }
            Some("text/html") => {
                main["html"] = data;
                has_main = true;
            }
            _ => {}
        }
    }
    if has_main {
        lines.push(line(&main));
    }
    if !o["error"].is_null() {
        let tb = match &o["error"]["traceback"] {
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .concat(),
            Value::String(s) => s.clone(),
            _ => String::new(),
        };
        lines.push(line(&json!({
            "type": "error",
            "name": o["error"]["ename"],
            "value": o["error"]["evalue"],
            "traceback": tb,
        })));
    }
    lines.push(line(&json!({"type": "end_of_execution"})));
    lines
}

fn stopped_line(e: &E2bError) -> Vec<Bytes> {
    vec![
        line(&json!({
            "type": "error",
            "name": "SandboxioStopped",
            "value": e.message(),
            "traceback": "",
        })),
        line(&json!({"type": "end_of_execution"})),
    ]
}

/// `POST /execute`.
pub async fn execute(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Interpreter>,
    AfterAuth(body): AfterAuth,
) -> Response {
    match execute_inner(&st, r, &body).await {
        Ok(res) => res,
        // An ask answers 403 (`E2bError::status`): the SDK would read a 2xx body as output.
        Err(e) => plain_err(&e),
    }
}

async fn execute_inner(
    st: &AppState,
    r: Result<E2bCall, E2bError>,
    body: &[u8],
) -> Result<Response, E2bError> {
    let r = r?;
    let req: Execute = unary_request(body)?;
    r.caller.require(st, Scope::RunCode).await?;
    if req.env_vars.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(E2bError::Unsupported {
            what: "env_vars".into(),
            why: "a code context keeps the environment its sandbox was created with (`envs` at create)",
        });
    }
    let c = context_for(st, &r, &req).await?;
    let k = c.kernel().ok_or_else(|| E2bError::BadRequest {
        why: format!("context `{}` has no kernel; restart it", c.id),
    })?;
    let s = r.session.clone();
    let args = OperationArgs::RunCode {
        language: c.language,
        code: req.code,
    };
    let mut sub = session_submission(&s, args, &r.caller.ctx, SubmitExtras::default());
    if let Some(x) = sub.op.exec.as_mut() {
        x.context = Some(c.id.clone());
    }
    sub.labels.insert("code_context".into(), c.id.clone());
    sub.executor = Some(Arc::new(Call {
        kernel: k,
        context_id: c.id.clone(),
        sandbox_id: s.id.clone(),
        tier: s.spec.tier,
    }));
    let busy = s.begin();
    let mut run = st.backend.start(sub, Some(s.run_token()?), true);
    let native = s.processes.add(
        "run_code",
        vec![crate::contexts::lang_name(c.language).into()],
        false,
        run.token.clone(),
    );
    // A cell lasts no longer than the credential it was run with: revoked, the cell is
    // interrupted and its stream ends.
    native.cancel_when(
        crate::revocation::CANCELLED,
        st.watch_credential(&r.caller.credential.id).wait_owned(),
    );
    let first = tokio::time::timeout(FIRST_WORD, run.next()).await.ok();
    let mut pre = Vec::new();
    let mut utf8 = Utf8Chunks::default();
    match first {
        Some(Step::Done(res)) => {
            s.processes.remove(&native.id);
            let out = res?;
            if !answer::ran(&out.record) {
                return Err(E2bError::Stopped(Box::new(answer::stopped(
                    &out,
                    &r.caller.ctx,
                ))));
            }
            pre.extend(closing(&out));
            return Ok(ndjson(stream_of(pre)));
        }
        Some(Step::Asked(id)) => {
            s.processes.remove(&native.id);
            return Err(E2bError::Stopped(Box::new(answer::asked_problem(
                &id,
                &r.caller.ctx,
            ))));
        }
        Some(Step::Event(ExecEvent::Output { stream, data, .. })) => {
            pre.extend(utf8.line(stream, &data));
        }
        Some(Step::Event(_)) | None => {}
    }
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let ctx = r.caller.ctx.clone();
    tokio::spawn(async move {
        let _busy = busy;
        for b in pre {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        loop {
            // The client going away drops `run`, which cancels the cell (as E2B does).
            let lines = match run.next().await {
                Step::Event(ExecEvent::Output { stream, data, .. }) => {
                    match utf8.line(stream, &data) {
                        Some(l) => vec![l],
                        None => continue,
                    }
                }
                Step::Event(_) => continue,
                Step::Done(Ok(out)) if answer::ran(&out.record) => {
                    let mut lines = utf8.rest();
                    lines.extend(closing(&out));
                    lines
                }
                Step::Done(Ok(out)) => {
                    stopped_line(&E2bError::Stopped(Box::new(answer::stopped(&out, &ctx))))
                }
                Step::Done(Err(e)) => stopped_line(&E2bError::Server(e)),
                Step::Asked(id) => stopped_line(&E2bError::Stopped(Box::new(
                    answer::asked_problem(&id, &ctx),
                ))),
            };
            let last = String::from_utf8_lossy(lines.last().map(|b| b.as_ref()).unwrap_or(b""))
                .contains("end_of_execution");
            for b in lines {
                if tx.send(b).await.is_err() {
                    s.processes.remove(&native.id);
                    return;
                }
            }
            if last {
                s.processes.remove(&native.id);
                return;
            }
        }
    });
    Ok(ndjson(rx))
}

fn stream_of(lines: Vec<Bytes>) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(lines.len().max(1));
    for b in lines {
        let _ = tx.try_send(b);
    }
    rx
}

fn ndjson(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    let mut res = (StatusCode::OK, Body::from_stream(body)).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    res
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn texts(lines: &[Bytes]) -> String {
        lines
            .iter()
            .map(|b| {
                serde_json::from_slice::<Value>(b).unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_character_split_across_chunks_arrives_whole() {
        let bytes = "é€😀 ok".as_bytes();
        // Every split of every prefix: each chunk one byte.
        let mut u = Utf8Chunks::default();
        let mut lines: Vec<Bytes> = bytes
            .iter()
            .filter_map(|b| u.line(OutputStream::Stdout, std::slice::from_ref(b)))
            .collect();
        lines.extend(u.rest());
        assert_eq!(texts(&lines), "é€😀 ok");
        // Bytes that are not UTF-8 become U+FFFD; an incomplete end is flushed at the end.
        let mut u = Utf8Chunks::default();
        let mut lines: Vec<Bytes> = u
            .line(OutputStream::Stderr, b"a\xffb\xe2\x82")
            .into_iter()
            .collect();
        lines.extend(u.rest());
        assert_eq!(texts(&lines), "a\u{fffd}b\u{fffd}");
    }
}
