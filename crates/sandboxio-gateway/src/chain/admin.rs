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
use crate::store::{AdminChange, AdminChanged, Approval, ApprovalState};

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

    /// [`Gateway::admin`], with an action the chain refused (the store could not take the
    /// change, an approval no longer pending, ...) as the error, [`GatewayError::AdminRefused`]
    /// naming its code; its record says why. For front ends that answer a person.
    pub async fn operator(
        &self,
        tenant: &str,
        actor: &str,
        action: AdminAction,
    ) -> Result<Outcome, GatewayError> {
        let name = action.name();
        let out = self.admin(tenant, actor, action).await?;
        if out.allowed() {
            Ok(out)
        } else {
            Err(refused(name, &out))
        }
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
        let action = AdminAction::KeyCreate {
            key_id: m.credential.id.clone(),
            tenant: m.credential.tenant.clone(),
            scopes: m.credential.scopes.to_string(),
        };
        let mut p = Principal::tenant(tenant);
        p.agent = Some(actor.to_string());
        let mut sub = Submission::new(Operation::new(p, OperationArgs::Admin { action }));
        // Stored by the action itself, in one transaction with its intent: a key never
        // exists without its record (or, after a crash, the intent recovery records).
        sub.new_key = Some(m.credential.clone());
        let out = self.submit(sub).await?;
        if !out.allowed() {
            return Err(refused("key_create", &out));
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
        sub: &Submission,
        rec: &mut OperationRecord,
        id: &str,
        ctx: &mut super::stop::RunCtx,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let (op, new_key) = (&sub.op, sub.new_key.as_ref());
        let effect = sub.effect.lock().ok().and_then(|mut e| e.take());
        let actor = op
            .principal
            .agent
            .clone()
            .unwrap_or_else(|| "unknown".into());
        let now = Utc::now();
        let fail = |e: GatewayError| {
            let mut s = Stop::deny(Layer::Sandbox, e.to_string()).code(e.code());
            s.status = OperationStatus::Error;
            s
        };
        // A change in the store is made in one transaction with the action's intent: a death
        // before the record leaves the intent, and recovery records the action from it.
        // Redacted string by string, like the record's fields (read as one text, a
        // `"key_id":"<hex>"` pair looked like an assignment of a secret).
        let mut intent = sandboxio_core::request_view(op);
        if let Some(r) = &ctx.redactor {
            r.redact_json(&mut intent);
        }
        let journal = crate::store::JournalEntry {
            operation_id: id.to_string(),
            intent: intent.to_string(),
            started_at: now,
            owner: self.owner.clone(),
            idempotent: op.idempotent,
            idem: None,
        };
        let change = |what: &'static str, change: AdminChange| {
            let journal = journal.clone();
            self.on_store(what, move |s, _| s.admin_change(&journal, &change))
        };
        let changed = match action {
            AdminAction::Kill { reason } => Some(
                change(
                    "engaging the kill switch",
                    AdminChange::Kill {
                        reason: reason.clone(),
                        by: actor.clone(),
                        now,
                    },
                )
                .await,
            ),
            AdminAction::Resume => {
                Some(change("releasing the kill switch", AdminChange::Resume).await)
            }
            AdminAction::Approve {
                approval_id,
                reason,
            }
            | AdminAction::Deny {
                approval_id,
                reason,
            } => {
                rec.approval_id = Some(approval_id.clone());
                rec.approver = Some(actor.clone());
                Some(
                    change(
                        "deciding an approval",
                        AdminChange::Decide {
                            approval_id: approval_id.clone(),
                            approve: matches!(action, AdminAction::Approve { .. }),
                            by: actor.clone(),
                            reason: reason.clone(),
                            now,
                        },
                    )
                    .await,
                )
            }
            AdminAction::BudgetReopen { scope } => {
                let scope: sandboxio_budget::ScopeKey = scope.parse().map_err(|e| {
                    fail(GatewayError::Config {
                        why: format!("{e}"),
                    })
                })?;
                Some(
                    change(
                        "reopening a budget scope",
                        AdminChange::Reopen { scope, now },
                    )
                    .await,
                )
            }
            AdminAction::KeyRevoke { key_id } => Some(
                change(
                    "revoking an API key",
                    AdminChange::Revoke {
                        key_id: key_id.clone(),
                        now,
                    },
                )
                .await,
            ),
            AdminAction::KeyCreate { key_id, .. } => {
                let Some(c) = new_key.filter(|c| c.id == *key_id) else {
                    return Err(fail(GatewayError::Config {
                        why: "an API key's creation must carry the key it creates".into(),
                    }));
                };
                Some(
                    change(
                        "creating an API key",
                        AdminChange::CreateKey {
                            credential: c.clone(),
                        },
                    )
                    .await,
                )
            }
            // A change outside the store: the intent alone first, the change once it is
            // committed (below).
            AdminAction::SecretSet { .. } | AdminAction::SecretRemove { .. } => {
                if effect.is_none() {
                    return Err(fail(GatewayError::Config {
                        why: "a secret's change must carry the change it makes".into(),
                    }));
                }
                Some(change("journalling a secret's change", AdminChange::IntentOnly).await)
            }
            _ => None,
        };
        let committed = match changed.transpose() {
            Ok(c) => c,
            Err(e) => {
                if let AdminAction::Kill { reason } = action {
                    // The brake must hold even when the store cannot take it: this process
                    // refuses everything from now on and stops what it runs, until a
                    // release succeeds. The refusal says so.
                    self.set_kill_latch(Some(crate::store::KillState {
                        reason: reason.clone(),
                        by: actor.clone(),
                        at: now,
                    }));
                    self.cancel_all(&format!("kill switch: {reason}"));
                    let mut s = fail(e);
                    s.reason = format!(
                        "{} (not stored: the kill switch holds in this process only, until \
                         it is released there)",
                        s.reason
                    );
                    return Err(s);
                }
                return Err(fail(e));
            }
        };
        if let (AdminAction::Kill { .. } | AdminAction::Resume, Some(_)) = (action, &committed) {
            // The store holds the switch's state again.
            self.set_kill_latch(None);
        }
        ctx.committed_at = committed.as_ref().map(|c| c.at);
        let changed = committed.map(|c| c.change);
        // The intent was written with the change: the record closes it.
        ctx.admitted = changed.as_ref().is_some_and(AdminChanged::changed);
        match (action, changed) {
            (AdminAction::Kill { reason }, _) => {
                self.cancel_all(&format!("kill switch: {reason}"));
            }
            (
                AdminAction::Approve { .. } | AdminAction::Deny { .. },
                Some(AdminChanged::Decided(a)),
            ) => {
                // An approval is the tenant's: the record names the tenant it belonged to.
                rec.tenant_id = Some(a.tenant.clone());
            }
            (AdminAction::BudgetReopen { scope }, Some(AdminChanged::Reopened(false))) => {
                return Err(fail(GatewayError::Config {
                    why: format!("budget scope `{scope}` is not closed"),
                }));
            }
            (AdminAction::BudgetReopen { .. }, Some(AdminChanged::Reopened(true))) => {}
            (AdminAction::KeyRevoke { key_id }, Some(AdminChanged::Revoked(found))) => {
                let Some(c) = found else {
                    return Err(fail(GatewayError::KeyNotFound { id: key_id.clone() }));
                };
                rec.tenant_id = Some(c.tenant);
            }
            (
                AdminAction::SecretSet { .. } | AdminAction::SecretRemove { .. },
                Some(AdminChanged::Done),
            ) => {
                let Some(effect) = effect else {
                    return Err(fail(GatewayError::Config {
                        why: "a secret's change must carry the change it makes".into(),
                    }));
                };
                // A small file, written atomically and synced.
                match tokio::task::spawn_blocking(effect).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(fail(e)),
                    Err(e) => {
                        return Err(fail(GatewayError::Config {
                            why: format!("changing the secrets failed: {e}"),
                        }))
                    }
                }
            }
            (AdminAction::KeyCreate { tenant, .. }, Some(AdminChanged::Created)) => {
                rec.tenant_id = Some(tenant.clone())
            }
            (
                AdminAction::Approve { .. }
                | AdminAction::Deny { .. }
                | AdminAction::BudgetReopen { .. }
                | AdminAction::KeyRevoke { .. }
                | AdminAction::KeyCreate { .. }
                | AdminAction::SecretSet { .. }
                | AdminAction::SecretRemove { .. },
                _,
            ) => {
                return Err(fail(GatewayError::Config {
                    why: "the store answered an operator action with another's result".into(),
                }))
            }
            // Resume, and the actions whose effect is outside the store and made by the
            // caller just before (a policy or audit key swapped): their record only.
            _ => {}
        }
        rec.verdict = Verdict::Allow;
        rec.layer = Layer::Sandbox;
        rec.status = OperationStatus::Ok;
        rec.reason = reason(action, &actor);
        Ok((None, Some(serde_json::to_value(action).unwrap_or_default())))
    }
}

/// The record of an operator action whose process died after its change and before its
/// record: its intent was written in the change's transaction, so it took effect.
pub(crate) fn recovered(op: &Operation, rec: &mut OperationRecord) -> bool {
    let OperationArgs::Admin { action } = &op.args else {
        return false;
    };
    let actor = op.principal.agent.as_deref().unwrap_or("unknown");
    if let AdminAction::Approve { approval_id, .. } | AdminAction::Deny { approval_id, .. } = action
    {
        rec.approval_id = Some(approval_id.clone());
        rec.approver = Some(actor.to_string());
    }
    rec.layer = Layer::Sandbox;
    if let AdminAction::SecretSet { .. } | AdminAction::SecretRemove { .. } = action {
        // Its intent was committed before the change (a file): it may not have been made.
        rec.status = OperationStatus::Interrupted;
        rec.reason = format!(
            "{} may not have taken effect (recorded at recovery: the process stopped after its \
             intent and before its record; `sandboxio secrets list` shows what is stored)",
            reason(action, actor)
        );
        return true;
    }
    rec.status = OperationStatus::Ok;
    rec.reason = format!(
        "{} (recorded at recovery: the process stopped after the change and before its record)",
        reason(action, actor)
    );
    true
}

impl Gateway {
    /// The tenant an operator action recorded at recovery belonged to: the key's, or the
    /// approval's, as its own record would have said (else the action's principal's).
    pub(super) async fn admin_tenant(&self, op: &Operation) -> Option<String> {
        let OperationArgs::Admin { action } = &op.args else {
            return None;
        };
        match action.clone() {
            AdminAction::KeyRevoke { key_id } => self
                .on_store("reading a key", move |s, _| s.credential(&key_id))
                .await
                .ok()
                .flatten()
                .map(|c| c.tenant),
            AdminAction::Approve { approval_id, .. } | AdminAction::Deny { approval_id, .. } => {
                self.on_store("reading an approval", move |s, _| {
                    s.get_approval(&approval_id)
                })
                .await
                .ok()
                .flatten()
                .map(|a| a.tenant)
            }
            _ => None,
        }
    }
}

/// What an operator action did, in words (its record's reason).
fn reason(action: &AdminAction, actor: &str) -> String {
    match action {
        AdminAction::Kill { reason } => format!("kill switch engaged by {actor}: {reason}"),
        AdminAction::Resume => format!("kill switch released by {actor}"),
        AdminAction::Approve { approval_id, .. } => {
            format!("approval `{approval_id}` approved by {actor}")
        }
        AdminAction::Deny { approval_id, .. } => {
            format!("approval `{approval_id}` denied by {actor}")
        }
        AdminAction::PolicyReload { digest } => {
            format!("policy reloaded by {actor} (digest {digest})")
        }
        AdminAction::BudgetReopen { scope } => {
            format!("budget scope `{scope}` reopened by {actor}")
        }
        AdminAction::KeyCreate { key_id, .. } => format!("API key `{key_id}` created by {actor}"),
        AdminAction::KeyRevoke { key_id } => format!("API key `{key_id}` revoked by {actor}"),
        AdminAction::SecretSet { name, hosts } => format!(
            "secret `{name}` set by {actor}, bound to {}",
            hosts.join(", ")
        ),
        AdminAction::SecretRemove { name } => format!("secret `{name}` removed by {actor}"),
        AdminAction::KeyRotate { key_id } => {
            format!("audit key rotated by {actor} (new key {key_id})")
        }
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
