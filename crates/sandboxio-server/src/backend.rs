//! The glue between HTTP and the gateway: the only module that submits operations.
//!
//! Every operation runs in its own task with a cancel token, so a client that goes away, a
//! request timeout or a shutdown cancels it (the sandbox's whole process tree is killed and
//! the operation still gets its one record). An `ask` does not hold the request: the gateway
//! tells the handler the pending approval (`Submission::approval_pending`), the handler
//! answers 202, and the operation goes on waiting in its task for a person's decision in the
//! store (over this API or from the CLI); its outcome is kept for `GET
//! /v1/approvals/{id}/outcome`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio_core::{ErrorCode, ExecEvent, Layer, OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::store::Store;
use sandboxio_gateway::{CancelToken, Gateway, GatewayError, Outcome, Submission};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How long a finished asked-for outcome is kept for its caller to fetch.
const PENDING_KEEP: Duration = Duration::from_secs(3600);

/// The outcome of an operation, or the gateway's failure (its code and message).
pub type Finished = Result<Outcome, (String, String)>;

/// An operation that asked for approval and goes on in the background.
struct Pending {
    tenant: String,
    done: watch::Receiver<Option<Finished>>,
    finished_at: Arc<Mutex<Option<Instant>>>,
}

/// Events buffered between the gateway and a caller that reads them live.
const EVENTS: usize = 64;

/// What a submission came to.
pub enum Submitted {
    Done(Box<Outcome>),
    /// An approval is pending; the operation runs once it is given.
    Asked {
        approval_id: String,
    },
}

/// What an operation in flight is doing, for the dashboard's active agents (never its
/// arguments).
#[derive(Debug, Clone)]
pub struct Activity {
    pub tenant: String,
    pub sandbox: Option<String>,
    pub agent: Option<String>,
    /// The operation kind, and the language for `run_code`.
    pub action: String,
    pub started: chrono::DateTime<chrono::Utc>,
}

impl Activity {
    fn of(sub: &Submission) -> Activity {
        let op = &sub.op;
        let action = match &op.args {
            sandboxio_core::OperationArgs::RunCode { language, .. } => {
                format!("run_code {}", language.as_str())
            }
            _ => op.kind().as_str().to_string(),
        };
        Activity {
            tenant: op.principal.tenant.clone(),
            sandbox: op.principal.session.clone(),
            agent: op.principal.agent.clone(),
            action,
            started: chrono::Utc::now(),
        }
    }
}

pub struct Backend {
    gw: Arc<Gateway>,
    /// Announces every approval that starts waiting (`[server.approval_webhook]`).
    webhook: Option<Arc<crate::webhook::Webhook>>,
    running: Mutex<HashMap<u64, (CancelToken, Activity)>>,
    pending: Mutex<HashMap<String, Pending>>,
    seq: AtomicU64,
}

impl Backend {
    /// The gateway should wait for approvals in the store (`Approver::Store`), where this
    /// API and the CLI write decisions.
    pub fn new(gw: Arc<Gateway>) -> Backend {
        Backend {
            gw,
            webhook: None,
            running: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        }
    }

    /// The backend announcing each pending approval to `hook`.
    pub fn with_webhook(mut self, hook: crate::webhook::Webhook) -> Backend {
        self.webhook = Some(Arc::new(hook));
        self
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gw
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        self.gw.store()
    }

    /// Runs one operation through the chain. Returns when it finished or when it is waiting
    /// for an approval.
    /// `linked`: a token (the sandbox's) whose cancellation cancels this operation too.
    pub async fn submit(
        self: &Arc<Self>,
        sub: Submission,
        linked: Option<CancelToken>,
    ) -> Result<Submitted, ServerError> {
        let mut run = self.start(sub, linked, false);
        loop {
            match run.next().await {
                Step::Event(_) => {}
                Step::Done(r) => return r.map(Submitted::Done),
                Step::Asked(approval_id) => return Ok(Submitted::Asked { approval_id }),
            }
        }
    }

    /// Starts one operation through the chain in its own task and returns at once; the
    /// caller takes its steps ([`Run::next`]): live events (when `events` is set), then the
    /// outcome or the pending approval. Dropping the [`Run`] before the end cancels it.
    pub fn start(
        self: &Arc<Self>,
        mut sub: Submission,
        linked: Option<CancelToken>,
        events: bool,
    ) -> Run {
        let token = CancelToken::new();
        sub.cancel = Some(token.clone());
        let (ev_tx, ev_rx) = tokio::sync::mpsc::channel(EVENTS);
        if events {
            sub.stream.events = Some(ev_tx);
        }
        let tenant = sub.op.principal.tenant.clone();
        let (tx, asked) = tokio::sync::mpsc::unbounded_channel();
        sub.approval_pending = Some(tx);
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let activity = Activity::of(&sub);
        if let Ok(mut r) = self.running.lock() {
            r.insert(n, (token.clone(), activity));
        }
        let gw = self.gw.clone();
        // The linked token is watched in the operation's own task (no second task per
        // operation): its cancellation cancels the operation, which still ends and is
        // recorded in this task.
        let t = token.clone();
        let task = tokio::spawn(async move {
            let run = gw.submit(sub);
            let Some(l) = linked else {
                return run.await;
            };
            tokio::pin!(run);
            tokio::select! {
                biased;
                out = &mut run => out,
                why = l.cancelled() => {
                    t.cancel(why);
                    run.await
                }
            }
        });
        Run {
            backend: self.clone(),
            token: token.clone(),
            events: ev_rx,
            events_open: events,
            asked,
            task: Some(task),
            tenant,
            n,
            armed: true,
        }
    }

    fn untrack(&self, n: u64) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(&n);
        }
    }

    fn keep_pending(
        self: &Arc<Backend>,
        approval_id: &str,
        tenant: String,
        task: tokio::task::JoinHandle<Result<Outcome, GatewayError>>,
        n: u64,
    ) {
        let (tx, rx) = watch::channel(None);
        let finished_at = Arc::new(Mutex::new(None));
        let fin = finished_at.clone();
        let me = self.clone();
        tokio::spawn(async move {
            let res: Finished = match task.await {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(e)) => Err((e.code().to_string(), e.to_string())),
                Err(_) => Err(("SBX_E1812".into(), "the operation's task failed".into())),
            };
            me.untrack(n);
            let _ = tx.send(Some(res));
            if let Ok(mut f) = fin.lock() {
                *f = Some(Instant::now());
            }
        });
        if let Ok(mut p) = self.pending.lock() {
            p.retain(|_, v| {
                v.finished_at
                    .lock()
                    .map(|f| f.is_none_or(|t| t.elapsed() < PENDING_KEEP))
                    .unwrap_or(false)
            });
            p.insert(
                approval_id.to_string(),
                Pending {
                    tenant,
                    done: rx,
                    finished_at,
                },
            );
        }
    }

    /// The outcome of an asked-for operation of `tenant`, waiting up to `wait` for it.
    /// `None`: no such operation for this tenant; `Some(None)`: not finished yet.
    pub async fn pending_outcome(
        &self,
        tenant: &str,
        approval_id: &str,
        wait: Duration,
    ) -> Option<Option<Finished>> {
        let mut rx = {
            let p = self.pending.lock().ok()?;
            let e = p.get(approval_id).filter(|e| e.tenant == tenant)?;
            e.done.clone()
        };
        let got = match tokio::time::timeout(wait, rx.wait_for(|v| v.is_some())).await {
            Ok(Ok(v)) => Some(v.clone()),
            _ => None,
        };
        Some(got.unwrap_or_else(|| rx.borrow().clone()))
    }

    /// Cancels everything this server runs (shutdown past its grace period).
    pub fn cancel_all(&self, reason: &str) -> usize {
        let tokens: Vec<CancelToken> = self
            .running
            .lock()
            .map(|r| r.values().map(|(t, _)| t.clone()).collect())
            .unwrap_or_default();
        for t in &tokens {
            t.cancel(reason.to_string());
        }
        tokens.len()
    }

    /// What runs now (or waits for an approval), oldest first.
    pub fn activities(&self) -> Vec<Activity> {
        let mut v: Vec<Activity> = self
            .running
            .lock()
            .map(|r| r.values().map(|(_, a)| a.clone()).collect())
            .unwrap_or_default();
        v.sort_by_key(|a| a.started);
        v
    }

    /// How many operations are running (or waiting for an approval).
    pub fn running(&self) -> usize {
        self.running.lock().map(|r| r.len()).unwrap_or(0)
            + self
                .pending
                .lock()
                .map(|p| p.values().filter(|v| v.done.borrow().is_none()).count())
                .unwrap_or(0)
    }

    /// Writes a record that did not come from the chain: a refused credential or scope, an
    /// admin action, a sandbox's lifecycle. Same redaction and sinks as the chain's.
    pub async fn record(&self, rec: OperationRecord) {
        if let Err(e) = self.gw.auditor().record(rec).await {
            tracing::warn!(code = e.code(), "recording a server event failed: {e}");
            return;
        }
        // Anchored like every record: the store's signed head covers it at once (`audit
        // verify` of the running server's trail vouches for it; a cut is caught).
        self.gw.store_heads_async().await;
    }
}

/// One step of a started operation.
pub enum Step {
    /// Output or the exit, as it happens (redacted by the gateway).
    Event(ExecEvent),
    /// The outcome (or the gateway's failure); nothing follows.
    Done(Result<Box<Outcome>, ServerError>),
    /// An approval is pending; the operation goes on in the background and its outcome is
    /// kept for `GET /v1/approvals/{id}/outcome`. Nothing follows.
    Asked(String),
}

/// An operation running in its own task. Dropped before its end, it is cancelled (its
/// process tree killed) and still recorded.
pub struct Run {
    backend: Arc<Backend>,
    /// Cancels this operation (a `DELETE` of its process, a client that went away).
    pub token: CancelToken,
    events: mpsc::Receiver<ExecEvent>,
    events_open: bool,
    asked: mpsc::UnboundedReceiver<sandboxio_gateway::store::Approval>,
    task: Option<JoinHandle<Result<Outcome, GatewayError>>>,
    tenant: String,
    n: u64,
    armed: bool,
}

impl Run {
    /// The next step. Events all come before the outcome. Cancel-safe: a `select!` or a
    /// timeout may drop this future and call it again. Not to be called after `Done` or
    /// `Asked`.
    pub async fn next(&mut self) -> Step {
        loop {
            let Some(task) = self.task.as_mut() else {
                return Step::Done(Err(ServerError::Internal {
                    action: "reading an operation that ended",
                }));
            };
            tokio::select! {
                biased;
                ev = self.events.recv(), if self.events_open => match ev {
                    Some(ev) => return Step::Event(ev),
                    None => self.events_open = false,
                },
                Some(approval) = self.asked.recv() => {
                    self.armed = false;
                    if let Some(hook) = &self.backend.webhook {
                        crate::webhook::announce(hook, approval.clone(), self.backend.clone());
                    }
                    if let Some(task) = self.task.take() {
                        self.backend
                            .keep_pending(&approval.id, self.tenant.clone(), task, self.n);
                    }
                    return Step::Asked(approval.id);
                }
                done = task, if !self.events_open => {
                    self.armed = false;
                    self.task = None;
                    self.backend.untrack(self.n);
                    return Step::Done(match done {
                        Ok(Ok(out)) => Ok(Box::new(out)),
                        Ok(Err(e)) => Err(ServerError::Gateway(e)),
                        Err(_) => Err(ServerError::Internal { action: "running an operation" }),
                    });
                }
            }
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.token.cancel("the client went away");
        // The operation ends (cancelled, recorded) in its task; stop counting it then.
        if let Some(task) = self.task.take() {
            let backend = self.backend.clone();
            let n = self.n;
            tokio::spawn(async move {
                let _ = task.await;
                backend.untrack(n);
            });
        }
    }
}

/// A record for something the server itself decided or did.
pub fn server_record(
    event: &str,
    tenant: &str,
    ctx: &crate::context::RequestCtx,
    verdict: Verdict,
    reason: String,
) -> OperationRecord {
    let mut rec = OperationRecord::new(ctx.request_id.clone(), event);
    rec.tool_name = event.to_string();
    rec.tenant_id = Some(tenant.to_string());
    rec.backend = "server".into();
    rec.verdict = verdict;
    rec.layer = Layer::Admit;
    rec.status = if verdict == Verdict::Deny {
        OperationStatus::Denied
    } else {
        OperationStatus::Ok
    };
    rec.reason = reason;
    if let Some((trace, span)) = crate::context::parse_traceparent(&ctx.traceparent) {
        rec.trace_id = Some(trace);
        rec.span_id = Some(span);
    }
    rec
}

use crate::error::ServerError;

/// The submission for an operation in a session: its tenant, its sandbox's tier, the
/// workspace as input and output directory and as the root of file operations.
pub fn session_submission(
    session: &crate::sessions::Session,
    args: sandboxio_core::OperationArgs,
    ctx: &crate::context::RequestCtx,
    extra: SubmitExtras,
) -> Submission {
    use sandboxio_core::{ExecRequest, Operation, Principal};
    let principal = Principal {
        tenant: session.tenant.clone(),
        session: Some(session.id.clone()),
        agent: None,
    };
    let is_exec = matches!(
        args,
        sandboxio_core::OperationArgs::Exec { .. } | sandboxio_core::OperationArgs::RunCode { .. }
    );
    let mut op = Operation::new(principal, args);
    op.tier = Some(session.spec.tier);
    op.idempotency_key = extra.idempotency_key;
    op.rationale = extra.rationale;
    let mut sub = Submission::new(op);
    if is_exec {
        let mut req = ExecRequest::new(Vec::<String>::new());
        req.env = session.spec.env.clone();
        req.env.extend(extra.env);
        req.stdin = extra.stdin;
        req.limits = session.spec.limits.clone();
        if let Some(t) = extra.timeout {
            req.limits.timeout = t;
        }
        req.input_dir = Some(session.dir.clone());
        req.output_dir = Some(session.dir.clone());
        sub.op.exec = Some(req);
    }
    sub.workspace = Some(session.dir.clone());
    sub.content = extra.content;
    sub.labels = session.spec.labels.clone();
    sub.labels
        .insert("sandbox_session".into(), session.id.clone());
    sub.traceparent = Some(ctx.traceparent.clone());
    sub
}

/// The parts of a request that are not the operation's arguments.
#[derive(Debug, Default)]
pub struct SubmitExtras {
    pub idempotency_key: Option<sandboxio_core::IdempotencyKey>,
    pub rationale: Option<String>,
    pub env: std::collections::BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    pub content: Option<Vec<u8>>,
}
