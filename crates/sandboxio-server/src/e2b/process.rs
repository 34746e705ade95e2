//! envd's `process.Process` service. A started command is one `exec` operation through the
//! chain (policy sees its argv, the budget reserves at its limits, one record), run as a
//! background process of its sandbox: it keeps running when the SDK stops reading (as in
//! E2B) and ends when it exits, is killed (`SendSignal`), times out or its sandbox closes.
//! `Start` and `Connect` stream its output as it happens. A stop by the chain before it ran
//! is the stream's error (a denial names the layer and reason, an ask the approval id).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use sandboxio_core::{ExecEvent, ExitStatus, OperationArgs, OutputStream};
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::Outcome;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};

use super::auth::{Envd, InSandbox, Sbx};
use super::connect::{self, decode_bytes, encode_bytes};
use super::error::E2bError;
use super::E2b;
use crate::answer;
use crate::backend::{session_submission, Run, Step, SubmitExtras};
use crate::body::AfterAuth;
use crate::processes::{ProcState, Process};
use crate::revocation::Revoked;
use crate::sessions::Busy;
use crate::state::AppState;

/// How long `Start` waits for the chain's first word (a denial, an ask, output).
const FIRST_WORD: Duration = Duration::from_millis(500);
/// A keepalive event while a command is quiet.
const KEEPALIVE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessConfig {
    #[serde(default)]
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartRequest {
    #[serde(default)]
    process: ProcessConfig,
    #[serde(default)]
    pty: Option<Value>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    stdin: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct Selector {
    #[serde(default)]
    pid: Option<u32>,
    #[serde(default)]
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WithProcess {
    #[serde(default)]
    process: Selector,
    #[serde(default)]
    signal: Option<Value>,
    #[serde(default)]
    input: Option<BTreeMap<String, String>>,
}

/// How a command ended, as envd's `EndEvent` says it.
#[derive(Debug, Clone)]
pub struct EndInfo {
    exit_code: i32,
    exited: bool,
    status: String,
    error: Option<String>,
    /// The chain stopped it after it was reported started: the stream ends with this error.
    failure: Option<Value>,
}

#[derive(Debug, Clone)]
enum PEvent {
    /// Output, and where it starts in all of its stream (the native process keeps it all).
    Out(OutputStream, Vec<u8>, u64),
    End(EndInfo),
}

/// A command started over the E2B API.
pub struct E2bProc {
    pub pid: u32,
    pub tag: Option<String>,
    config: ProcessConfig,
    native: Arc<Process>,
    events: broadcast::Sender<PEvent>,
    end: watch::Sender<Option<EndInfo>>,
    stdin: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
}

impl E2bProc {
    pub fn running(&self) -> bool {
        self.end.borrow().is_none()
    }

    fn info(&self) -> Value {
        // Env values are not shown back (they may hold secrets); their names are.
        let envs: BTreeMap<&String, &str> = self.config.envs.keys().map(|k| (k, "")).collect();
        let mut v = json!({
            "config": {"cmd": self.config.cmd, "args": self.config.args, "envs": envs},
            "pid": self.pid,
        });
        if let Some(t) = &self.tag {
            v["tag"] = json!(t);
        }
        v
    }

    fn ended(&self, end: EndInfo) {
        let _ = self.events.send(PEvent::End(end.clone()));
        self.end.send_replace(Some(end));
        if let Ok(mut s) = self.stdin.lock() {
            *s = None;
        }
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        9 => "killed",
        15 => "terminated",
        2 => "interrupt",
        6 => "aborted",
        11 => "segmentation fault",
        _ => "signal",
    }
}

fn end_of(out: &Outcome) -> EndInfo {
    let Some(r) = &out.result else {
        return EndInfo {
            exit_code: -1,
            exited: false,
            status: "not run".into(),
            error: Some(out.record.reason.clone()),
            failure: None,
        };
    };
    let (exit_code, exited, status) = match r.exit {
        ExitStatus::Code(c) => (c, true, format!("exit status {c}")),
        ExitStatus::Signal(s) => (-1, false, format!("signal: {}", signal_name(s))),
    };
    let error = if r.timed_out {
        Some("the command's time limit passed; its process tree was killed".to_string())
    } else if r.oom_killed {
        Some("killed for exceeding its memory limit".to_string())
    } else {
        r.cancelled.as_ref().map(|c| format!("cancelled: {c}"))
    };
    EndInfo {
        exit_code,
        exited,
        status,
        error,
        failure: None,
    }
}

fn failed(e: &E2bError) -> EndInfo {
    EndInfo {
        exit_code: -1,
        exited: false,
        status: "not run".into(),
        error: Some(e.message()),
        failure: Some(e.connect_body()),
    }
}

/// Marks the native process ended with what its request would have answered.
fn finish_native(native: &Process, res: &Result<Box<Outcome>, crate::error::ServerError>) {
    match res {
        Ok(out) => {
            let state = if !answer::ran(&out.record) {
                ProcState::Failed
            } else if out.result.as_ref().is_some_and(|r| r.cancelled.is_some()) {
                ProcState::Cancelled
            } else {
                ProcState::Exited
            };
            native.finish(
                state,
                Some(out.record.operation_id.clone()),
                json!({"record": out.record}),
            );
        }
        Err(e) => native.finish(
            ProcState::Failed,
            None,
            serde_json::to_value(e.problem()).unwrap_or_default(),
        ),
    }
}

fn event_json(ev: &PEvent) -> Value {
    match ev {
        PEvent::Out(OutputStream::Stdout, d, _) => {
            json!({"event": {"data": {"stdout": encode_bytes(d)}}})
        }
        PEvent::Out(OutputStream::Stderr, d, _) => {
            json!({"event": {"data": {"stderr": encode_bytes(d)}}})
        }
        PEvent::End(e) => {
            let mut end = json!({"exitCode": e.exit_code, "exited": e.exited, "status": e.status});
            if let Some(err) = &e.error {
                end["error"] = json!(err);
            }
            json!({"event": {"end": end}})
        }
    }
}

/// The command's time limit: the SDK's `timeout` (sent as `Connect-Timeout-Ms`), else
/// (`timeout=0`, no limit in E2B) the sandbox's remaining lifetime; never past the
/// template's command limit (`[e2b.templates.X] timeout`, `template`: the sandbox's, as
/// `/execute` and the native API hold its commands to it), the configured ceiling
/// (`[limits.max] timeout`) or the sandbox's end.
fn timeout_of(
    st: &AppState,
    s: &crate::sessions::Session,
    template: Option<Duration>,
    h: &HeaderMap,
) -> Duration {
    let asked = h
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let remaining = (s.expires_at() - chrono::Utc::now())
        .to_std()
        .unwrap_or(Duration::from_secs(1));
    let max = st.backend.gateway().config().limits_max.timeout;
    let max = if max.is_zero() {
        sandboxio_core::Limits::max().timeout
    } else {
        max
    };
    asked
        .unwrap_or(remaining)
        .min(remaining)
        .min(template.unwrap_or(Duration::MAX))
        .min(max)
        .max(Duration::from_secs(1))
}

async fn pump(mut run: Run, p: Arc<E2bProc>, ctx: crate::context::RequestCtx, _busy: Busy) {
    loop {
        match run.next().await {
            Step::Event(ExecEvent::Output { stream, data, .. }) => {
                let at = p.native.append(stream, &data);
                let _ = p.events.send(PEvent::Out(stream, data, at));
            }
            Step::Event(ev @ ExecEvent::Exit { .. }) => p.native.take_event(&ev),
            Step::Done(res) => {
                finish_native(&p.native, &res);
                let end = match res {
                    Ok(out) if answer::ran(&out.record) => end_of(&out),
                    Ok(out) => failed(&E2bError::Stopped(Box::new(answer::stopped(&out, &ctx)))),
                    Err(e) => failed(&E2bError::Server(e)),
                };
                p.ended(end);
                return;
            }
            Step::Asked(id) => {
                let e = E2bError::Stopped(Box::new(answer::asked_problem(&id, &ctx)));
                p.native.finish(ProcState::Failed, None, e.rest_body());
                p.ended(failed(&e));
                return;
            }
        }
    }
}

async fn send(tx: &mpsc::Sender<Bytes>, b: Bytes) -> bool {
    tx.send(b).await.is_ok()
}

/// The end of a followed command: its end event and the end of the stream (with the
/// chain's error when it stopped the command after it was reported started).
async fn finish(tx: &mpsc::Sender<Bytes>, end: EndInfo) {
    let tail = match &end.failure {
        Some(err) => connect::envelope(0x02, &json!({"error": err})),
        None => connect::end_ok(),
    };
    if end.failure.is_none() {
        let _ = tx
            .send(connect::message(&event_json(&PEvent::End(end))))
            .await;
    }
    let _ = tx.send(tail).await;
}

/// Where a follower is in each output stream: the bytes sent so far.
struct Sent {
    stdout: u64,
    stderr: u64,
}

/// The most output one stream message carries.
const CHUNK: usize = 64 << 10;

impl Sent {
    fn of(&mut self, stream: OutputStream) -> &mut u64 {
        match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        }
    }

    /// Sends what `stream` has past what was sent, from the process's kept output.
    async fn catch_up(
        &mut self,
        tx: &mpsc::Sender<Bytes>,
        p: &E2bProc,
        stream: OutputStream,
    ) -> bool {
        let (data, end) = p.native.output_from(stream, *self.of(stream));
        *self.of(stream) = end;
        for c in data.chunks(CHUNK) {
            let ev = PEvent::Out(stream, c.to_vec(), 0);
            if !send(tx, connect::message(&event_json(&ev))).await {
                return false;
            }
        }
        true
    }

    /// Sends output event `data` (at `at` of its stream), less what was sent already; a gap
    /// before it is filled from the kept output first.
    async fn out(
        &mut self,
        tx: &mpsc::Sender<Bytes>,
        p: &E2bProc,
        stream: OutputStream,
        data: Vec<u8>,
        at: u64,
    ) -> bool {
        let sent = *self.of(stream);
        let end = at + data.len() as u64;
        if end <= sent {
            return true;
        }
        if at > sent {
            return self.catch_up(tx, p, stream).await;
        }
        let rest = data[(sent - at) as usize..].to_vec();
        *self.of(stream) = end;
        send(
            tx,
            connect::message(&event_json(&PEvent::Out(stream, rest, at))),
        )
        .await
    }

    /// Everything kept and not sent, both streams (before the end is sent).
    async fn flush(&mut self, tx: &mpsc::Sender<Bytes>, p: &E2bProc) -> bool {
        self.catch_up(tx, p, OutputStream::Stdout).await
            && self.catch_up(tx, p, OutputStream::Stderr).await
    }
}

/// Streams `p` to the client: its start, `first` (what was read before), then what comes.
/// No output is lost to a slow reader: what the broadcast dropped for it (it lagged) is
/// sent again from the native process's kept output, in order within each stream, and
/// the end comes only after all of it. `from_now`: only what comes after (a `Connect` to
/// a running command); otherwise from the command's first byte. The stream ends with
/// `SBX_E1802` (Connect `unauthenticated`) once the credential that opened it (`revoked`)
/// is revoked or expires.
fn follow(p: Arc<E2bProc>, first: Vec<PEvent>, from_now: bool, mut revoked: Revoked) -> Response {
    let mut rx = p.events.subscribe();
    let mut sent = Sent {
        stdout: 0,
        stderr: 0,
    };
    if from_now {
        sent.stdout = p.native.output_from(OutputStream::Stdout, u64::MAX).1;
        sent.stderr = p.native.output_from(OutputStream::Stderr, u64::MAX).1;
    }
    let (tx, res) = connect::stream_response();
    tokio::spawn(async move {
        if !send(
            &tx,
            connect::message(&json!({"event": {"start": {"pid": p.pid}}})),
        )
        .await
        {
            return;
        }
        for ev in first {
            if let PEvent::Out(stream, data, at) = ev {
                if !sent.out(&tx, &p, stream, data, at).await {
                    return;
                }
            }
        }
        let done = p.end.borrow().clone();
        if let Some(end) = done {
            if sent.flush(&tx, &p).await {
                finish(&tx, end).await;
            }
            return;
        }
        let mut beat = tokio::time::interval(KEEPALIVE);
        beat.tick().await;
        loop {
            tokio::select! {
                biased;
                () = revoked.wait() => {
                    let e = E2bError::Server(crate::error::ServerError::BadCredential);
                    let _ = tx.send(connect::envelope(0x02, &json!({"error": e.connect_body()}))).await;
                    return;
                }
                ev = rx.recv() => match ev {
                    Ok(PEvent::End(end)) => {
                        if sent.flush(&tx, &p).await {
                            finish(&tx, end).await;
                        }
                        return;
                    }
                    Ok(PEvent::Out(stream, data, at)) => {
                        if !sent.out(&tx, &p, stream, data, at).await {
                            return;
                        }
                    }
                    // A reader too slow for the output: what it missed is sent from the
                    // native process's kept output.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !sent.flush(&tx, &p).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        let done = p.end.borrow().clone();
                        if let Some(end) = done {
                            if sent.flush(&tx, &p).await {
                                finish(&tx, end).await;
                            }
                        }
                        return;
                    }
                },
                _ = beat.tick() => {
                    if !send(&tx, connect::message(&json!({"event": {"keepalive": {}}}))).await {
                        return;
                    }
                }
            }
        }
    });
    res
}

/// `process.Process/Start` (server streaming).
pub async fn start(
    State(st): State<AppState>,
    Extension(e2b): Extension<Arc<E2b>>,
    Sbx(r, _): Sbx<Envd>,
    headers: HeaderMap,
    AfterAuth(body): AfterAuth,
) -> Response {
    match start_inner(&st, &e2b, r, &headers, &body).await {
        Ok(res) => res,
        Err(e) => connect::stream_err(&e),
    }
}

async fn start_inner(
    st: &AppState,
    e2b: &E2b,
    r: Result<InSandbox, E2bError>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, E2bError> {
    let r = r?;
    let req: StartRequest = connect::stream_request(body)?;
    r.caller.require(st, Scope::Exec).await?;
    if req.pty.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(E2bError::Unsupported {
            what: "pty".into(),
            why: "commands run without a terminal over the E2B API",
        });
    }
    if let Some(cwd) = req.process.cwd.as_deref().filter(|c| !c.is_empty()) {
        return Err(E2bError::Unsupported {
            what: format!("cwd {cwd}"),
            why: "a command runs in a fresh directory; the workspace (`/home/user` in the files API) is at $SANDBOX_INPUT and what it writes to $SANDBOX_OUTPUT lands there",
        });
    }
    if req.process.cmd.is_empty() {
        return Err(E2bError::BadRequest {
            why: "`process.cmd` is empty".into(),
        });
    }
    let mut argv = vec![req.process.cmd.clone()];
    argv.extend(req.process.args.iter().cloned());
    let s = r.session.clone();
    // An E2B command is a background process of the sandbox (it outlives the stream), so
    // the tenant's quota of them holds, as for the native API's background execs.
    let limit = st.opts.quota(&s.tenant).max_background;
    if st.sessions.background_running(&s.tenant) >= limit {
        let e = crate::error::ServerError::BackgroundQuota {
            tenant: s.tenant.clone(),
            limit,
        };
        st.refusals
            .refused(st, &r.caller.ctx, Some(&s.tenant), &e)
            .await;
        return Err(e.into());
    }
    // A template that sets a command limit holds every command of its sandboxes to it
    // (the limit the sandbox was created with, as for its other commands).
    let template_limit = e2b
        .config
        .template(&r.entry.template)
        .and_then(|t| t.timeout)
        .map(|_| s.spec.limits.timeout);
    let pid = r.entry.next_pid();
    let extra = SubmitExtras {
        env: req.process.envs.clone(),
        timeout: Some(timeout_of(st, &s, template_limit, headers)),
        ..SubmitExtras::default()
    };
    let mut sub = session_submission(
        &s,
        OperationArgs::Exec { argv: argv.clone() },
        &r.caller.ctx,
        extra,
    );
    sub.labels.insert("e2b_pid".into(), pid.to_string());
    let stdin_tx = if req.stdin == Some(true) {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        if let Some(x) = sub.op.exec.as_mut() {
            x.stdin_stream = true;
        }
        sub.stream.stdin = Some(rx);
        Some(tx)
    } else {
        None
    };
    let busy = s.begin();
    let mut run = st.backend.start(sub, Some(s.run_token()?), true);
    let native = s.processes.add("exec", argv, true, run.token.clone());
    // A command lasts no longer than the credential it was started with.
    let credential = r.caller.credential.id.clone();
    native.cancel_when(
        crate::revocation::CANCELLED,
        st.watch_credential(&credential).wait_owned(),
    );
    let (ev_tx, _) = broadcast::channel(256);
    let p = Arc::new(E2bProc {
        pid,
        tag: req.tag.clone(),
        config: ProcessConfig {
            cwd: None,
            ..req.process
        },
        native: native.clone(),
        events: ev_tx,
        end: watch::channel(None).0,
        stdin: Mutex::new(stdin_tx),
    });
    let mut first = Vec::new();
    match tokio::time::timeout(FIRST_WORD, run.next()).await {
        Ok(Step::Done(res)) => {
            finish_native(&native, &res);
            let out = res?;
            if !answer::ran(&out.record) {
                s.processes.remove(&native.id);
                return Err(E2bError::Stopped(Box::new(answer::stopped(
                    &out,
                    &r.caller.ctx,
                ))));
            }
            p.ended(end_of(&out));
            r.entry.add_proc(p.clone());
            return Ok(follow(p, first, false, st.watch_credential(&credential)));
        }
        Ok(Step::Asked(id)) => {
            s.processes.remove(&native.id);
            return Err(E2bError::Stopped(Box::new(answer::asked_problem(
                &id,
                &r.caller.ctx,
            ))));
        }
        Ok(Step::Event(ev)) => match ev {
            ExecEvent::Output { stream, data, .. } => {
                let at = native.append(stream, &data);
                first.push(PEvent::Out(stream, data, at));
            }
            ev => native.take_event(&ev),
        },
        Err(_) => {}
    }
    r.entry.add_proc(p.clone());
    let res = follow(p.clone(), first, false, st.watch_credential(&credential));
    tokio::spawn(pump(run, p, r.caller.ctx.clone(), busy));
    Ok(res)
}

fn find(r: &InSandbox, sel: &Selector) -> Result<Arc<E2bProc>, E2bError> {
    let found = match (&sel.pid, &sel.tag) {
        (Some(pid), _) => r.entry.proc_by_pid(*pid),
        (None, Some(tag)) => r.entry.proc_by_tag(tag),
        (None, None) => None,
    };
    found.ok_or_else(|| E2bError::NoProcess {
        selector: match (&sel.pid, &sel.tag) {
            (Some(pid), _) => format!("pid {pid}"),
            (None, Some(t)) => format!("tag `{}`", t.chars().take(64).collect::<String>()),
            (None, None) => "no pid or tag".into(),
        },
    })
}

/// `process.Process/Connect` (server streaming): follow a running command.
pub async fn connect_to(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Envd>,
    AfterAuth(body): AfterAuth,
) -> Response {
    let go = async {
        let r = r?;
        let req: WithProcess = connect::stream_request(&body)?;
        r.caller.require(&st, Scope::Exec).await?;
        let p = find(&r, &req.process)?;
        let revoked = st.watch_credential(&r.caller.credential.id);
        Ok::<_, E2bError>(follow(p, Vec::new(), true, revoked))
    };
    match go.await {
        Ok(res) => res,
        Err(e) => connect::stream_err(&e),
    }
}

/// The unary methods: `List`, `SendSignal`, `SendInput`, `CloseStdin`; `Update` and
/// `StreamInput` are not implemented.
pub async fn unary(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Envd>,
    crate::extract::Path(method): crate::extract::Path<String>,
    AfterAuth(body): AfterAuth,
) -> Response {
    match unary_inner(&st, r, &method, &body).await {
        Ok(v) => connect::unary_ok(&v),
        Err(e) => connect::unary_err(&e),
    }
}

async fn unary_inner(
    st: &AppState,
    r: Result<InSandbox, E2bError>,
    method: &str,
    body: &[u8],
) -> Result<Value, E2bError> {
    let r = r?;
    r.caller.require(st, Scope::Exec).await?;
    match method {
        "List" => {
            let procs: Vec<Value> = r.entry.running_procs().iter().map(|p| p.info()).collect();
            Ok(json!({"processes": procs}))
        }
        "SendSignal" => {
            let req: WithProcess = connect::unary_request(body)?;
            let p = find(&r, &req.process)?;
            let sig = req
                .signal
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "SIGNAL_SIGKILL".into());
            // Either signal ends the whole process tree (its record says cancelled).
            p.native
                .kill(&format!("{} sent over the E2B API", sig.trim_matches('"')));
            Ok(json!({}))
        }
        "SendInput" => {
            let req: WithProcess = connect::unary_request(body)?;
            let p = find(&r, &req.process)?;
            let input = req.input.unwrap_or_default();
            let Some(data) = input.get("stdin") else {
                return Err(E2bError::Unsupported {
                    what: "pty input".into(),
                    why: "commands run without a terminal over the E2B API",
                });
            };
            let bytes = decode_bytes(data)?;
            let tx = p.stdin.lock().ok().and_then(|s| s.clone());
            let Some(tx) = tx else {
                return Err(E2bError::BadRequest {
                    why: format!(
                        "process {} was started without stdin (or it was closed)",
                        p.pid
                    ),
                });
            };
            if tx.send(bytes).await.is_err() {
                return Err(E2bError::NoProcess {
                    selector: format!("pid {} (it ended)", p.pid),
                });
            }
            Ok(json!({}))
        }
        "CloseStdin" => {
            let req: WithProcess = connect::unary_request(body)?;
            let p = find(&r, &req.process)?;
            if let Ok(mut s) = p.stdin.lock() {
                *s = None;
            }
            Ok(json!({}))
        }
        other => Err(E2bError::NotImplemented {
            method: format!(
                "process.Process/{}",
                other.chars().take(64).collect::<String>()
            ),
        }),
    }
}
