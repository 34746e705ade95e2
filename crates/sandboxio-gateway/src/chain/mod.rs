//! The chain. Only [`Gateway::chain`] knows the order of the layers.
//!
//! admit -> resolve -> kill switch -> policy -> (rate limit, journal intent, budget,
//! idempotency: one admission transaction) -> approval -> (kill switch, approval use,
//! idempotency claim: one transaction) -> run (sandbox or tool, with retries) -> settle ->
//! record -> journal outcome. Every path out of [`Gateway::submit`] produces exactly one
//! record. Decisions are values; an `Err` from any layer becomes a deny plus a record (fail
//! closed). Each layer's work lives in its own module; this file only orders them.

mod admin;
mod approve;
mod close;
mod cost;
mod egress;
mod execute;
mod late;
mod launch;
mod mounts;
mod offload;
mod pins;
mod record;
mod resolve;
mod secrets;
mod settle_recorded;
mod stop;

pub use egress::{
    EgressCheck, LABEL_METHOD, LABEL_PARENT, LABEL_PATH, LABEL_SCHEME, LABEL_SECRETS,
};
pub use mounts::resolve_path_to_be;
pub use record::{owner_alive, process_owner};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use chrono::Utc;
use sandboxio_audit::{Auditor, OnSinkFailure, Secret};
use sandboxio_budget::{LatencyClass, LatencyReport, LatencyTracker};
use sandboxio_core::{
    request_view, ErrorCode, ExecResult, Fingerprint, Layer, Money, Operation, OperationArgs,
    OperationRecord, OperationStatus, Verdict,
};
use sandboxio_sandbox::{CancelToken, SandboxConfig};

use crate::approval::Approver;
use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::policy::PolicyEngine;
use crate::redaction::Redaction;
use crate::retry::RetryBudget;
use crate::store::{
    Admission, Admitted, Claimed, IdemClaim, IdemEnd, JournalEntry, LedgerLine, Store,
    RECOVERY_HOLD,
};
use crate::tool::Tool;
use close::{Closing, Finishing};
use record::{base_record, ms, new_id, redact_json, redact_result};

use stop::RunCtx;
pub(crate) use stop::Stop;

/// One request to the gateway.
pub struct Submission {
    /// The whole request: for exec and run_code, `op.exec` holds the sandbox request (env,
    /// stdin, files, directories, limits, network); unset limits take the configured
    /// defaults when the gateway resolves it.
    pub op: Operation,
    /// Values that must never reach any sink.
    pub secrets: Vec<Secret>,
    /// W3C `traceparent` of the caller's `invoke_agent` span.
    pub traceparent: Option<String>,
    /// Cancels the operation (the sandbox's whole process tree is killed).
    pub cancel: Option<CancelToken>,
    /// Labels propagated to the record and the cost ledger.
    pub labels: BTreeMap<String, String>,
    /// The directory file operations are confined to (a session's workspace).
    pub workspace: Option<std::path::PathBuf>,
    /// A directory of the workspace (relative to it) that file operations are confined to
    /// further (a capability token's directory): it is resolved beneath the workspace with
    /// no symlink on the way, and the operation's path beneath it, so a link inside it that
    /// leads elsewhere in the workspace is refused (`SBX_E1481`) like `..` is.
    pub confine: Option<String>,
    /// The bytes a `file_write` writes.
    pub content: Option<Vec<u8>>,
    /// For a `file_read` of a file: the gateway opens it (confined like every file
    /// operation) and leaves the open handle here instead of reading it, so a front end can
    /// stream a file of any size; the record's `bytes_out` is its size. A directory is
    /// answered as usual (its listing in `tool_output`).
    pub file_handle: Option<FileSlot>,
    /// Told about the pending approval as soon as an `ask` starts waiting (a front end
    /// shows the id and how to approve it). Dropped receivers are ignored.
    pub approval_pending: Option<tokio::sync::mpsc::UnboundedSender<crate::store::Approval>>,
    /// Live I/O of an exec or run_code: output events (redacted before they are sent),
    /// streamed stdin (used only when the request says `stdin_stream`), terminal size.
    pub stream: sandboxio_sandbox::StreamIo,
    /// For an exec or run_code: a program already running that carries out the request
    /// instead of a fresh sandbox (a code context's kernel). Everything before the run is
    /// the same chain, and the record is the same one record.
    pub executor: Option<std::sync::Arc<dyn crate::executor::Executor>>,
    /// For a `tool_call`: the tool that carries it out (an MCP upstream's tool, known only
    /// to the front end), instead of one registered with [`Gateway::with_tool`].
    pub tool: Option<Arc<dyn Tool>>,
    /// For an exec or run_code whose output is a protocol the front end parses and never
    /// passes on as it is (an MCP upstream's JSON-RPC on stdout): `stream.events` receive
    /// the output unredacted, so frames are neither cut nor held back. Whatever the front
    /// end passes on from it must be the result of an operation of its own, which the
    /// gateway redacts; this operation's own result and record are still redacted.
    pub protocol_output: bool,
    /// For a `net_connect` opened by a sandbox's egress proxy: what its side effect checks.
    /// Set by the gateway only.
    pub(crate) egress: Option<EgressCheck>,
    /// For an API key's creation: the key the action stores (with its intent, in one
    /// transaction). Set by [`Gateway::create_key`] only.
    pub(crate) new_key: Option<crate::credential::Credential>,
    /// For an operator action whose change is outside the store (an egress secret sealed
    /// or removed): the change, made by the action once its intent is committed (taken
    /// once; set by the gateway only).
    pub(crate) effect: std::sync::Mutex<Option<secrets::AdminEffect>>,
}

impl Submission {
    pub fn new(op: Operation) -> Self {
        Submission {
            op,
            secrets: Vec::new(),
            traceparent: None,
            cancel: None,
            labels: BTreeMap::new(),
            workspace: None,
            confine: None,
            content: None,
            file_handle: None,
            approval_pending: None,
            stream: sandboxio_sandbox::StreamIo::default(),
            executor: None,
            tool: None,
            protocol_output: false,
            egress: None,
            new_key: None,
            effect: std::sync::Mutex::new(None),
        }
    }
}

/// Where the gateway leaves an opened file for a front end to stream (see
/// [`Submission::file_handle`]).
pub type FileSlot = std::sync::Arc<std::sync::Mutex<Option<std::fs::File>>>;

/// What the gateway answers: always a record; a result when something ran (or replayed).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub record: OperationRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ExecResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_output: Option<serde_json::Value>,
}

impl Outcome {
    pub fn allowed(&self) -> bool {
        self.record.verdict == Verdict::Allow
    }
}

pub struct Gateway {
    /// Shared with the store calls that run on the blocking pool (`offload`).
    cfg: Arc<GatewayConfig>,
    store: Arc<dyn Store>,
    policy: RwLock<Arc<dyn PolicyEngine>>,
    /// Shared with the closing call on the blocking pool (`close.rs`).
    auditor: Arc<Auditor>,
    redaction: Redaction,
    sandbox: SandboxConfig,
    approver: Approver,
    tools: HashMap<String, Arc<dyn Tool>>,
    owner: String,
    running: Mutex<HashMap<String, CancelToken>>,
    retry_budget: Mutex<RetryBudget>,
    latency: Mutex<LatencyTracker>,
    /// `[[secrets]]` with their values, for sandboxes with network.
    edge_secrets: Arc<crate::edge::EdgeSecrets>,
    /// Leftovers of crashed runs, swept before this process's first sandbox.
    sweep: Arc<crate::sweep::StartSweep>,
    /// Tenants refused lately: their sandboxes start after the admission (`launch.rs`).
    refusals: launch::Refusals,
    /// A kill switch engaged by an operator that the store could not take: this process
    /// refuses every operation until a release succeeds (the brake holds here at least).
    kill_latch: Mutex<Option<crate::store::KillState>>,
    /// One recovery at a time in this process: its claims are this process's
    /// (`Store::claim_dead_intents`), which two overlapping recoveries would share.
    recovering: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running = self.running.lock().map(|r| r.len()).unwrap_or(0);
        write!(
            f,
            "<Gateway tier={} running={} approver={:?}>",
            self.cfg.default_tier, running, self.approver
        )
    }
}

impl Gateway {
    pub fn new(
        cfg: GatewayConfig,
        store: Arc<dyn Store>,
        policy: Arc<dyn PolicyEngine>,
        auditor: Auditor,
        redaction: Redaction,
        sandbox: SandboxConfig,
        approver: Approver,
    ) -> Self {
        let retry_budget = Mutex::new(RetryBudget::new(&cfg.retry));
        let cfg_latency = cfg.budget.latency;
        Gateway {
            cfg: Arc::new(cfg),
            store,
            policy: RwLock::new(policy),
            auditor: Arc::new(auditor),
            redaction,
            sandbox,
            approver,
            tools: HashMap::new(),
            owner: process_owner(),
            running: Mutex::new(HashMap::new()),
            retry_budget,
            latency: Mutex::new(LatencyTracker::new(cfg_latency)),
            edge_secrets: Arc::new(crate::edge::EdgeSecrets::default()),
            sweep: Arc::new(crate::sweep::StartSweep::default()),
            refusals: launch::Refusals::default(),
            kill_latch: Mutex::new(None),
            recovering: tokio::sync::Mutex::new(()),
        }
    }

    /// Sweeps what crashed runs left (see [`crate::sweep`]) before the first sandbox.
    pub fn with_start_sweep(mut self, sweep: crate::sweep::StartSweep) -> Self {
        self.sweep = Arc::new(sweep);
        self
    }

    /// The secrets the egress proxy injects at the edge (their values must also be in
    /// the redaction this gateway was built with).
    pub fn with_edge_secrets(mut self, secrets: crate::edge::EdgeSecrets) -> Self {
        self.edge_secrets = Arc::new(secrets);
        self
    }

    /// Registers a named tool for `tool_call` operations.
    pub fn with_tool(mut self, name: impl Into<String>, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(name.into(), tool);
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Whether this build can run sandboxes of `tier` (`Err`: why not), for front ends that
    /// take a tier ahead of any operation (a sandbox created over HTTP).
    pub fn tier_supported(tier: sandboxio_core::IsolationTier) -> Result<(), String> {
        sandboxio_sandbox::TierRequest::for_host(tier)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    pub fn auditor(&self) -> &Auditor {
        &self.auditor
    }

    /// The redaction every record goes through (for a front end's own error texts).
    pub fn redaction(&self) -> &Redaction {
        &self.redaction
    }

    /// p50/p95/p99 against the targets, per latency class, for what this gateway ran.
    pub fn latency_reports(&self) -> Vec<LatencyReport> {
        self.latency.lock().map(|t| t.reports()).unwrap_or_default()
    }

    /// Finishes work a crashed process left: intents without an outcome are recorded as
    /// `interrupted`, their reservations released and their keys settled. Call at start.
    pub async fn recover(&self) -> Result<usize, GatewayError> {
        let now = Utc::now();
        // Before any record of ours: does each trail still hold its signed head?
        self.check_anchor().await?;
        let pruned = self
            .on_store("pruning old state", move |s, cfg| {
                s.expire_approvals(now)?;
                s.prune(now, cfg.journal_retention)
            })
            .await?;
        if pruned != Default::default() {
            tracing::info!(?pruned, "pruned state older than its retention");
        }
        // Stale cgroups and workspaces: swept before this process's first sandbox
        // (`crate::sweep`), not here, so a process that starts none never pays for it.
        self.recover_interrupted().await
    }

    /// Marks work that dead processes (or, with a shared store, replicas whose lease
    /// expired) left as interrupted: recorded, each charged its reservation (it may have
    /// run: nothing runs free of its budget by dying), keys settled.
    /// Returns how many operations it marked. [`Gateway::recover`] calls it at start;
    /// a server calls it periodically (`Runtime::start_sweeper`).
    pub async fn recover_interrupted(&self) -> Result<usize, GatewayError> {
        // Claimed, recorded, then settled: a process that dies after recording leaves the
        // intents open, and the next recovery records them (again) and settles them.
        // Settled first, a death in between lost their records for good (the intents were
        // no longer open): seen with CLI runs killed at random points. The claim keeps
        // two recoveries at once (two replicas' sweepers) from both recording one.
        let _one = self.recovering.lock().await;
        let owner = self.owner.clone();
        let (kept, dead) = self
            .on_store("claiming interrupted operations", move |s, _| {
                Ok((
                    s.unrecorded(late::PER_PASS)?,
                    s.claim_dead_intents(&owner, RECOVERY_HOLD, &owner_alive)?,
                ))
            })
            .await?;
        // Records kept since their sinks failed go first, in the order they were made.
        if let Err(e) = self.write_late_records(kept).await {
            tracing::warn!(
                code = e.code(),
                "writing kept records late failed; the next recovery tries again: {e}"
            );
        }
        // A dead intent whose own record this process's trail already holds ran: settled
        // from that record, not recorded again (`settle_recorded.rs`).
        let (from_records, dead) = self.settle_recorded(dead).await?;
        if dead.is_empty() {
            return Ok(from_records);
        }
        // Each is charged its reservation when it is settled below: its record says so.
        let ids: Vec<String> = dead.iter().map(|e| e.operation_id.clone()).collect();
        let reserved = self
            .on_store(
                "reading interrupted operations' reservations",
                move |s, _| s.reserved_amounts(&ids),
            )
            .await?;
        for e in &dead {
            let op = serde_json::from_str::<Operation>(&e.intent).ok();
            let mut rec = match &op {
                Some(op) => base_record(&e.operation_id, op),
                None => OperationRecord::new(e.operation_id.clone(), "unknown"),
            };
            rec.status = OperationStatus::Interrupted;
            rec.verdict = Verdict::Allow;
            rec.layer = Layer::Journal;
            // Its key, from the journal whatever the intent says: a state rebuilt from the
            // trail takes the key as used (its operation may have run).
            if let Some((_, key)) = &e.idem {
                rec.idempotency_key = Some(key.clone());
            }
            rec.reason = "interrupted: its outcome was not recorded (the process running it stopped, or could write neither its record nor its store): it may or may not have run".into();
            if let Some(amount) = reserved.get(&e.operation_id).filter(|a| !a.is_zero()) {
                rec.cost_reserved = Some(*amount);
                rec.cost_settled = Some(*amount);
                rec.reason = format!(
                    "{}; charged its reservation of {amount}, the most it could cost",
                    rec.reason
                );
            }
            if let Some(op) = &op {
                // An operator action's intent was written with its change: it took effect,
                // at the intent's time (which orders it among the others' records).
                if admin::recovered(op, &mut rec) {
                    rec.ts = e.started_at;
                    if let Some(t) = self.admin_tenant(op).await {
                        rec.tenant_id = Some(t);
                    }
                }
            }
            // Recovery records are best effort in warn mode and required in fail mode
            // (then nothing is settled, and the next start tries again).
            self.auditor
                .record(rec)
                .await
                .map_err(|_| GatewayError::Unrecorded)?;
        }
        let now = Utc::now();
        let auditor = self.auditor.clone();
        let settled = self
            .on_store("recovering interrupted operations", move |s, cfg| {
                let settled = s.settle_interrupted(now, &dead, &cfg.budget, &|e| {
                    let mut rec = OperationRecord::new(e.operation_id.clone(), "interrupted");
                    rec.status = OperationStatus::Interrupted;
                    rec.layer = Layer::Journal;
                    rec.reason = "its outcome was not recorded (the process running it stopped, or could write neither its record nor its store): it may or may not have run".into();
                    serde_json::to_string(&Outcome { record: rec, result: None, tool_output: None }).unwrap_or_default()
                })?;
                // The trail's head after the records just written, as every operation's
                // close keeps it (a kill recorded here is then checked from its head on).
                if let Err(e) = s.put_heads(&auditor.heads_to_anchor(), now) {
                    tracing::warn!(code = e.code(), "storing the trail head after recovery failed: {e}");
                }
                Ok(settled)
            })
            .await?;
        Ok(from_records + settled.len())
    }

    /// Whether the policy would ask a person about `op` now, the operation resolved as
    /// [`Gateway::submit`] resolves it. A front end that would stream the program's input
    /// reads it whole instead when this says so: an approval must cover what runs, and
    /// streamed input under `ask` is refused (`SBX_E1559`). A request that cannot be
    /// resolved answers `false` (its submission says why).
    pub fn would_ask(&self, op: &Operation) -> bool {
        let mut op = op.clone();
        resolve::resolve(&self.cfg, &mut op, None).is_ok() && self.asks(&op, None)
    }

    /// Whether the policy asks a person about the resolved `op` now.
    fn asks(&self, op: &Operation, workspace: Option<&std::path::Path>) -> bool {
        match self.policy.read() {
            Ok(p) => p.decide_in(op, Utc::now(), workspace).verdict == Verdict::Ask,
            Err(_) => false,
        }
    }

    /// The kill switch this process holds on its own (the store could not take it).
    pub fn kill_latched(&self) -> Option<crate::store::KillState> {
        self.kill_latch.lock().ok().and_then(|k| k.clone())
    }

    fn set_kill_latch(&self, k: Option<crate::store::KillState>) {
        if let Ok(mut l) = self.kill_latch.lock() {
            *l = k;
        }
    }

    fn cancel_all(&self, reason: &str) {
        if let Ok(running) = self.running.lock() {
            for token in running.values() {
                token.cancel(reason.to_string());
            }
        }
    }

    /// Runs one operation through every layer. Returns `Err` only when the operation could
    /// not be recorded and the audit mode is `fail`.
    pub async fn submit(&self, sub: Submission) -> Result<Outcome, GatewayError> {
        let id = new_id();
        // Every log line of this operation carries its id (and the caller's trace id): a
        // WARN-level span, so it is enabled whenever warnings are.
        let span = tracing::span!(
            tracing::Level::WARN,
            "operation",
            operation_id = %id,
            kind = sub.op.kind().as_str(),
            trace_id = tracing::field::Empty,
        );
        if let Some(cx) = sub
            .traceparent
            .as_deref()
            .and_then(sandboxio_audit::parent_from_traceparent)
        {
            use opentelemetry::trace::TraceContextExt as _;
            span.record(
                "trace_id",
                tracing::field::display(cx.span().span_context().trace_id()),
            );
        }
        tracing::Instrument::instrument(self.submit_as(id, sub), span).await
    }

    async fn submit_as(&self, id: String, mut sub: Submission) -> Result<Outcome, GatewayError> {
        let started = Instant::now();
        // The request as it will run: defaults and ceilings applied, argv derived, content
        // digested. Policy, the fingerprint, approvals and the sandbox all see this value.
        let resolved = resolve::resolve(&self.cfg, &mut sub.op, sub.content.as_deref());
        // What the read-only directories hold is bound where something binds the request:
        // an idempotency key, an approval (`pins.rs`). Elsewhere nothing would read the
        // pins, and a large tree costs a walk.
        if resolved.is_ok()
            && (sub.op.idempotency_key.is_some() || self.asks(&sub.op, sub.workspace.as_deref()))
        {
            if let Some(req) = sub.op.exec.as_mut() {
                // A walk of up to `pins::MAX_ENTRIES` entries a directory: off the async
                // workers. A walk that could not run pins nothing it was asked to.
                let dirs = pins::dirs(req);
                let lost = dirs.clone();
                req.pinned = tokio::task::spawn_blocking(move || pins::of(&dirs))
                    .await
                    .unwrap_or_else(|_| pins::not_walked(&lost));
            }
        }
        let mut rec = base_record(&id, &sub.op);
        rec.labels = sub.labels.clone();
        // The caller's span (W3C traceparent `00-<trace>-<span>-<flags>`), for correlation.
        if let Some(tp) = sub.traceparent.as_deref() {
            let parts: Vec<&str> = tp.trim().split('-').collect();
            if parts.len() == 4 && parts[1].len() == 32 && parts[2].len() == 16 {
                rec.trace_id = Some(parts[1].to_string());
                rec.span_id = Some(parts[2].to_string());
            }
        }
        let fingerprint = Fingerprint::of_operation(&sub.op);
        rec.fingerprint = Some(fingerprint.0.clone());
        let redactor = match self.redaction.for_request(&sub.secrets) {
            Ok(r) => r,
            Err(e) => {
                // Cannot redact: nothing may be recorded or run (fail closed, nothing echoed).
                tracing::warn!(code = "SBX_E1515", "building the redactor failed: {e}");
                return Err(GatewayError::Unrecorded);
            }
        };
        let mut ctx = RunCtx {
            stream: Some(std::mem::take(&mut sub.stream)),
            redactor: Some(redactor.clone()),
            ..RunCtx::default()
        };
        let outcome = match resolved {
            Err(stop) => Err(stop),
            Ok(()) => {
                self.chain(&id, &sub, &fingerprint, &redactor, &mut rec, &mut ctx)
                    .await
            }
        };
        let (result, tool_output) = match outcome {
            Ok(v) => v,
            Err(stop) => {
                rec.verdict = stop.verdict;
                rec.layer = stop.layer;
                rec.reason = stop.reason;
                rec.error_code = stop.code.map(str::to_string);
                rec.status = stop.status;
                (None, None)
            }
        };
        rec.duration_ms = ms(started.elapsed());
        rec.ts = ctx.committed_at.unwrap_or_else(Utc::now);
        if ctx.ran {
            rec.cost_settled = ctx.charge;
            let class = LatencyClass::for_kind(sub.op.kind());
            if let Ok(mut t) = self.latency.lock() {
                rec.latency_budget_violated = t.record(class, started.elapsed()).is_some();
            }
        }
        let result = result.map(|r| redact_result(&redactor, r));
        let tool_output = tool_output.map(|v| redact_json(&redactor, v));
        // Redacted here, once: the auditor takes this pass as its own (and counts its
        // redactions) rather than running over the redacted record again.
        let redacted = sandboxio_audit::RedactedRecord::new(&redactor, rec);
        let out = Outcome {
            record: redacted.record().clone(),
            result,
            tool_output,
        };
        // The record goes to the audit sinks before the journal closes: a crash in between
        // leaves an open intent, which recovery records as interrupted (the trail then holds
        // both), so no operation that ran is ever missing from the trail. Record, trail head
        // and `finish` (settle or release, the key's outcome, the journal's outcome) are one
        // call off the async workers (`close.rs`): one hand-off, one transaction.
        let parent = sub
            .traceparent
            .as_deref()
            .and_then(sandboxio_audit::parent_from_traceparent)
            .unwrap_or_else(opentelemetry::Context::current);
        let finish = ctx.admitted.then(|| {
            let idem = ctx.idem.clone().map(|(tenant, key)| {
                let end = if ctx.ran {
                    IdemEnd::Done(serde_json::to_string(&out).unwrap_or_default())
                } else {
                    IdemEnd::Abandon
                };
                (tenant, key, end)
            });
            Finishing {
                operation_id: id.clone(),
                charge: if ctx.ran { ctx.charge } else { None },
                ledger: LedgerLine {
                    operation_id: id.clone(),
                    tenant: sub.op.principal.tenant.clone(),
                    category: sub.op.cost_category,
                    amount: ctx.charge.unwrap_or(Money::ZERO),
                    at: Utc::now(),
                    description: format!("{} {}", sub.op.kind(), sub.op.args.tool_name()),
                    labels: sub.labels.clone(),
                },
                idem,
                journal_status: out.record.status.as_str(),
            }
        });
        // Sinks that must run on this task (an embedding's, bound to its event loop) are
        // awaited here, before the closing call, as always; the others write in it.
        let blocking = self.auditor.records_blocking();
        let (early, closing_record) = if blocking {
            (None, Some((redacted, parent.clone())))
        } else {
            let r = self
                .auditor
                .record_redacted_with_parent(redacted, &parent)
                .await;
            (Some(r), None)
        };
        let closing = Closing {
            record: closing_record,
            finish,
            scopes: if ctx.admitted {
                self.metric_scopes(&sub.op)
            } else {
                Vec::new()
            },
            unrecorded: early.as_ref().and_then(close::unrecorded_of),
        };
        let auditor = self.auditor.clone();
        let closed = self
            .on_store("closing the operation", move |s, cfg| {
                Ok(close::close(&auditor, s, cfg, closing))
            })
            .await;
        let closed = match closed {
            Ok(c) => c,
            Err(e) => {
                // The closing call was lost (the runtime is shutting down): the record still
                // goes out; recovery marks the open intent interrupted.
                tracing::warn!(operation_id = %id, code = e.code(), "closing the operation off the async workers failed; recovery will mark it interrupted: {e}");
                let recorded = match early {
                    Some(r) => r,
                    // The closing call took the redacted record with it: the copy in
                    // the outcome goes (a pass over redacted text finds nothing more, so
                    // this rare path counts no redactions).
                    None => {
                        let again =
                            sandboxio_audit::RedactedRecord::new(&redactor, out.record.clone());
                        self.auditor
                            .record_redacted_with_parent(again, &parent)
                            .await
                    }
                };
                recorded.map_err(|_| GatewayError::Unrecorded)?;
                return Ok(out);
            }
        };
        if let Err(e) = closed.heads_stored {
            tracing::warn!(operation_id = %id, code = e.code(), "storing the trail head failed: {e}");
        }
        match closed.finished {
            Ok(Some(s)) => {
                for w in &s.warnings {
                    self.warn_budget(&sub.op, &w.to_string(), w.spent).await;
                }
                if !s.overrun.is_zero() {
                    let why = format!(
                        "operation {id} cost {}, {} more than its reservation of {}: charged, and its budget scopes are closed until an operator reopens them",
                        s.measured, s.overrun, s.reserved
                    );
                    self.warn_budget(&sub.op, &why, s.charged).await;
                }
                if let Some(Ok(summaries)) = closed.summaries {
                    self.budget_metrics(summaries);
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(operation_id = %id, code = e.code(), "finishing in the store failed (tried again for {:?}); recovery will mark it interrupted: {e}", close::FINISH_PATIENCE)
            }
        }
        let recorded = match (closed.recorded, early) {
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => Err(sandboxio_audit::AuditError::Render {
                why: "the record was not written".into(),
            }),
        };
        recorded.map_err(|_| GatewayError::Unrecorded)?;
        Ok(out)
    }

    async fn chain(
        &self,
        id: &str,
        sub: &Submission,
        fingerprint: &Fingerprint,
        redactor: &sandboxio_audit::Redactor,
        rec: &mut OperationRecord,
        ctx: &mut RunCtx,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let op = &sub.op;
        // admit
        op.validate()
            .map_err(|e| Stop::deny(Layer::Admit, e.to_string()).code(e.code()))?;
        // Operator actions: authorised by the front end that took them, run here so that
        // each leaves its record; they are not subject to the kill switch, policy or budget.
        if let OperationArgs::Admin { action } = &op.args {
            return self.admin_action(action, sub, rec, id, ctx).await;
        }
        if let Some(k) = self.kill_latched() {
            return Err(Stop::killed(&k));
        }
        // The kill switch comes before every other layer. For an operation the policy
        // allows or asks about, it is read inside the admission transaction (first, before
        // rate limits, atomically with the rest: one store call, not two); the policy is
        // pure and in memory, so deciding it first changes nothing observable. A denial
        // reads the kill switch on its own, so that an engaged switch is still the answer.
        // policy
        let engine = match self.policy.read() {
            Ok(p) => p.clone(),
            Err(_) => {
                return Err(Stop::deny(
                    Layer::Policy,
                    "the policy is unavailable; denying",
                ))
            }
        };
        let decision = engine.decide_in(op, Utc::now(), sub.workspace.as_deref());
        if decision.verdict == Verdict::Deny {
            return match self
                .on_store("reading the kill switch", |s, _| s.kill_state())
                .await
            {
                Ok(None) => {
                    rec.rules = decision.rules.clone();
                    rec.reason = decision.reason.clone();
                    Err(Stop::from_decision(decision))
                }
                Ok(Some(k)) => Err(Stop::killed(&k)),
                Err(e) => Err(Stop::error(Layer::KillSwitch, &e)),
            };
        }
        let needs_approval = decision.verdict == Verdict::Ask;
        if let Some((dir, why)) = op.exec.as_ref().and_then(|e| {
            e.pinned
                .iter()
                .find(|(_, p)| !p.starts_with(pins::TREE_PREFIX))
        }) {
            // Pins are taken only under a key or an approval: neither could say what the
            // program would read there.
            rec.rules = decision.rules.clone();
            let binds = if needs_approval {
                "needs an approval"
            } else {
                "carries an idempotency key"
            };
            let layer = if needs_approval {
                Layer::Approval
            } else {
                Layer::Idempotency
            };
            return Err(Stop::deny(
                layer,
                format!(
                    "this request {binds}, and what `{dir}` holds cannot be pinned \
                     ({}), so it could not be covered; bind a smaller directory that this \
                     user can list",
                    why.trim_start_matches("unpinned: ")
                ),
            )
            .code(crate::denial::PINNED_TOO_LARGE));
        }
        if needs_approval && op.exec.as_ref().is_some_and(|e| e.stdin_stream) {
            // The bytes arrive after the approval: nobody could see, nor the approval bind,
            // what the program would be fed. The caller sends them with the request instead.
            rec.rules = decision.rules.clone();
            return Err(Stop::deny(
                Layer::Approval,
                "this request needs an approval, and its standard input is streamed while it \
                 runs, so an approval could not cover it; send the input with the request \
                 (`--stdin-file`, or a pipe read whole: the CLI does this when it asks)",
            )
            .code(crate::denial::APPROVAL_STREAMED_STDIN));
        }
        // rate limit, journal intent, budget and the idempotency key (claimed here without an
        // approval; with one, only looked up, so that a replay or a conflict asks nobody):
        // one transaction, durable before any side effect; a refusal changes nothing.
        let idem = op.idempotency_key.as_ref().map(|k| IdemClaim {
            tenant: op.principal.tenant.clone(),
            key: k.as_str().to_string(),
            fingerprint: fingerprint.0.clone(),
            retention_s: self.cfg.idempotency_retention.as_secs(),
        });
        if idem.is_some() {
            rec.idempotency_retention_s = Some(self.cfg.idempotency_retention.as_secs());
        }
        let (estimate, estimate_why) = self.reservation(op);
        let journal = JournalEntry {
            operation_id: id.to_string(),
            // Digests, not values: env values, stdin and file contents never reach the
            // journal; the rest (argv, code) is redacted like the trail.
            intent: redactor
                .redact_str(&request_view(op).to_string())
                .into_owned(),
            started_at: Utc::now(),
            owner: self.owner.clone(),
            idempotent: op.idempotent,
            idem: idem.as_ref().map(|c| (c.tenant.clone(), c.key.clone())),
        };
        let journal_idem = journal.idem.clone();
        let rate = self.rate_limits_for(op);
        let reserve = cost::reserve_request(op, id.to_string(), Some(estimate));
        let idem_now = idem.clone();
        // A sandbox starts beside the admission, held at its release until the chain gets
        // to the run (`launch.rs`); one that waits for a person starts after the approval.
        // A set-up that fails here is set up again at the run, which reports it. A tenant
        // refused lately waits for its admission (a flood bound to be refused starts no
        // helpers).
        let tenant = op.principal.tenant.as_str();
        let mut launched = if !needs_approval
            && matches!(
                op.args,
                OperationArgs::Exec { .. }
                    | OperationArgs::RunCode { .. }
                    | OperationArgs::Browse { .. }
            )
            && !self.refusals.holds(tenant)
        {
            self.launch(sub, ctx, true).ok()
        } else {
            None
        };
        let admission = self.on_store("admitting the operation", move |s, cfg| {
            s.admit(&Admission {
                journal,
                rate,
                budget: &cfg.budget,
                reserve,
                idem: idem_now,
                idem_lookup_only: needs_approval,
                now: Utc::now(),
            })
        });
        let admitted = match launched.as_mut() {
            Some(l) => l.alongside(admission).await,
            None => admission.await,
        };
        match &admitted {
            Ok(Admitted::RateLimited { retry_after_ms, .. }) => self
                .refusals
                .note(tenant, std::time::Duration::from_millis(*retry_after_ms)),
            Ok(Admitted::Budget(_) | Admitted::KillSwitch(_)) => {
                self.refusals.note(tenant, launch::HOLD_AFTER_REFUSAL)
            }
            _ => {}
        }
        if !matches!(admitted, Ok(Admitted::Proceed(_))) {
            if let Some(l) = launched.take() {
                l.withdraw().await;
            }
        }
        if !matches!(admitted, Ok(Admitted::KillSwitch(_))) {
            rec.rules = decision.rules.clone();
            rec.reason = decision.reason.clone();
        }
        match admitted {
            Ok(Admitted::Proceed(r)) => {
                ctx.admitted = true;
                rec.cost_reserved = Some(r.amount);
                if !needs_approval {
                    ctx.idem = journal_idem.clone();
                }
            }
            Ok(Admitted::KillSwitch(k)) => return Err(Stop::killed(&k)),
            Ok(Admitted::RateLimited {
                limit,
                retry_after_ms,
                ..
            }) => {
                let mut s = Stop::deny(
                    Layer::RateLimit,
                    format!(
                        "rate limit of {limit} for `{}` reached; retry in {retry_after_ms} ms",
                        op.args.tool_name()
                    ),
                );
                s.retry_after_ms = Some(retry_after_ms);
                return Err(s.code(crate::denial::RATE_LIMIT));
            }
            Ok(Admitted::Budget(d)) => {
                return Err(Stop::deny(
                    Layer::Budget,
                    format!(
                        "{}; the reservation was {estimate} because {estimate_why}",
                        d.reason
                    ),
                )
                .code(crate::denial::BUDGET))
            }
            Ok(Admitted::Idem(x)) => return self.idem_answer(x, op, rec),
            Err(e) => return Err(Stop::error(Layer::Journal, &e)),
        }
        // approval, then (bound to this request, once) the claim of the key
        if needs_approval {
            let approval_id = self
                .approve(id, sub, fingerprint, &decision, rec, redactor)
                .await?;
            // What the approver saw pinned is what runs: the input directory is copied
            // for the program, and the read-only directories are walked again after the
            // copy (`pins.rs`).
            let req = op.exec.clone();
            let work_root = self.sandbox.resolve_work_root();
            let snap = tokio::task::spawn_blocking(move || match &req {
                Some(r) => pins::snapshot(r, &work_root),
                None => Ok(None),
            })
            .await
            .unwrap_or_else(|_| {
                Err(pins::SnapshotError::Changed(
                    "(the check could not run)".into(),
                ))
            });
            let refusal = match snap {
                Ok(s) => {
                    ctx.input_snapshot = s;
                    None
                }
                Err(pins::SnapshotError::Changed(dir)) => Some(
                    Stop::deny(
                        Layer::Approval,
                        format!(
                            "`{dir}` changed after approval `{approval_id}` was asked for: \
                             what was approved is not what would run; ask again"
                        ),
                    )
                    .code(crate::denial::PINNED_CHANGED),
                ),
                Err(pins::SnapshotError::Copy(e)) => Some(
                    Stop::deny(
                        Layer::Approval,
                        format!(
                            "the input directory could not be copied for the approved run \
                             (it reads a copy taken after the approval, at most {} MiB): {e}",
                            pins::SNAPSHOT_MAX_BYTES >> 20
                        ),
                    )
                    .code(crate::denial::SNAPSHOT_FAILED),
                ),
            };
            if let Some(stop) = refusal {
                // The approval holds for nothing that could run: withdrawn.
                let aid = approval_id.clone();
                let _ = self
                    .on_store("withdrawing an approval", move |s, _| {
                        s.expire_approval(&aid)
                    })
                    .await;
                return Err(stop);
            }
            let (aid, fp, key, op_id) = (
                approval_id.clone(),
                fingerprint.0.clone(),
                idem.clone(),
                id.to_string(),
            );
            let claimed = self
                .on_store("using the approval", move |s, _| {
                    s.claim(Some((&aid, &fp)), key.as_ref(), &op_id, Utc::now())
                })
                .await;
            if let Some(k) = self.kill_latched() {
                // Engaged while this one waited, in this process only: it does not run.
                if matches!(claimed, Ok(None)) {
                    return Err(Stop::killed(&k));
                }
            }
            match claimed {
                Ok(None) => ctx.idem = journal_idem,
                Ok(Some(Claimed::KillSwitch(k))) => return Err(Stop::killed(&k)),
                Ok(Some(Claimed::ApprovalInvalid)) => {
                    return Err(Stop::deny(
                        Layer::Approval,
                        format!("approval `{approval_id}` is not valid for this request (used, expired or for another request)"),
                    ).code(crate::denial::APPROVAL_INVALID))
                }
                Ok(Some(Claimed::Idem(x))) => return self.idem_answer(x, op, rec),
                Err(e) => return Err(Stop::error(Layer::Approval, &e)),
            }
        }
        // In fail mode an operation that cannot be recorded must not run: record the intent.
        if self.auditor.config().on_sink_failure == OnSinkFailure::Fail {
            let mut intent_rec = rec.clone();
            intent_rec.event = format!("{}.intent", rec.event);
            intent_rec.verdict = Verdict::Allow;
            intent_rec.layer = Layer::Journal;
            intent_rec.status = OperationStatus::Warning;
            intent_rec.reason = "about to run".into();
            if self.auditor.record(intent_rec).await.is_err() {
                if let Some(l) = launched.take() {
                    l.withdraw().await;
                }
                return Err(Stop::deny(
                    Layer::Record,
                    "the audit trail could not record the intent, so the operation was not run",
                )
                .code("SBX_E1601"));
            }
        }
        // run
        rec.verdict = Verdict::Allow;
        rec.layer = Layer::Sandbox;
        let ran = self.run(id, sub, rec, ctx, launched).await;
        if ran.is_err() && ctx.unmeasured {
            // Nothing runs free of its budget by its supervisor dying.
            ctx.charge = Some(rec.cost_reserved.unwrap_or(estimate));
        }
        let (result, tool_output) = ran?;
        // Settle charges the measured cost, all of it. The reservation was the most the
        // operation could cost, so this passes it only when a measurement exceeds the bound;
        // then the overrun is charged, recorded and closes the scope (see `finish`).
        ctx.charge =
            Some(self.measured_cost(result.as_ref(), rec.cost_reserved.unwrap_or(estimate)));
        Ok((result, tool_output))
    }
}
