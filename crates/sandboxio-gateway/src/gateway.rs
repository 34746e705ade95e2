//! The chain. Only this file knows the order of the layers.
//!
//! admit -> kill switch -> policy -> rate limit -> budget -> approval -> idempotency ->
//! journal intent -> run (sandbox or tool, with retries) -> settle -> record -> journal
//! outcome. Every path out of [`Gateway::submit`] produces exactly one record. Decisions
//! are values; an `Err` from any layer becomes a deny plus a record (fail closed).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use sandboxio_audit::{Auditor, OnSinkFailure, Secret};
use sandboxio_budget::{
    LatencyClass, LatencyReport, LatencyTracker, MeasuredUsage, ReserveRequest,
};
use sandboxio_core::fingerprint::sha256_hex;
use sandboxio_core::{
    Decision, ErrorCode, ExecRequest, ExecResult, ExitStatus, Fingerprint, IsolationTier, Layer,
    Money, Operation, OperationArgs, OperationKind, OperationRecord, OperationStatus, Verdict,
};
use sandboxio_sandbox::{CancelToken, SandboxConfig};

use crate::approval::{ApprovalAnswer, Approver};
use crate::config::GatewayConfig;
use crate::denial;
use crate::error::GatewayError;
use crate::policy::PolicyEngine;
use crate::redaction::Redaction;
use crate::retry::RetryBudget;
use crate::store::{
    approval_id_for, Admission, Admitted, Approval, ApprovalState, Claimed, Finish, IdemBegin,
    IdemClaim, IdemEnd, JournalEntry, KillState, LedgerLine, Store,
};
use crate::tool::Tool;

/// One request to the gateway.
pub struct Submission {
    pub op: Operation,
    /// Sandbox settings for exec and run_code (limits, env, files, dirs). The argv or code
    /// comes from the operation. Defaults apply when absent.
    pub exec: Option<ExecRequest>,
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
    /// The bytes a `file_write` writes.
    pub content: Option<Vec<u8>>,
    /// Told about the pending approval as soon as an `ask` starts waiting (a front end
    /// shows the id and how to approve it). Dropped receivers are ignored.
    pub approval_pending: Option<tokio::sync::mpsc::UnboundedSender<Approval>>,
}

impl Submission {
    pub fn new(op: Operation) -> Self {
        Submission {
            op,
            exec: None,
            secrets: Vec::new(),
            traceparent: None,
            cancel: None,
            labels: BTreeMap::new(),
            workspace: None,
            content: None,
            approval_pending: None,
        }
    }
}

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
    cfg: GatewayConfig,
    store: Arc<dyn Store>,
    policy: Arc<dyn PolicyEngine>,
    auditor: Auditor,
    redaction: Redaction,
    sandbox: SandboxConfig,
    approver: Approver,
    tools: HashMap<String, Arc<dyn Tool>>,
    owner: String,
    running: Mutex<HashMap<String, CancelToken>>,
    retry_budget: Mutex<RetryBudget>,
    latency: Mutex<LatencyTracker>,
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

/// `pid:start_time` of this process, so a reused pid is not mistaken for us.
pub fn process_owner() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or_default())
}

fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_string)
}

/// Whether the process that wrote `owner` is still running.
pub fn owner_alive(owner: &str) -> bool {
    let Some((pid, st)) = owner.split_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_some_and(|now| now == st)
}

fn new_id() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    hex::encode(b)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
            cfg,
            store,
            policy,
            auditor,
            redaction,
            sandbox,
            approver,
            tools: HashMap::new(),
            owner: process_owner(),
            running: Mutex::new(HashMap::new()),
            retry_budget,
            latency: Mutex::new(LatencyTracker::new(cfg_latency)),
        }
    }

    /// Registers a named tool for `tool_call` operations.
    pub fn with_tool(mut self, name: impl Into<String>, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(name.into(), tool);
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    pub fn auditor(&self) -> &Auditor {
        &self.auditor
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
        self.store.expire_approvals(now)?;
        let pruned = self.store.prune(now, self.cfg.journal_retention)?;
        if pruned != Default::default() {
            tracing::info!(?pruned, "pruned state older than its retention");
        }
        // Cgroups a SIGKILLed process could not remove (empty and older than STALE_AGE).
        let stale = sandboxio_sandbox::cgroup::cleanup_stale();
        if !stale.is_empty() {
            tracing::info!(count = stale.len(), "removed stale sandbox cgroups");
        }
        let entries = self.store.recover(now, &self.cfg.budget, &owner_alive, &|e| {
            let mut rec = OperationRecord::new(e.operation_id.clone(), "interrupted");
            rec.status = OperationStatus::Interrupted;
            rec.layer = Layer::Journal;
            rec.reason = "the process running this operation stopped before recording its outcome; it may or may not have run".into();
            serde_json::to_string(&Outcome { record: rec, result: None, tool_output: None }).unwrap_or_default()
        })?;
        for e in &entries {
            let mut rec = match serde_json::from_str::<Operation>(&e.intent) {
                Ok(op) => self.base_record(&e.operation_id, &op),
                Err(_) => OperationRecord::new(e.operation_id.clone(), "unknown"),
            };
            rec.status = OperationStatus::Interrupted;
            rec.verdict = Verdict::Allow;
            rec.layer = Layer::Journal;
            rec.reason = "interrupted: the process running this operation stopped before recording its outcome".into();
            // Recovery records are best effort in warn mode and required in fail mode.
            self.auditor
                .record(rec)
                .await
                .map_err(|_| GatewayError::Unrecorded)?;
        }
        Ok(entries.len())
    }

    /// Engages the kill switch (persisted) and cancels everything this process runs.
    pub fn kill(&self, reason: &str, by: &str) -> Result<(), GatewayError> {
        self.store.set_kill(reason, by, Utc::now())?;
        self.cancel_all(&format!("kill switch: {reason}"));
        Ok(())
    }

    fn cancel_all(&self, reason: &str) {
        if let Ok(running) = self.running.lock() {
            for token in running.values() {
                token.cancel(reason.to_string());
            }
        }
    }

    fn base_record(&self, id: &str, op: &Operation) -> OperationRecord {
        let mut rec = OperationRecord::new(id.to_string(), op.kind().as_str());
        rec.tool_name = op.args.tool_name().to_string();
        rec.tenant_id = Some(op.principal.tenant.clone());
        rec.session_id = op.principal.session.clone();
        rec.agent_id = op.principal.agent.clone();
        rec.isolation = op.tier;
        rec.backend = "local".into();
        rec.idempotency_key = op.idempotency_key.as_ref().map(|k| k.as_str().to_string());
        match &op.args {
            OperationArgs::Exec { argv } => {
                rec.argv = Some(argv.clone());
                rec.code_sha256 = Some(sha256_hex(argv.join("\0").as_bytes()));
            }
            OperationArgs::RunCode { code, .. } => {
                rec.code_sha256 = Some(sha256_hex(code.as_bytes()));
                rec.code = Some(code.clone());
            }
            other => rec.path = other.path().map(str::to_string),
        }
        rec
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
        if sub.op.tier.is_none()
            && matches!(sub.op.kind(), OperationKind::Exec | OperationKind::RunCode)
        {
            sub.op.tier = Some(self.cfg.default_tier);
        }
        let mut rec = self.base_record(&id, &sub.op);
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
        let mut ctx = RunCtx::default();
        let outcome = self
            .chain(&id, &sub, &fingerprint, &redactor, &mut rec, &mut ctx)
            .await;
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
        rec.ts = Utc::now();
        if ctx.ran {
            rec.cost_settled = ctx.charge;
            let class = LatencyClass::for_kind(sub.op.kind());
            if let Ok(mut t) = self.latency.lock() {
                rec.latency_budget_violated = t.record(class, started.elapsed()).is_some();
            }
        }
        let result = result.map(|r| redact_result(&redactor, r));
        let tool_output = tool_output.map(|v| redact_json(&redactor, v));
        let (rec, _) = redactor.redact_record_counted(rec);
        let out = Outcome {
            record: rec,
            result,
            tool_output,
        };
        // The record goes to the audit sinks before the journal closes: a crash in between
        // leaves an open intent, which recovery records as interrupted (the trail then holds
        // both), so no operation that ran is ever missing from the trail.
        let parent = sub
            .traceparent
            .as_deref()
            .and_then(sandboxio_audit::parent_from_traceparent)
            .unwrap_or_else(opentelemetry::Context::current);
        let recorded = self
            .auditor
            .record_with_parent(out.record.clone(), &parent)
            .await;
        // The trail's signed head after this record, kept in the store (the trail anchored
        // outside itself): in the closing transaction, or on its own when nothing was admitted.
        let heads = self.auditor.heads();
        // Settle or release, store the key's outcome, close the journal: one transaction, so a
        // crash either replays this outcome or finds the operation interrupted, never both.
        if !ctx.admitted {
            if let Err(e) = self.store.put_heads(&heads, Utc::now()) {
                tracing::warn!(operation_id = %id, code = e.code(), "storing the trail head failed: {e}");
            }
        }
        if ctx.admitted {
            let idem = ctx.idem.clone().map(|(tenant, key)| {
                let end = if ctx.ran {
                    IdemEnd::Done(serde_json::to_string(&out).unwrap_or_default())
                } else {
                    IdemEnd::Abandon
                };
                (tenant, key, end)
            });
            let ledger = LedgerLine {
                operation_id: id.clone(),
                tenant: sub.op.principal.tenant.clone(),
                category: sub.op.cost_category,
                amount: ctx.charge.unwrap_or(Money::ZERO),
                at: Utc::now(),
                description: format!("{} {}", sub.op.kind(), sub.op.args.tool_name()),
                labels: sub.labels.clone(),
            };
            let fin = Finish {
                operation_id: &id,
                budget: &self.cfg.budget,
                charge: if ctx.ran { ctx.charge } else { None },
                ledger: Some(ledger),
                idem,
                journal_status: out.record.status.as_str(),
                heads: &heads,
                now: Utc::now(),
            };
            match self.store.finish(&fin) {
                Ok(Some(s)) => {
                    for w in &s.warnings {
                        self.warn_budget(&sub.op, &w.to_string(), w.spent).await;
                    }
                    self.budget_metrics(&sub.op);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(operation_id = %id, code = e.code(), "finishing in the store failed; recovery will mark it interrupted: {e}")
                }
            }
        }
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
        // kill switch: consulted before every other check (and again, atomically, at admission)
        match self.store.kill_state() {
            Ok(None) => {}
            Ok(Some(k)) => return Err(Stop::killed(&k)),
            Err(e) => return Err(Stop::error(Layer::KillSwitch, &e)),
        }
        // policy
        let decision = self
            .policy
            .decide_in(op, Utc::now(), sub.workspace.as_deref());
        rec.rules = decision.rules.clone();
        rec.reason = decision.reason.clone();
        if decision.verdict == Verdict::Deny {
            return Err(Stop::from_decision(decision));
        }
        let needs_approval = decision.verdict == Verdict::Ask;
        // rate limit, journal intent, budget and (without an approval) the idempotency claim:
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
        let estimate = self.estimate(op, sub.exec.as_ref());
        let admission = Admission {
            journal: JournalEntry {
                operation_id: id.to_string(),
                // Redacted like the trail: no argv, code or secret value reaches the store.
                intent: redactor
                    .redact_str(&serde_json::to_string(op).unwrap_or_default())
                    .into_owned(),
                started_at: Utc::now(),
                owner: self.owner.clone(),
                idempotent: op.idempotent,
                idem: idem.as_ref().map(|c| (c.tenant.clone(), c.key.clone())),
            },
            rate: self.rate_limits_for(op),
            budget: &self.cfg.budget,
            reserve: ReserveRequest {
                id: id.to_string(),
                tenant: op.principal.tenant.clone(),
                session: op.principal.session.clone(),
                category: op.cost_category,
                estimate: Some(estimate),
            },
            idem: if needs_approval { None } else { idem.clone() },
            now: Utc::now(),
        };
        match self.store.admit(&admission) {
            Ok(Admitted::Proceed(r)) => {
                ctx.admitted = true;
                rec.cost_reserved = Some(r.amount);
                if !needs_approval {
                    ctx.idem = admission.journal.idem.clone();
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
                return Err(s.code(denial::RATE_LIMIT));
            }
            Ok(Admitted::Budget(d)) => {
                return Err(Stop::deny(Layer::Budget, d.reason).code(denial::BUDGET))
            }
            Ok(Admitted::Idem(x)) => return self.idem_answer(x, op, rec),
            Err(e) => return Err(Stop::error(Layer::Journal, &e)),
        }
        // approval, then (bound to this request, once) the claim of the key
        if needs_approval {
            let approval_id = self
                .approve(id, sub, fingerprint, &decision, rec, redactor)
                .await?;
            match self.store.claim(Some((&approval_id, &fingerprint.0)), idem.as_ref(), id, Utc::now()) {
                Ok(None) => ctx.idem = admission.journal.idem.clone(),
                Ok(Some(Claimed::ApprovalInvalid)) => {
                    return Err(Stop::deny(
                        Layer::Approval,
                        format!("approval `{approval_id}` is not valid for this request (used, expired or for another request)"),
                    ).code(denial::APPROVAL_INVALID))
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
        let ran = self.run(id, sub, rec, ctx).await;
        let (result, tool_output) = ran?;
        // Settle charges the measured cost, at most what was reserved: the ceiling check was
        // made on the reservation, so spend never passes a ceiling.
        let measured = self.measured_cost(op, result.as_ref(), estimate);
        ctx.charge = Some(measured.min(rec.cost_reserved.unwrap_or(estimate)));
        Ok((result, tool_output))
    }

    /// The rate limits that apply: those for the operation kind and, for a tool call, those
    /// naming the tool.
    fn rate_limits_for(&self, op: &Operation) -> Vec<(String, sandboxio_budget::RateLimit)> {
        let (tenant, agent) = (&op.principal.tenant, op.principal.agent.as_deref());
        let mut v = self
            .cfg
            .rate_limits
            .matching(tenant, agent, op.kind().as_str());
        if let OperationArgs::ToolCall { tool, .. } = &op.args {
            v.extend(self.cfg.rate_limits.matching(tenant, agent, tool));
        }
        v
    }

    /// The answer for a key that is already known.
    fn idem_answer(
        &self,
        x: IdemBegin,
        op: &Operation,
        rec: &mut OperationRecord,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let key = op
            .idempotency_key
            .as_ref()
            .map(|k| k.as_str().to_string())
            .unwrap_or_default();
        match x {
            IdemBegin::Replay {
                outcome,
                operation_id,
            } => {
                let prev: Outcome = serde_json::from_str(&outcome).map_err(|_| {
                    Stop::deny(
                        Layer::Idempotency,
                        "the recorded outcome for this key is unreadable",
                    )
                    .code("SBX_E1504")
                })?;
                rec.replayed = true;
                rec.status = OperationStatus::Replayed;
                rec.verdict = Verdict::Allow;
                rec.layer = Layer::Idempotency;
                rec.reason = format!(
                    "replayed the outcome of operation {operation_id} ({})",
                    prev.record.status.as_str()
                );
                rec.exit_code = prev.record.exit_code;
                rec.signal = prev.record.signal;
                rec.replayed_status = Some(prev.record.status);
                rec.error_code = prev.record.error_code.clone();
                rec.sandbox_id = prev.record.sandbox_id.clone();
                if prev.record.status == OperationStatus::Interrupted {
                    rec.status = OperationStatus::Interrupted;
                    rec.reason = format!("operation {operation_id} with this key was interrupted and may have run; it is not run again");
                    rec.error_code = Some("SBX_E1512".into());
                }
                Ok((prev.result, prev.tool_output))
            }
            IdemBegin::Conflict => {
                let e = GatewayError::IdempotencyConflict { key };
                Err(Stop::deny(Layer::Idempotency, e.to_string()).code(e.code()))
            }
            IdemBegin::InProgress | IdemBegin::New => {
                let e = GatewayError::IdempotencyInProgress { key };
                Err(Stop::deny(Layer::Idempotency, e.to_string()).code(e.code()))
            }
        }
    }

    /// The reservation: the caller's estimate, or the most the limits allow to be spent.
    fn estimate(&self, op: &Operation, exec: Option<&ExecRequest>) -> Money {
        if let Some(c) = op.estimated_cost {
            return c;
        }
        let rc = &self.cfg.budget.rate_card;
        let bound = match &op.args {
            OperationArgs::Exec { .. } | OperationArgs::RunCode { .. } => {
                let limits = exec.map(|e| e.limits.clone()).unwrap_or_default();
                let wall = ms(limits.timeout).max(1);
                let cpu = wall.saturating_mul(u64::from(limits.cpu_quota_millis.max(1))) / 1000;
                rc.cost(&MeasuredUsage {
                    cpu_time_ms: cpu,
                    peak_memory_bytes: limits.memory.bytes(),
                    wall_time_ms: wall,
                })
                .unwrap_or(self.cfg.budget.default_estimate)
            }
            _ => rc.per_call,
        };
        bound.max(self.cfg.budget.default_estimate)
    }

    fn measured_cost(&self, op: &Operation, result: Option<&ExecResult>, estimate: Money) -> Money {
        let rc = &self.cfg.budget.rate_card;
        let Some(r) = result else {
            // A tool cannot be measured: its estimate (or the per-call price) is the cost.
            return if op.estimated_cost.is_some() {
                estimate
            } else {
                rc.per_call
            };
        };
        let usage = MeasuredUsage {
            cpu_time_ms: r.usage.cpu_time_ms.unwrap_or(r.duration_ms),
            peak_memory_bytes: r.usage.peak_memory_bytes.unwrap_or(0),
            wall_time_ms: r.duration_ms,
        };
        rc.cost(&usage).unwrap_or(estimate)
    }

    /// Spent and remaining budget of the operation's scopes, as metrics (when any scope has
    /// a ceiling; a read, no fsync).
    fn budget_metrics(&self, op: &Operation) {
        let b = &self.cfg.budget;
        if b.global.is_none()
            && b.per_tenant.is_none()
            && b.tenants.is_empty()
            && b.per_session.is_none()
        {
            return;
        }
        let req = ReserveRequest {
            id: String::new(),
            tenant: op.principal.tenant.clone(),
            session: op.principal.session.clone(),
            category: op.cost_category,
            estimate: None,
        };
        if let Ok(summaries) = self.store.budget_summary(b, &req.scopes()) {
            let metrics = sandboxio_audit::Metrics::new();
            for s in summaries {
                metrics.budget(&s.scope.to_string(), &s.total, s.remaining.as_ref());
            }
        }
    }

    async fn warn_budget(&self, op: &Operation, what: &str, spent: Money) {
        let mut w = OperationRecord::new(new_id(), "budget_warning");
        w.tenant_id = Some(op.principal.tenant.clone());
        w.status = OperationStatus::Warning;
        w.verdict = Verdict::Allow;
        w.layer = Layer::Budget;
        w.reason = what.to_string();
        w.cost_settled = Some(spent);
        if let Err(e) = self.auditor.record(w).await {
            tracing::warn!(code = e.code(), "recording a budget warning failed: {e}");
        }
    }

    async fn approve(
        &self,
        id: &str,
        sub: &Submission,
        fp: &Fingerprint,
        decision: &Decision,
        rec: &mut OperationRecord,
        redactor: &sandboxio_audit::Redactor,
    ) -> Result<String, Stop> {
        let op = &sub.op;
        let notify = sub.approval_pending.as_ref();
        let now = Utc::now();
        let approval_id = approval_id_for(id);
        // The request's own redactor: its secrets never reach the approvals table.
        let redacted_op = redactor
            .redact_str(&serde_json::to_string(op).unwrap_or_default())
            .into_owned();
        let a = Approval {
            id: approval_id.clone(),
            tenant: op.principal.tenant.clone(),
            fingerprint: fp.0.clone(),
            operation: redacted_op,
            rationale: op.rationale.clone().unwrap_or_default(),
            reason: decision.reason.clone(),
            state: ApprovalState::Pending,
            created_at: now,
            expires_at: now
                + chrono::Duration::from_std(self.cfg.approval_timeout)
                    .unwrap_or_else(|_| chrono::Duration::seconds(300)),
            decided_by: None,
            decided_at: None,
            decision_reason: None,
        };
        self.store
            .create_approval(&a)
            .map_err(|e| Stop::error(Layer::Approval, &e))?;
        rec.approval_id = Some(approval_id.clone());
        if let Some(tx) = notify {
            let _ = tx.send(a.clone());
        }
        let metrics = sandboxio_audit::Metrics::new();
        metrics.approvals_pending(1);
        let waited = Instant::now();
        tracing::info!(operation_id = %id, approval_id = %approval_id, "approval required");
        let answer = match &self.approver {
            Approver::Nobody => None,
            Approver::Callback(cb) => {
                match tokio::time::timeout(self.cfg.approval_timeout, cb.decide(&a)).await {
                    Ok(Some(ans)) => {
                        let _ = self.store.decide_approval(
                            &approval_id,
                            ans.approve,
                            &ans.approver,
                            ans.reason.as_deref(),
                            Utc::now(),
                        );
                        Some(ans)
                    }
                    _ => None,
                }
            }
            Approver::Store { poll } => self.poll_approval(&approval_id, *poll).await,
        };
        rec.approval_wait_ms = Some(ms(waited.elapsed()));
        metrics.approvals_pending(-1);
        let Some(ans) = answer else {
            let _ = self.store.expire_approval(&approval_id);
            return Err(Stop::deny(
                Layer::Approval,
                format!(
                    "approval `{approval_id}` was not given before the timeout ({}s)",
                    self.cfg.approval_timeout.as_secs()
                ),
            )
            .code(denial::APPROVAL_TIMEOUT));
        };
        rec.approver = Some(ans.approver.clone());
        if !ans.approve {
            let why = ans.reason.map(|r| format!(": {r}")).unwrap_or_default();
            return Err(Stop::deny(
                Layer::Approval,
                format!(
                    "approval `{approval_id}` was denied by {}{why}",
                    ans.approver
                ),
            )
            .code(denial::APPROVAL_DENIED));
        }
        Ok(approval_id)
    }

    async fn poll_approval(&self, approval_id: &str, poll: Duration) -> Option<ApprovalAnswer> {
        let deadline = Instant::now() + self.cfg.approval_timeout;
        while Instant::now() < deadline {
            match self.store.get_approval(approval_id) {
                Ok(Some(a))
                    if a.state == ApprovalState::Approved || a.state == ApprovalState::Denied =>
                {
                    return Some(ApprovalAnswer {
                        approve: a.state == ApprovalState::Approved,
                        approver: a.decided_by.unwrap_or_default(),
                        reason: a.decision_reason,
                    });
                }
                Ok(Some(a)) if a.state != ApprovalState::Pending => return None,
                Ok(_) => {}
                Err(_) => return None,
            }
            tokio::time::sleep(poll).await;
        }
        None
    }

    async fn run(
        &self,
        id: &str,
        sub: &Submission,
        rec: &mut OperationRecord,
        ctx: &mut RunCtx,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let op = &sub.op;
        ctx.ran = true;
        match &op.args {
            OperationArgs::Exec { .. } | OperationArgs::RunCode { .. } => {
                let req = build_exec(op, sub.exec.clone());
                rec.bytes_in = req.stdin.as_ref().map(|s| s.len() as u64).unwrap_or(0)
                    + req.files.values().map(|f| f.len() as u64).sum::<u64>();
                let tier = op.tier.unwrap_or(self.cfg.default_tier);
                let token = sub.cancel.clone().unwrap_or_default();
                if let Ok(mut r) = self.running.lock() {
                    r.insert(id.to_string(), token.clone());
                }
                let watcher = self.watch_kill_switch(token.clone());
                let res = sandboxio_sandbox::run(&req, tier, &self.sandbox, Some(token)).await;
                watcher.abort();
                if let Ok(mut r) = self.running.lock() {
                    r.remove(id);
                }
                match res {
                    Ok(r) => {
                        fill_from_result(rec, &r, tier);
                        outcome_reason(rec, &r, &req.limits);
                        Ok((Some(r), None))
                    }
                    Err(e) => {
                        let mut s = Stop::deny(
                            Layer::Sandbox,
                            format!("the sandbox could not run this: {e}"),
                        )
                        .code(e.code());
                        s.status = OperationStatus::Error;
                        s.verdict = Verdict::Deny;
                        Err(s)
                    }
                }
            }
            OperationArgs::ToolCall { tool, arguments } => {
                let Some(t) = self.tools.get(tool) else {
                    return Err(Stop::deny(
                        Layer::Sandbox,
                        format!("no tool named `{tool}` is registered"),
                    )
                    .code("SBX_E1513"));
                };
                let retryable = op.idempotent || op.idempotency_key.is_some();
                let mut attempt = 1u32;
                if let Ok(mut b) = self.retry_budget.lock() {
                    b.on_request();
                }
                loop {
                    match t.call(arguments).await {
                        Ok(v) => {
                            rec.attempts = attempt;
                            rec.status = OperationStatus::Ok;
                            return Ok((None, Some(v)));
                        }
                        Err(e) => {
                            let can_retry = e.transient
                                && retryable
                                && attempt < self.cfg.retry.max_attempts
                                && self
                                    .retry_budget
                                    .lock()
                                    .map(|mut b| b.try_take())
                                    .unwrap_or(false);
                            if !can_retry {
                                rec.attempts = attempt;
                                let mut s = Stop::deny(
                                    Layer::Sandbox,
                                    format!(
                                        "tool `{tool}` failed after {attempt} attempt(s): {}",
                                        e.message
                                    ),
                                )
                                .code("SBX_E1514");
                                s.status = OperationStatus::Failed;
                                s.verdict = Verdict::Allow;
                                return Err(s);
                            }
                            let delay = crate::retry::backoff(&self.cfg.retry, attempt);
                            tracing::info!(operation_id = %id, attempt, delay_ms = ms(delay), "retrying a transient failure");
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                        }
                    }
                }
            }
            OperationArgs::FileRead { .. }
            | OperationArgs::FileWrite { .. }
            | OperationArgs::FileDelete { .. } => {
                let Some(root) = sub.workspace.as_deref() else {
                    return Err(Stop::deny(
                        Layer::Sandbox,
                        "file operations need a workspace (open a Sandbox session)",
                    )
                    .code("SBX_E1513"));
                };
                crate::files::execute(&op.args, root, sub.content.as_deref(), rec)
                    .map(|v| (None, Some(v)))
            }
            other => Err(Stop::deny(
                Layer::Sandbox,
                format!(
                    "operation kind `{}` has no executor in this gateway yet",
                    other.kind()
                ),
            )
            .code("SBX_E1513")),
        }
    }

    /// Re-reads the persisted kill switch while an operation runs, so `sandboxio kill`
    /// from another process stops it.
    fn watch_kill_switch(&self, token: CancelToken) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        let poll = self.cfg.kill_poll;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(poll).await;
                match store.kill_state() {
                    Ok(Some(k)) => {
                        token.cancel(format!("kill switch: {}", k.reason));
                        return;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        token.cancel("kill switch state unreadable (failing closed)");
                        return;
                    }
                }
            }
        })
    }
}

/// What the chain did so far, for the closing transaction.
#[derive(Default)]
struct RunCtx {
    /// The admission transaction committed (journal intent, reservation, maybe the key).
    admitted: bool,
    /// (tenant, key) claimed by this operation.
    idem: Option<(String, String)>,
    /// The side effect started (the sandbox or the tool was called).
    ran: bool,
    /// The measured cost to settle.
    charge: Option<Money>,
}

/// Why the chain stopped early.
pub(crate) struct Stop {
    pub(crate) verdict: Verdict,
    layer: Layer,
    reason: String,
    code: Option<&'static str>,
    pub(crate) status: OperationStatus,
    retry_after_ms: Option<u64>,
}

impl Stop {
    pub(crate) fn deny(layer: Layer, reason: impl Into<String>) -> Stop {
        Stop {
            verdict: Verdict::Deny,
            layer,
            reason: reason.into(),
            code: None,
            status: OperationStatus::Denied,
            retry_after_ms: None,
        }
    }
    pub(crate) fn code(mut self, code: &'static str) -> Stop {
        self.code = Some(code);
        self
    }
    /// The runtime could not do its job: deny, fail closed.
    fn error(layer: Layer, e: &GatewayError) -> Stop {
        let mut s = Stop::deny(
            layer,
            format!("denied because the {layer} layer failed: {e}"),
        )
        .code(e.code());
        s.status = OperationStatus::Error;
        s
    }
    fn killed(k: &KillState) -> Stop {
        Stop::deny(
            Layer::KillSwitch,
            format!("the kill switch is engaged: {}", k.reason),
        )
        .code(denial::KILL_SWITCH)
    }
    /// A policy deny (the only decision turned into a stop here).
    fn from_decision(d: Decision) -> Stop {
        let mut s = Stop::deny(d.layer, d.reason).code(denial::POLICY);
        s.retry_after_ms = d.retry_after_ms;
        s
    }
}

fn build_exec(op: &Operation, exec: Option<ExecRequest>) -> ExecRequest {
    let mut req = exec.unwrap_or_else(|| ExecRequest::new(Vec::<String>::new()));
    match &op.args {
        OperationArgs::Exec { argv } => req.argv = argv.clone(),
        OperationArgs::RunCode { language, code } => {
            let file = language.file_name();
            req.files
                .insert(file.to_string(), code.clone().into_bytes());
            req.argv = language
                .interpreter()
                .iter()
                .map(|s| s.to_string())
                .chain([file.to_string()])
                .collect();
        }
        _ => {}
    }
    req
}

fn fill_from_result(rec: &mut OperationRecord, r: &ExecResult, tier: IsolationTier) {
    rec.sandbox_id = Some(r.sandbox_id.clone());
    rec.isolation = r.enforcement.tier.or(Some(tier));
    rec.backend = r
        .meter
        .as_ref()
        .map(|m| m.backend.clone())
        .unwrap_or_else(|| format!("local-{tier}"));
    match r.exit {
        ExitStatus::Code(c) => rec.exit_code = Some(c),
        ExitStatus::Signal(s) => rec.signal = Some(s),
    }
    rec.bytes_out = r.stdout_bytes + r.stderr_bytes;
    rec.network_denials = r.network_denials;
    rec.enforcement = Some(r.enforcement.clone());
    rec.status = if let Some(why) = &r.cancelled {
        rec.reason = format!("cancelled: {why}");
        OperationStatus::Cancelled
    } else if r.timed_out {
        OperationStatus::TimedOut
    } else if r.oom_killed {
        OperationStatus::OomKilled
    } else if r.exit.success() {
        OperationStatus::Ok
    } else {
        OperationStatus::Failed
    };
}

/// The reason of a run that ended by a limit: the limit, not the rule that allowed it.
fn outcome_reason(rec: &mut OperationRecord, r: &ExecResult, limits: &sandboxio_core::Limits) {
    match rec.status {
        OperationStatus::TimedOut => {
            rec.reason = format!(
                "ran past its {} wall-clock limit; the whole process tree was killed",
                sandboxio_core::HumanDuration(limits.timeout)
            );
        }
        OperationStatus::OomKilled => {
            rec.reason = format!("killed for exceeding its memory limit of {}", limits.memory);
        }
        OperationStatus::Failed => {
            rec.reason = match r.exit {
                ExitStatus::Code(c) => format!("ran and exited with status {c}"),
                ExitStatus::Signal(s) => format!("ran and was killed by signal {s}"),
            };
        }
        _ => {}
    }
}

fn redact_result(redactor: &sandboxio_audit::Redactor, mut r: ExecResult) -> ExecResult {
    r.stdout = redactor.redact_str(&r.stdout).into_owned();
    r.stderr = redactor.redact_str(&r.stderr).into_owned();
    if let Some(c) = &r.cancelled {
        r.cancelled = Some(redactor.redact_str(c).into_owned());
    }
    r
}

fn redact_json(redactor: &sandboxio_audit::Redactor, v: serde_json::Value) -> serde_json::Value {
    let s = serde_json::to_string(&v).unwrap_or_default();
    serde_json::from_str(&redactor.redact_str(&s)).unwrap_or(serde_json::Value::Null)
}
