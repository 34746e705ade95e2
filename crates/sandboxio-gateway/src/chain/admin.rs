//! Operator actions as operations: kill, resume, approve, deny, policy reload and key
//! rotation each leave a record naming the actor (the principal's agent, set by the front
//! end that authenticated the operator).

use std::sync::Arc;

use chrono::Utc;
use sandboxio_core::{
    AdminAction, ErrorCode, ExecResult, Layer, Operation, OperationArgs, OperationRecord,
    OperationStatus, Principal, Verdict,
};

use super::stop::Stop;
use super::{Gateway, Outcome, Submission};
use crate::error::GatewayError;
use crate::policy::PolicyEngine;

impl Gateway {
    /// Runs an operator action through the chain, as `actor` for `tenant`.
    pub async fn admin(
        &self,
        tenant: &str,
        actor: &str,
        action: AdminAction,
    ) -> Result<Outcome, GatewayError> {
        let mut p = Principal::tenant(tenant);
        p.agent = Some(actor.to_string());
        self.submit(Submission::new(Operation::new(
            p,
            OperationArgs::Admin { action },
        )))
        .await
    }

    /// Engages the kill switch as `by` (a recorded operator action).
    pub async fn kill(&self, reason: &str, by: &str) -> Result<Outcome, GatewayError> {
        self.admin(
            "default",
            by,
            AdminAction::Kill {
                reason: reason.to_string(),
            },
        )
        .await
    }

    /// Swaps the policy engine and records the reload (`digest` names the new policy).
    pub async fn reload_policy(
        &self,
        engine: Arc<dyn PolicyEngine>,
        digest: &str,
        actor: &str,
    ) -> Result<Outcome, GatewayError> {
        match self.policy.write() {
            Ok(mut p) => *p = engine,
            Err(_) => {
                return Err(GatewayError::Config {
                    why: "the policy lock is poisoned".into(),
                })
            }
        }
        self.admin(
            "default",
            actor,
            AdminAction::PolicyReload {
                digest: digest.to_string(),
            },
        )
        .await
    }

    pub(super) async fn admin_action(
        &self,
        action: &AdminAction,
        op: &Operation,
        rec: &mut OperationRecord,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let actor = op
            .principal
            .agent
            .clone()
            .unwrap_or_else(|| "unknown".into());
        let now = Utc::now();
        let done = |rec: &mut OperationRecord, what: String| {
            rec.verdict = Verdict::Allow;
            rec.layer = Layer::Sandbox;
            rec.status = OperationStatus::Ok;
            rec.reason = what;
        };
        let fail = |e: GatewayError| {
            let mut s = Stop::deny(Layer::Sandbox, e.to_string()).code(e.code());
            s.status = OperationStatus::Error;
            s
        };
        match action {
            AdminAction::Kill { reason } => {
                let (why, by) = (reason.clone(), actor.clone());
                self.on_store("engaging the kill switch", move |s, _| {
                    s.set_kill(&why, &by, now)
                })
                .await
                .map_err(fail)?;
                self.cancel_all(&format!("kill switch: {reason}"));
                done(rec, format!("kill switch engaged by {actor}: {reason}"));
            }
            AdminAction::Resume => {
                self.on_store("releasing the kill switch", |s, _| s.clear_kill())
                    .await
                    .map_err(fail)?;
                done(rec, format!("kill switch released by {actor}"));
            }
            AdminAction::Approve {
                approval_id,
                reason,
            }
            | AdminAction::Deny {
                approval_id,
                reason,
            } => {
                let approve = matches!(action, AdminAction::Approve { .. });
                rec.approval_id = Some(approval_id.clone());
                rec.approver = Some(actor.clone());
                let (aid, by, why) = (approval_id.clone(), actor.clone(), reason.clone());
                let a = self
                    .on_store("deciding an approval", move |s, _| {
                        s.decide_approval(&aid, approve, &by, why.as_deref(), now)
                    })
                    .await
                    .map_err(fail)?;
                // An approval is the tenant's: the record names the tenant it belonged to.
                rec.tenant_id = Some(a.tenant.clone());
                done(
                    rec,
                    format!(
                        "approval `{approval_id}` {} by {actor}",
                        if approve { "approved" } else { "denied" }
                    ),
                );
            }
            AdminAction::PolicyReload { digest } => {
                done(rec, format!("policy reloaded by {actor} (digest {digest})"));
            }
            AdminAction::BudgetReopen { scope } => {
                let key: sandboxio_budget::ScopeKey = scope.parse().map_err(|e| {
                    fail(GatewayError::Config {
                        why: format!("{e}"),
                    })
                })?;
                let reopened = self
                    .on_store("reopening a budget scope", move |s, _| {
                        s.reopen_scope(&key, now)
                    })
                    .await
                    .map_err(fail)?;
                if !reopened {
                    return Err(fail(GatewayError::Config {
                        why: format!("budget scope `{scope}` is not closed"),
                    }));
                }
                done(rec, format!("budget scope `{scope}` reopened by {actor}"));
            }
            AdminAction::KeyRotate { key_id } => {
                done(
                    rec,
                    format!("audit key rotated by {actor} (new key {key_id})"),
                );
            }
        }
        Ok((None, Some(serde_json::to_value(action).unwrap_or_default())))
    }
}
