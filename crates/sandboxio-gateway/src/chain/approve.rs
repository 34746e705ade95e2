//! The approval layer: an `ask` waits for a person (or a configured approver), bound to
//! the request's fingerprint; a timeout, a denial or the kill switch ends it as a deny.

use std::time::{Duration, Instant};

use chrono::Utc;
use sandboxio_core::{request_view, Decision, Fingerprint, Layer, OperationRecord};

use super::record::ms;
use super::stop::Stop;
use super::{Gateway, Submission};
use crate::approval::{ApprovalAnswer, Approver};
use crate::store::{approval_id_for, Approval, ApprovalState};

impl Gateway {
    pub(super) async fn approve(
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
        // Approvers see the whole request (env names, limits, network, digests of values),
        // through the request's own redactor: its secrets never reach the approvals table.
        let redacted_op = redactor
            .redact_str(&request_view(op).to_string())
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
        let row = a.clone();
        self.on_store("creating an approval", move |s, _| s.create_approval(&row))
            .await
            .map_err(|e| Stop::error(Layer::Approval, &e))?;
        rec.approval_id = Some(approval_id.clone());
        if let Some(tx) = notify {
            let _ = tx.send(a.clone());
        }
        let metrics = self.auditor.metrics();
        metrics.approvals_pending(1);
        let waited = Instant::now();
        tracing::info!(operation_id = %id, approval_id = %approval_id, "approval required");
        let waiting = async {
            match &self.approver {
                Approver::Nobody => None,
                Approver::Callback(cb) => {
                    match tokio::time::timeout(self.cfg.approval_timeout, cb.decide(&a)).await {
                        Ok(Some(ans)) => {
                            let (aid, decided) = (approval_id.clone(), ans.clone());
                            let _ = self
                                .on_store("deciding an approval", move |s, _| {
                                    s.decide_approval(
                                        &aid,
                                        decided.approve,
                                        &decided.approver,
                                        decided.reason.as_deref(),
                                        Utc::now(),
                                    )
                                })
                                .await;
                            Some(ans)
                        }
                        _ => None,
                    }
                }
                Approver::Store { poll } => self.poll_approval(&approval_id, *poll).await,
            }
        };
        // The caller may cancel the wait (it went away; its sandbox was paused or deleted):
        // the approval is withdrawn, so nobody approves what will not run.
        let cancel = sub.cancel.clone();
        let cancelled = async {
            match &cancel {
                Some(t) => t.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            a = waiting => Ok(a),
            why = cancelled => Err(why),
        };
        rec.approval_wait_ms = Some(ms(waited.elapsed()));
        metrics.approvals_pending(-1);
        let answer = match answer {
            Ok(a) => a,
            Err(why) => {
                let aid = approval_id.clone();
                let _ = self
                    .on_store("withdrawing an approval", move |s, _| {
                        s.expire_approval(&aid)
                    })
                    .await;
                let mut s = Stop::deny(
                    Layer::Approval,
                    format!("cancelled while waiting for approval `{approval_id}`: {why}"),
                )
                .code(crate::denial::APPROVAL_CANCELLED);
                s.status = sandboxio_core::OperationStatus::Cancelled;
                return Err(s);
            }
        };
        let Some(ans) = answer else {
            let aid = approval_id.clone();
            let _ = self
                .on_store("expiring an approval", move |s, _| s.expire_approval(&aid))
                .await;
            return Err(Stop::deny(
                Layer::Approval,
                format!(
                    "approval `{approval_id}` was not given before the timeout ({}s)",
                    self.cfg.approval_timeout.as_secs()
                ),
            )
            .code(crate::denial::APPROVAL_TIMEOUT));
        };
        rec.approver = Some(ans.approver.clone());
        // The kill switch ends pending asks as its own denials.
        match self
            .on_store("reading the kill switch", |s, _| s.kill_state())
            .await
        {
            Ok(Some(k)) => return Err(Stop::killed(&k)),
            Ok(None) => {}
            Err(e) => return Err(Stop::error(Layer::KillSwitch, &e)),
        }
        if !ans.approve {
            let why = ans.reason.map(|r| format!(": {r}")).unwrap_or_default();
            return Err(Stop::deny(
                Layer::Approval,
                format!(
                    "approval `{approval_id}` was denied by {}{why}",
                    ans.approver
                ),
            )
            .code(crate::denial::APPROVAL_DENIED));
        }
        Ok(approval_id)
    }

    pub(super) async fn poll_approval(
        &self,
        approval_id: &str,
        poll: Duration,
    ) -> Option<ApprovalAnswer> {
        let deadline = Instant::now() + self.cfg.approval_timeout;
        // A decision on any replica (or the kill switch) wakes this waiter at once.
        let mut changes = self.store.changes();
        while Instant::now() < deadline {
            let aid = approval_id.to_string();
            match self
                .on_store("reading an approval", move |s, _| s.get_approval(&aid))
                .await
            {
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
            let left = deadline.saturating_duration_since(Instant::now());
            crate::store::wait_for_change(&mut changes, poll.min(left)).await;
        }
        None
    }
}
