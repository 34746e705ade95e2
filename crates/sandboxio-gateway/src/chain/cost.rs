//! Budget and rate-limit inputs of the chain: what an operation reserves, what it is
//! charged, which rate limits apply, and the answer for a known idempotency key.

use sandboxio_budget::{MeasuredUsage, ReserveRequest, ScopeKey, Summary};
use sandboxio_core::{
    ErrorCode, ExecRequest, ExecResult, Layer, Money, Operation, OperationArgs, OperationRecord,
    OperationStatus, Verdict,
};

use super::record::{ms, new_id};
use super::stop::Stop;
use super::{Gateway, Outcome};
use crate::error::GatewayError;
use crate::store::IdemBegin;

impl Gateway {
    /// The rate limits that apply: those for the operation kind and, for a tool call, those
    /// naming the tool.
    pub(super) fn rate_limits_for(
        &self,
        op: &Operation,
    ) -> Vec<(String, sandboxio_budget::RateLimit)> {
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
    pub(super) fn idem_answer(
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

    /// The reservation: the most the operation can cost, never less than the caller's
    /// estimate. For exec and run_code the bound comes from the resolved limits (timeout x
    /// CPU quota, memory), so a tiny or missing estimate cannot dodge the budget; for
    /// anything else it is the estimate or the per-call price. Returns the amount and, in
    /// words, where it came from (for a budget denial).
    pub(super) fn reservation(&self, op: &Operation) -> (Money, String) {
        let b = &self.cfg.budget;
        let rc = &b.rate_card;
        let (floor, why) = match (&op.args, &op.exec) {
            (
                OperationArgs::Exec { .. }
                | OperationArgs::RunCode { .. }
                | OperationArgs::Browse { .. },
                Some(req),
            ) => {
                let u = Self::bound_usage(req);
                // Past what money can hold at this rate card: the largest amount, which no
                // ceiling admits (never the default estimate, which would run it free).
                let Ok(cost) = rc.cost(&u) else {
                    return (
                        Money::from_decimal(rust_decimal::Decimal::MAX),
                        "the most this request can cost under its limits at the rate card is past what a money amount can hold; lower the timeout, the CPU quota or the prices".into(),
                    );
                };
                (
                    cost,
                    format!(
                        "{cost} is the most this request can cost under its limits (timeout {} ms at {} milli-CPU, {} memory) at the rate card; lower the timeout or the CPU quota, or raise the ceiling",
                        u.wall_time_ms,
                        req.limits.cpu_quota_millis,
                        req.limits.memory
                    ),
                )
            }
            _ => (
                rc.per_call,
                format!("{} is the per-call price", rc.per_call),
            ),
        };
        let amount = floor.max(b.default_estimate);
        match op.estimated_cost {
            Some(e) if e > amount => (e, format!("{e} is the caller's estimate")),
            _ => (amount, why),
        }
    }

    /// The most an exec can use under its limits.
    fn bound_usage(req: &ExecRequest) -> MeasuredUsage {
        let wall = ms(req.limits.timeout).max(1);
        let cpu = wall.saturating_mul(u64::from(req.limits.cpu_quota_millis.max(1))) / 1000;
        MeasuredUsage {
            cpu_time_ms: cpu,
            peak_memory_bytes: req.limits.memory.bytes(),
            wall_time_ms: wall,
        }
    }

    /// What the operation is charged: its measured cost (all of it; what passes the
    /// reservation is an overrun that closes the scope), or for what cannot be measured
    /// (a tool), the reservation.
    pub(super) fn measured_cost(&self, result: Option<&ExecResult>, reserved: Money) -> Money {
        let rc = &self.cfg.budget.rate_card;
        let Some(r) = result else {
            return reserved;
        };
        let usage = MeasuredUsage {
            cpu_time_ms: r.usage.cpu_time_ms.unwrap_or(r.duration_ms),
            peak_memory_bytes: r.usage.peak_memory_bytes.unwrap_or(0),
            wall_time_ms: r.duration_ms,
        };
        rc.cost(&usage).unwrap_or(reserved)
    }

    /// The operation's budget scopes whose spend and remaining budget go to the metrics
    /// after it finishes (read in the closing call, `close.rs`); none when no scope has a
    /// ceiling.
    pub(super) fn metric_scopes(&self, op: &Operation) -> Vec<ScopeKey> {
        let b = &self.cfg.budget;
        if b.global.is_none()
            && b.per_tenant.is_none()
            && b.tenants.is_empty()
            && b.per_session.is_none()
            && b.ceiling.is_empty()
        {
            return Vec::new();
        }
        reserve_request(op, String::new(), None).scopes_in(b)
    }

    /// Spent and remaining budget of the scopes read by the closing call, as metrics.
    pub(super) fn budget_metrics(&self, summaries: Vec<Summary>) {
        let metrics = self.auditor.metrics();
        for s in summaries {
            metrics.budget(&s.scope.to_string(), &s.total, s.remaining.as_ref());
        }
    }

    pub(super) async fn warn_budget(&self, op: &Operation, what: &str, spent: Money) {
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
}

/// The budget crate's view of an operation's reservation.
pub(super) fn reserve_request(
    op: &Operation,
    id: String,
    estimate: Option<Money>,
) -> ReserveRequest {
    ReserveRequest {
        id,
        tenant: op.principal.tenant.clone(),
        session: op.principal.session.clone(),
        category: op.cost_category,
        estimate,
        agent: op.principal.agent.clone(),
        at: Some(chrono::Utc::now()),
    }
}
