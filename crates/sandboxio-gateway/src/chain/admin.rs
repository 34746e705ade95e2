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
use crate::credential::{self, Minted, Scopes};
use crate::error::GatewayError;
use crate::policy::PolicyEngine;
use crate::store::{Approval, ApprovalState};

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

    /// Approves or denies `approval_id` as `actor` (a recorded operator action) and returns
    /// the approval as it now stands. Already decided, expired or unknown: the typed error,
    /// and the refusal has its own record.
    pub async fn decide_approval(
        &self,
        tenant: &str,
        actor: &str,
        approval_id: &str,
        approve: bool,
        reason: Option<String>,
    ) -> Result<Approval, GatewayError> {
        let approval_id = approval_id.to_string();
        let action = if approve {
            AdminAction::Approve {
                approval_id: approval_id.clone(),
                reason,
            }
        } else {
            AdminAction::Deny {
                approval_id: approval_id.clone(),
                reason,
            }
        };
        let name = action.name();
        let out = self.admin(tenant, actor, action).await?;
        let id = approval_id.clone();
        let now = self
            .on_store("reading an approval", move |s, _| s.get_approval(&id))
            .await?;
        match now {
            None => Err(GatewayError::ApprovalNotFound { id: approval_id }),
            Some(a) if out.allowed() => Ok(a),
            Some(a) if a.state != ApprovalState::Pending => Err(GatewayError::ApprovalNotPending {
                id: approval_id,
                state: a.state.as_str().to_string(),
            }),
            Some(_) => Err(refused(name, &out)),
        }
    }

    /// Creates an API key for `tenant` as `actor`: stored hashed, recorded (id, tenant and
    /// scopes; never the secret). When the record cannot be written the key is revoked again,
    /// so no key exists without its record. The secret is in the returned `Minted` only.
    pub async fn create_key(
        &self,
        actor: &str,
        tenant: &str,
        scopes: Scopes,
        label: &str,
    ) -> Result<Minted, GatewayError> {
        let m = credential::mint_api_key(tenant, scopes, label);
        let c = m.credential.clone();
        self.on_store("creating an API key", move |s, _| s.create_credential(&c))
            .await?;
        let action = AdminAction::KeyCreate {
            key_id: m.credential.id.clone(),
            tenant: m.credential.tenant.clone(),
            scopes: m.credential.scopes.to_string(),
        };
        let out = self.admin(tenant, actor, action).await;
        let ok = matches!(&out, Ok(o) if o.allowed());
        if !ok {
            let id = m.credential.id.clone();
            // Best effort: the error below is what the caller sees either way.
            let _ = self
                .on_store("revoking an unrecorded API key", move |s, _| {
                    s.revoke_credential(&id, Utc::now())
                })
                .await;
            return Err(match out {
                Ok(o) => refused("key_create", &o),
                Err(e) => e,
            });
        }
        Ok(m)
    }

    /// Revokes an API key (and the capability tokens minted from it) as `actor`; recorded.
    pub async fn revoke_key(&self, actor: &str, key_id: &str) -> Result<Outcome, GatewayError> {
        let action = AdminAction::KeyRevoke {
            key_id: key_id.to_string(),
        };
        let out = self.admin("default", actor, action).await?;
        match out.record.error_code.as_deref() {
            _ if out.allowed() => Ok(out),
            Some("SBX_E1522") => Err(GatewayError::KeyNotFound {
                id: key_id.to_string(),
            }),
            _ => Err(refused("key_revoke", &out)),
        }
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
            AdminAction::KeyCreate { key_id, tenant, .. } => {
                // Created by `create_key` just before; this is its record.
                rec.tenant_id = Some(tenant.clone());
                done(rec, format!("API key `{key_id}` created by {actor}"));
            }
            AdminAction::KeyRevoke { key_id } => {
                let id = key_id.clone();
                let found = self
                    .on_store("revoking an API key", move |s, _| {
                        let c = s.credential(&id)?;
                        let revoked = s.revoke_credential(&id, now)?;
                        Ok(c.filter(|_| revoked))
                    })
                    .await
                    .map_err(fail)?;
                let Some(c) = found else {
                    return Err(fail(GatewayError::KeyNotFound { id: key_id.clone() }));
                };
                rec.tenant_id = Some(c.tenant);
                done(rec, format!("API key `{key_id}` revoked by {actor}"));
            }
            AdminAction::SecretSet { name, hosts } => {
                // Sealed by `set_secret` just before; this is its record.
                done(
                    rec,
                    format!(
                        "secret `{name}` set by {actor}, bound to {}",
                        hosts.join(", ")
                    ),
                );
            }
            AdminAction::SecretRemove { name } => {
                done(rec, format!("secret `{name}` removed by {actor}"));
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

/// The error for an operator action the chain refused (its record says why).
pub(crate) fn refused(action: &'static str, out: &Outcome) -> GatewayError {
    let code = out.record.error_code.as_deref().unwrap_or("SBX_E1521");
    GatewayError::AdminRefused {
        action,
        reason: format!("{} ({code})", out.record.reason),
    }
}
