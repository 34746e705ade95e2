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
use rust_decimal::Decimal;
use sandboxio_audit::{Auditor, OnSinkFailure, Secret};
use sandboxio_core::fingerprint::sha256_hex;
use sandboxio_core::{
    Decision, ErrorCode, ExecRequest, ExecResult, ExitStatus, Fingerprint, IsolationTier, Layer,
    Money, Operation, OperationArgs, OperationKind, OperationRecord, OperationStatus, Verdict,
};
use sandboxio_sandbox::{CancelToken, SandboxConfig};

use crate::approval::{ApprovalAnswer, Approver};
use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::policy::PolicyEngine;
use crate::redaction::Redaction;
use crate::retry::RetryBudget;
use crate::store::{
    Approval, ApprovalState, IdemBegin, JournalEntry, LedgerLine, ReserveOutcome, ScopeCeiling,
    Store,
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

    /// Finishes work a crashed process left: intents without an outcome are recorded as
    /// `interrupted`, their reservations released and their keys settled. Call at start.
    pub async fn recover(&self) -> Result<usize, GatewayError> {
        let now = Utc::now();
        self.store.expire_approvals(now)?;
        // Cgroups a SIGKILLed process could not remove (empty and older than STALE_AGE).
        let stale = sandboxio_sandbox::cgroup::cleanup_stale();
        if !stale.is_empty() {
            tracing::info!(count = stale.len(), "removed stale sandbox cgroups");
        }
        let entries = self.store.recover(now, &owner_alive, &|e| {
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
    pub async fn submit(&self, mut sub: Submission) -> Result<Outcome, GatewayError> {
        let started = Instant::now();
        let id = new_id();
        if sub.op.tier.is_none()
            && matches!(sub.op.kind(), OperationKind::Exec | OperationKind::RunCode)
        {
            sub.op.tier = Some(self.cfg.default_tier);
        }
        let mut rec = self.base_record(&id, &sub.op);
        rec.labels = sub.labels.clone();
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
            reservation: false,
            idem: None,
            journaled: false,
        };
        let outcome = self
            .chain(&id, &sub, &fingerprint, &mut rec, &mut ctx, started)
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
        // Release whatever was reserved but not settled (denied after reserve, failures).
        if ctx.reservation {
            if let Err(e) = self.store.release(&id) {
                tracing::warn!(operation_id = %id, code = e.code(), "releasing a reservation failed: {e}");
            }
        }
        rec.duration_ms = ms(started.elapsed());
        rec.ts = Utc::now();
        let result = result.map(|r| redact_result(&redactor, r));
        let tool_output = tool_output.map(|v| redact_json(&redactor, v));
        let (rec, _) = redactor.redact_record_counted(rec);
        let out = Outcome {
            record: rec,
            result,
            tool_output,
        };
        // Idempotency: store the outcome before the journal closes, so a crash in between
        // replays the outcome instead of running twice.
        if let Some((tenant, key)) = &ctx.idem {
            let json = serde_json::to_string(&out).unwrap_or_default();
            let stored =
                if out.record.layer == Layer::Sandbox || out.record.verdict == Verdict::Allow {
                    self.store.idem_finish(tenant, key, &json)
                } else {
                    // Stopped before running: forget the key so a retry may run.
                    self.store.idem_abandon(tenant, key)
                };
            if let Err(e) = stored {
                tracing::warn!(operation_id = %id, code = e.code(), "storing an idempotency outcome failed: {e}");
            }
        }
        let parent = sub
            .traceparent
            .as_deref()
            .and_then(sandboxio_audit::parent_from_traceparent)
            .unwrap_or_else(opentelemetry::Context::current);
        let recorded = self
            .auditor
            .record_with_parent(out.record.clone(), &parent)
            .await;
        if ctx.journaled {
            if let Err(e) = self
                .store
                .journal_outcome(&id, out.record.status.as_str(), Utc::now())
            {
                tracing::warn!(operation_id = %id, code = e.code(), "journaling an outcome failed: {e}");
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
        rec: &mut OperationRecord,
        ctx: &mut RunCtx,
        started: Instant,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let op = &sub.op;
        // admit
        op.validate()
            .map_err(|e| Stop::deny(Layer::Admit, e.to_string()).code(e.code()))?;
        // kill switch
        match self.store.kill_state() {
            Ok(None) => {}
            Ok(Some(k)) => {
                return Err(Stop::deny(
                    Layer::KillSwitch,
                    format!("the kill switch is engaged: {}", k.reason),
                ))
            }
            Err(e) => return Err(Stop::error(Layer::KillSwitch, &e)),
        }
        // policy
        let decision = self.policy.decide(op, Utc::now());
        rec.rules = decision.rules.clone();
        rec.reason = decision.reason.clone();
        if decision.verdict == Verdict::Deny {
            return Err(Stop::from_decision(decision));
        }
        let needs_approval = decision.verdict == Verdict::Ask;
        // rate limit
        self.rate_limit(op)?;
        // journal intent, durable before anything that must be undone after a crash (the
        // reservation, the idempotency claim) and before any side effect. `recover` finds it
        // by owner, releases the reservation and settles the key only if this operation
        // claimed it.
        let entry = JournalEntry {
            operation_id: id.to_string(),
            intent: serde_json::to_string(op).unwrap_or_default(),
            started_at: Utc::now(),
            owner: self.owner.clone(),
            idempotent: op.idempotent,
            idem: op
                .idempotency_key
                .as_ref()
                .map(|k| (op.principal.tenant.clone(), k.as_str().to_string())),
        };
        self.store
            .journal_intent(&entry)
            .map_err(|e| Stop::error(Layer::Journal, &e))?;
        ctx.journaled = true;
        // budget
        let estimate = self.estimate(op, sub.exec.as_ref());
        rec.cost_reserved = Some(estimate);
        let scopes = self.scopes(op);
        if !scopes.is_empty() {
            match self
                .store
                .reserve(id, &scopes, op.cost_category, estimate, Utc::now())
            {
                Ok(ReserveOutcome::Reserved) => ctx.reservation = true,
                Ok(ReserveOutcome::Denied {
                    scope,
                    spent,
                    reserved,
                    ceiling,
                    amount,
                }) => {
                    let after = spent
                        .checked_add(reserved)
                        .and_then(|x| x.checked_add(amount));
                    let after = after
                        .map(|a| a.to_string())
                        .unwrap_or_else(|_| "more than representable".into());
                    return Err(Stop::deny(
                        Layer::Budget,
                        format!("reserving {amount} would bring `{scope}` to {after} of its {ceiling} ceiling ({spent} spent, {reserved} reserved)"),
                    ));
                }
                Err(e) => return Err(Stop::error(Layer::Budget, &e)),
            }
        }
        // approval
        if needs_approval {
            self.approve(id, op, fingerprint, &decision, rec).await?;
        }
        // idempotency
        if let Some(key) = &op.idempotency_key {
            let tenant = op.principal.tenant.clone();
            let retention = self.cfg.idempotency_retention.as_secs();
            rec.idempotency_retention_s = Some(retention);
            match self.store.idem_begin(
                &tenant,
                key.as_str(),
                &fingerprint.0,
                id,
                Utc::now(),
                retention,
            ) {
                Ok(IdemBegin::New) => ctx.idem = Some((tenant, key.as_str().to_string())),
                Ok(IdemBegin::Replay {
                    outcome,
                    operation_id,
                }) => {
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
                    rec.sandbox_id = prev.record.sandbox_id.clone();
                    if prev.record.status == OperationStatus::Interrupted {
                        rec.status = OperationStatus::Interrupted;
                        rec.reason = format!("operation {operation_id} with this key was interrupted and may have run; it is not run again");
                        rec.error_code = Some("SBX_E1512".into());
                    }
                    return Ok((prev.result, prev.tool_output));
                }
                Ok(IdemBegin::Conflict) => {
                    let e = GatewayError::IdempotencyConflict {
                        key: key.as_str().to_string(),
                    };
                    return Err(Stop::deny(Layer::Idempotency, e.to_string()).code(e.code()));
                }
                Ok(IdemBegin::InProgress) => {
                    let e = GatewayError::IdempotencyInProgress {
                        key: key.as_str().to_string(),
                    };
                    return Err(Stop::deny(Layer::Idempotency, e.to_string()).code(e.code()));
                }
                Err(e) => return Err(Stop::error(Layer::Idempotency, &e)),
            }
        }
        // (the journal intent was written before the budget layer)
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
        let ran = self.run(id, sub, rec).await;
        // settle
        let (result, tool_output) = ran?;
        let charge = self.measured_cost(op, result.as_ref(), estimate);
        if ctx.reservation {
            let line = LedgerLine {
                operation_id: id.to_string(),
                tenant: op.principal.tenant.clone(),
                category: op.cost_category,
                amount: charge,
                at: Utc::now(),
                description: format!("{} {}", op.kind(), op.args.tool_name()),
                labels: sub.labels.clone(),
            };
            match self
                .store
                .settle(id, charge, self.cfg.budget.warn_fraction, Some(line))
            {
                Ok(s) => {
                    ctx.reservation = false;
                    rec.cost_settled = Some(s.charged);
                    for (scope, spent, ceiling) in s.warn_crossed {
                        self.warn_budget(op, &scope, spent, ceiling).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(operation_id = %id, code = e.code(), "settling failed; the reservation is released: {e}")
                }
            }
        }
        let target = match op.kind() {
            OperationKind::Exec | OperationKind::RunCode | OperationKind::ToolCall => {
                self.cfg.execution_latency
            }
            _ => self.cfg.interactive_latency,
        };
        rec.latency_budget_violated = started.elapsed() > target.p99;
        Ok((result, tool_output))
    }

    fn rate_limit(&self, op: &Operation) -> Result<(), Stop> {
        let now_ms = Utc::now().timestamp_millis();
        for rule in &self.cfg.rate_limits {
            if rule.kind.is_some_and(|k| k != op.kind()) {
                continue;
            }
            let action = rule.kind.map(|k| k.as_str()).unwrap_or("*");
            let key = format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{}/{}",
                op.principal.tenant,
                op.principal.agent.as_deref().unwrap_or(""),
                action,
                rule.limit,
                ms(rule.window)
            );
            let window = i64::try_from(ms(rule.window)).unwrap_or(i64::MAX);
            match self.store.rate_take(&key, rule.limit, window, now_ms) {
                Ok(None) => {}
                Ok(Some(retry)) => {
                    let mut s = Stop::deny(
                        Layer::RateLimit,
                        format!(
                            "rate limit of {} `{}` per {}s reached; retry in {} ms",
                            rule.limit,
                            action,
                            rule.window.as_secs(),
                            retry
                        ),
                    );
                    s.retry_after_ms = Some(retry);
                    return Err(s);
                }
                Err(e) => return Err(Stop::error(Layer::RateLimit, &e)),
            }
        }
        Ok(())
    }

    fn scopes(&self, op: &Operation) -> Vec<ScopeCeiling> {
        let b = &self.cfg.budget;
        let mut v = Vec::new();
        if let Some(c) = b.global {
            v.push(ScopeCeiling {
                scope: "global".into(),
                ceiling: c,
            });
        }
        if let Some(c) = b
            .tenants
            .get(&op.principal.tenant)
            .copied()
            .or(b.per_tenant)
        {
            v.push(ScopeCeiling {
                scope: format!("tenant:{}", op.principal.tenant),
                ceiling: c,
            });
        }
        if let (Some(c), Some(s)) = (b.per_session, &op.principal.session) {
            v.push(ScopeCeiling {
                scope: format!("session:{}:{}", op.principal.tenant, s),
                ceiling: c,
            });
        }
        v
    }

    /// The reservation: the caller's estimate, or the most the limits allow to be spent.
    fn estimate(&self, op: &Operation, exec: Option<&ExecRequest>) -> Money {
        if let Some(c) = op.estimated_cost {
            return c;
        }
        let rc = &self.cfg.budget.rate_card;
        let limits = exec.map(|e| e.limits.clone()).unwrap_or_default();
        let secs = Decimal::from(limits.timeout.as_secs().max(1));
        let cores = Decimal::new(i64::from(limits.cpu_quota_millis.max(1)), 3);
        let gib = Decimal::from(limits.memory.bytes()) / Decimal::from(1u64 << 30);
        let cpu = rc
            .cpu_second
            .checked_mul(secs * cores)
            .unwrap_or(Money::ZERO);
        let mem = rc.gib_second.checked_mul(secs * gib).unwrap_or(Money::ZERO);
        cpu.checked_add(mem)
            .and_then(|m| m.checked_add(rc.per_call))
            .unwrap_or(Money::ZERO)
    }

    fn measured_cost(&self, op: &Operation, result: Option<&ExecResult>, estimate: Money) -> Money {
        let rc = &self.cfg.budget.rate_card;
        let Some(r) = result else {
            return if op.estimated_cost.is_some() {
                estimate
            } else {
                rc.per_call
            };
        };
        let cpu_s =
            Decimal::from(r.usage.cpu_time_ms.unwrap_or(r.duration_ms)) / Decimal::from(1000);
        let gib = Decimal::from(r.usage.peak_memory_bytes.unwrap_or(0)) / Decimal::from(1u64 << 30);
        let wall_s = Decimal::from(r.duration_ms) / Decimal::from(1000);
        let cost = rc
            .cpu_second
            .checked_mul(cpu_s)
            .and_then(|c| c.checked_add(rc.gib_second.checked_mul(gib * wall_s)?))
            .and_then(|c| c.checked_add(rc.per_call));
        cost.unwrap_or(estimate)
    }

    async fn warn_budget(&self, op: &Operation, scope: &str, spent: Money, ceiling: Money) {
        let mut w = OperationRecord::new(new_id(), "budget_warning");
        w.tenant_id = Some(op.principal.tenant.clone());
        w.status = OperationStatus::Warning;
        w.verdict = Verdict::Allow;
        w.layer = Layer::Budget;
        w.reason = format!(
            "`{scope}` has spent {spent} of its {ceiling} ceiling (warn fraction {})",
            self.cfg.budget.warn_fraction
        );
        w.cost_settled = Some(spent);
        if let Err(e) = self.auditor.record(w).await {
            tracing::warn!(code = e.code(), "recording a budget warning failed: {e}");
        }
    }

    async fn approve(
        &self,
        id: &str,
        op: &Operation,
        fp: &Fingerprint,
        decision: &Decision,
        rec: &mut OperationRecord,
    ) -> Result<(), Stop> {
        let now = Utc::now();
        let approval_id = format!("apr_{}", &new_id()[..12]);
        let redacted_op = self
            .auditor
            .redactor()
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
        let waited = Instant::now();
        tracing::info!(operation_id = %id, approval_id = %approval_id, "approval required: {}", decision.reason);
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
        let Some(ans) = answer else {
            let _ = self.store.expire_approval(&approval_id);
            return Err(Stop::deny(
                Layer::Approval,
                format!(
                    "approval `{approval_id}` was not given before the timeout ({}s)",
                    self.cfg.approval_timeout.as_secs()
                ),
            ));
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
            ));
        }
        // Bound to this exact request, once.
        match self.store.consume_approval(&approval_id, &fp.0, Utc::now()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Stop::deny(Layer::Approval, format!("approval `{approval_id}` is not valid for this request (used, expired or for another request)"))),
            Err(e) => Err(Stop::error(Layer::Approval, &e)),
        }
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
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let op = &sub.op;
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

struct RunCtx {
    reservation: bool,
    idem: Option<(String, String)>,
    journaled: bool,
}

/// Why the chain stopped early.
struct Stop {
    verdict: Verdict,
    layer: Layer,
    reason: String,
    code: Option<&'static str>,
    status: OperationStatus,
    retry_after_ms: Option<u64>,
}

impl Stop {
    fn deny(layer: Layer, reason: impl Into<String>) -> Stop {
        Stop {
            verdict: Verdict::Deny,
            layer,
            reason: reason.into(),
            code: None,
            status: OperationStatus::Denied,
            retry_after_ms: None,
        }
    }
    fn code(mut self, code: &'static str) -> Stop {
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
    fn from_decision(d: Decision) -> Stop {
        let mut s = Stop::deny(d.layer, d.reason);
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
