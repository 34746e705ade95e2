//! A kernel: the driver script (`kernel.py`, `kernel.js`) run as one long `run_code`
//! operation in the sandbox, under its tier and limits, with its standard input streamed.
//! Its start is decided by the chain like any run_code (policy sees the driver's code) and
//! its end leaves that operation's record. A reader task turns its output into frames and
//! raw output for the call in progress.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandboxio_core::{ExecEvent, Language, OperationArgs, OutputStream};
use sandboxio_gateway::CancelToken;
use serde_json::Value;
use tokio::sync::{mpsc, Mutex};

use super::frames::{mark, Parser, Piece};
use crate::answer;
use crate::backend::{session_submission, Run, Step, SubmitExtras};
use crate::context::{random_hex, RequestCtx};
use crate::error::ServerError;
use crate::problem::Problem;
use crate::processes::{ProcState, Process};
use crate::sessions::Session;
use crate::state::AppState;

pub const PYTHON: &str = include_str!("kernel.py");
pub const NODE: &str = include_str!("kernel.js");
/// How long a new kernel may take to say it is ready.
const READY: Duration = Duration::from_secs(30);

/// What the reader hands to the call in progress.
#[derive(Debug)]
pub enum KMsg {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Frame(Value),
    /// The kernel ended (or never started): why, as a problem.
    Gone(Box<Problem>),
    /// Starting the kernel needs a person's approval.
    Asked(String),
}

pub struct Kernel {
    pub language: Language,
    pub version: String,
    stdin: mpsc::Sender<Vec<u8>>,
    /// One call at a time reads this.
    pub out: Mutex<mpsc::Receiver<KMsg>>,
    token: CancelToken,
    alive: AtomicBool,
    seq: AtomicI64,
    /// The kernel's own process in the sandbox's list (kind `context`).
    pub process: Arc<Process>,
}

impl Kernel {
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    pub fn mark_dead(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    /// A new call id: unpredictable (a subprocess of an earlier cell cannot answer a call
    /// whose id it cannot guess) and below 2^53 (exact in JavaScript).
    pub fn next_id(&self) -> i64 {
        let n = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let salt: i64 = rand::Rng::gen_range(&mut rand::thread_rng(), 0..(1i64 << 32));
        // The counter in the low 20 bits keeps ids distinct; the high bits are random.
        (salt << 20) | (n & 0xF_FFFF)
    }

    /// Sends one request line; false when the kernel no longer reads.
    pub async fn send(&self, req: &Value) -> bool {
        let mut line = req.to_string().into_bytes();
        line.push(b'\n');
        self.stdin.send(line).await.is_ok()
    }

    /// Ends the kernel (its whole process tree); its operation is recorded as cancelled.
    pub fn kill(&self, why: &str) {
        self.mark_dead();
        self.token.cancel(why.to_string());
    }
}

fn driver(language: Language) -> Option<&'static str> {
    match language {
        Language::Python => Some(PYTHON),
        Language::Node => Some(NODE),
        Language::Bash => None,
    }
}

/// The result of starting a kernel.
pub enum Started {
    Ready(Arc<Kernel>),
    /// The chain stopped it, or it did not come up: the answer to give.
    Refused(Box<Problem>),
    Asked(String),
}

/// Starts a kernel for `language` in sandbox `s` and waits until it is ready.
pub async fn start(
    st: &AppState,
    s: &Arc<Session>,
    language: Language,
    ctx: &RequestCtx,
) -> Result<Started, ServerError> {
    let Some(code) = driver(language) else {
        return Err(ServerError::BadValue {
            field: "language",
            why: "code contexts are for `python` and `node`".into(),
        });
    };
    let nonce = random_hex(12);
    let cfg = st.backend.gateway().config();
    // The kernel lives as long as its sandbox may (within the configured ceiling); its
    // output caps are the ceilings, since it speaks for every call.
    let max = &cfg.limits_max;
    let ceiling = |v: Duration, d: Duration| if v.is_zero() { d } else { v };
    let remaining = (s.expires_at() - chrono::Utc::now())
        .to_std()
        .unwrap_or(Duration::from_secs(1));
    let timeout = remaining
        .min(ceiling(max.timeout, sandboxio_core::Limits::max().timeout))
        .max(Duration::from_secs(1));
    let mut extra = SubmitExtras {
        timeout: Some(timeout),
        rationale: Some(format!(
            "start a {} code context",
            super::lang_name(language)
        )),
        ..SubmitExtras::default()
    };
    extra.env.insert("MPLBACKEND".into(), "Agg".into());
    let args = OperationArgs::RunCode {
        language,
        code: code.to_string(),
    };
    let mut sub = session_submission(s, args, ctx, extra);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>(16);
    // The nonce is the first line on the kernel's standard input, never in its
    // environment (which every process it starts inherits, and `/proc/<pid>/environ`
    // shows): a subprocess of a cell cannot learn it, so cannot print a frame.
    let hello = format!("{}\n", serde_json::json!({"op": "hello", "nonce": nonce}));
    if stdin_tx.send(hello.into_bytes()).await.is_err() {
        return Err(ServerError::Internal {
            action: "starting a code context's kernel",
        });
    }
    if let Some(req) = sub.op.exec.as_mut() {
        req.stdin_stream = true;
        let cap = |v: sandboxio_core::ByteSize, d: sandboxio_core::ByteSize| {
            if v.0 == 0 {
                d
            } else {
                v
            }
        };
        req.limits.stdout_cap = cap(max.stdout_cap, sandboxio_core::Limits::max().stdout_cap);
        req.limits.stderr_cap = cap(max.stderr_cap, sandboxio_core::Limits::max().stderr_cap);
    }
    // What the kernel may write over its life: past it, nothing it says reaches the
    // server (its frames neither), so the kernel is ended with that reason (`read`).
    let lifetime_cap = sub
        .op
        .exec
        .as_ref()
        .map_or(u64::MAX, |r| r.limits.stdout_cap.bytes());
    sub.stream.stdin = Some(stdin_rx);
    sub.labels.insert(
        "code_context".into(),
        super::lang_name(language).to_string(),
    );
    let run = st.backend.start(sub, Some(s.run_token()?), true);
    let token = run.token.clone();
    let process = s.processes.add(
        "context",
        vec![super::lang_name(language).to_string()],
        true,
        token.clone(),
    );
    let (tx, mut rx) = mpsc::channel::<KMsg>(256);
    tokio::spawn(read(
        run,
        Parser::new(mark(&nonce)),
        lifetime_cap,
        tx,
        process.clone(),
        ctx.clone(),
    ));
    let first = tokio::time::timeout(READY, async {
        loop {
            match rx.recv().await {
                Some(KMsg::Frame(v)) if v["t"] == "ready" => return Ok(v),
                Some(KMsg::Gone(p)) => return Err(Some(p)),
                Some(KMsg::Asked(id)) => return Ok(serde_json::json!({"asked": id})),
                Some(_) => continue,
                None => return Err(None),
            }
        }
    })
    .await;
    let ready = match first {
        Ok(Ok(v)) => v,
        Ok(Err(Some(p))) => {
            s.processes.remove(&process.id);
            return Ok(Started::Refused(p));
        }
        Ok(Err(None)) | Err(_) => {
            token.cancel("the kernel did not become ready");
            s.processes.remove(&process.id);
            return Err(ServerError::Internal {
                action: "starting a code context's kernel",
            });
        }
    };
    if let Some(id) = ready.get("asked").and_then(Value::as_str) {
        s.processes.remove(&process.id);
        return Ok(Started::Asked(id.to_string()));
    }
    Ok(Started::Ready(Arc::new(Kernel {
        language,
        version: ready["version"].as_str().unwrap_or("").to_string(),
        stdin: stdin_tx,
        out: Mutex::new(rx),
        token,
        alive: AtomicBool::new(true),
        seq: AtomicI64::new(0),
        process,
    })))
}

/// The kernel's output, as frames and raw output, until it ends.
async fn read(
    mut run: Run,
    mut parser: Parser,
    lifetime_cap: u64,
    tx: mpsc::Sender<KMsg>,
    process: Arc<Process>,
    ctx: RequestCtx,
) {
    let mut written = 0u64;
    loop {
        let msgs: Vec<KMsg> = match run.next().await {
            Step::Event(ExecEvent::Output { stream, data, .. }) => match stream {
                OutputStream::Stdout => {
                    written += data.len() as u64;
                    if written >= lifetime_cap {
                        run.token.cancel(format!(
                            "the context's output reached its lifetime cap of {lifetime_cap} bytes"
                        ));
                    }
                    parser
                        .push(&data)
                        .into_iter()
                        .map(|p| match p {
                            Piece::Raw(b) => KMsg::Stdout(b),
                            Piece::Frame(v) => KMsg::Frame(v),
                        })
                        .collect()
                }
                OutputStream::Stderr => vec![KMsg::Stderr(data)],
            },
            Step::Event(ExecEvent::Exit { .. }) => Vec::new(),
            Step::Done(res) => {
                let (state, op, problem) = match &res {
                    Ok(out) if answer::ran(&out.record) => (
                        ProcState::Exited,
                        Some(out.record.operation_id.clone()),
                        ended(out),
                    ),
                    Ok(out) => (
                        ProcState::Failed,
                        Some(out.record.operation_id.clone()),
                        answer::stopped(out, &ctx),
                    ),
                    Err(e) => (ProcState::Failed, None, e.problem()),
                };
                process.finish(
                    state,
                    op,
                    serde_json::to_value(&problem).unwrap_or_default(),
                );
                let _ = tx.send(KMsg::Gone(Box::new(problem))).await;
                return;
            }
            Step::Asked(id) => {
                let _ = tx.send(KMsg::Asked(id)).await;
                return;
            }
        };
        for m in msgs {
            // A kernel whose caller is gone is still read to its end.
            let _ = tx.send(m).await;
        }
    }
}

/// The problem for a kernel that ran and ended.
fn ended(out: &sandboxio_gateway::Outcome) -> Problem {
    let why = match &out.result {
        Some(r) if r.timed_out => "it reached its time limit".to_string(),
        Some(r) if r.oom_killed => "it ran out of memory".to_string(),
        Some(r) if r.cancelled.is_some() => {
            format!(
                "it was stopped ({})",
                r.cancelled.clone().unwrap_or_default()
            )
        }
        Some(r) => {
            let tail = r.stderr_lossy();
            let tail: String = tail
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("it exited ({:?}): {}", r.exit, tail.trim())
        }
        None => "it ended".to_string(),
    };
    let mut p = Problem::new(
        axum::http::StatusCode::CONFLICT,
        "context ended",
        super::CONTEXT_GONE,
        format!("the code context's kernel has ended: {why}; restart the context"),
    );
    p.operation_id = Some(out.record.operation_id.clone());
    p
}
