//! An `ask` over MCP. The gateway creates the pending approval (bound to the request's
//! fingerprint) and waits for a decision in the store until the approval timeout. While it
//! waits, the client's user may be asked through elicitation (approve or deny, with a
//! reason), the answer written as a recorded admin action like a person's from the CLI,
//! but only when whoever answers may approve: over HTTP the session's API key must hold the
//! `approve` scope (the session is bound to that key), over stdio the operator must have
//! set `[mcp] elicitation_approvals = true` (a client a person operates). Otherwise the
//! agent asking would approve itself: nothing is offered, and the approval stays pending for
//! `sandboxio approvals approve ID` or the HTTP API (the id is in the call's answer, and,
//! when the client asked for progress, in a progress notification sent at once). When
//! the client cancels the call the pending approval is denied, so the wait ends at once.

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ElicitationError, ElicitationMode, RequestContext};
use rmcp::RoleServer;
use sandboxio_core::AdminAction;
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::store::Approval;
use sandboxio_gateway::Gateway;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::handler::Front;

/// What the user answers in the elicitation form.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ApprovalForm {
    /// Approve this exact request?
    pub approve: bool,
    /// Why (recorded with the decision).
    #[serde(default)]
    pub reason: String,
}

rmcp::elicit_safe!(ApprovalForm);

/// The text the user sees.
pub fn prompt(a: &Approval) -> String {
    format!(
        "sandboxio asks for approval `{}`: {}\nrequest: {}\n{}Approve this exact request? (also: `sandboxio approvals approve {}`)",
        a.id,
        a.reason,
        a.operation,
        if a.rationale.is_empty() {
            String::new()
        } else {
            format!("rationale: {}\n", a.rationale)
        },
        a.id
    )
}

/// What a call waiting for a person says on its progress token: the approval's id and
/// how to answer it.
pub fn waiting(a: &Approval) -> String {
    format!(
        "waiting for approval `{id}` ({reason}): approve with `sandboxio approvals approve {id}` or POST /v1/approvals/{id}/approve, deny with `sandboxio approvals deny {id}`",
        id = a.id,
        reason = a.reason,
    )
}

/// What answering an ask over MCP needs: the client's peer, the call's cancellation, the
/// gateway that records the decision.
pub struct Asker {
    peer: rmcp::Peer<RoleServer>,
    ct: tokio_util::sync::CancellationToken,
    client: String,
    tenant: String,
    gw: Arc<Gateway>,
    timeout: Duration,
    /// Who an answer through elicitation is recorded as; none: this client may not
    /// approve, and is not asked.
    approver: Option<String>,
    /// The call's progress token, if the client sent one: an ask nobody in the client
    /// answers is announced on it, with the approval's id and how to answer it.
    progress: Option<rmcp::model::ProgressToken>,
}

impl crate::handler::SandboxioMcp {
    /// The asker of the call `cx` by `tenant`.
    pub(crate) fn asker(&self, cx: &RequestContext<RoleServer>, tenant: String) -> Asker {
        let peer = cx.peer.clone();
        let client = peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_else(|| "unknown".into());
        let approver = match &self.front {
            Front::Local(_) => self
                .opts
                .elicitation_approvals
                .then(|| format!("mcp client `{client}` (elicitation)")),
            // The session is bound to the key that opened it: whoever answers holds it.
            Front::Http(_) => crate::http::caller(cx)
                .filter(|c| !c.is_capability() && c.credential.scopes.contains(Scope::Approve))
                .map(|c| format!("{} through mcp client `{client}` (elicitation)", c.name())),
        };
        Asker {
            peer,
            ct: cx.ct.clone(),
            client,
            tenant,
            gw: self.opts.gateway.clone(),
            timeout: self.opts.approval_timeout,
            approver,
            progress: cx.meta.get_progress_token(),
        }
    }
}

/// Runs `call` (a submission that announces its pending approval on the sender paired with
/// `pending`; boxed by the caller: the chain's future is large, and moved by value it
/// would be copied on the worker's stack) while watching, on this task, for the client's cancellation (which cancels
/// `token`, so the chain stops the operation) and for a pending approval (whose
/// elicitation then starts in a task of its own, aborted when the call ends). A call that
/// asks nothing spawns nothing: each spawned task is a possible wake-up of another worker
/// thread, paid on every call before.
pub async fn watched<F: std::future::Future>(
    call: F,
    mut pending: mpsc::UnboundedReceiver<Approval>,
    asker: Asker,
    token: &sandboxio_gateway::CancelToken,
) -> F::Output {
    let ct = asker.ct.clone();
    let mut asker = Some(asker);
    let mut task = None;
    let mut cancelled = false;
    tokio::pin!(call);
    let out = loop {
        tokio::select! {
            out = &mut call => break out,
            Some(a) = pending.recv(), if asker.is_some() => {
                task = asker.take().map(|x| x.start(a));
            }
            _ = ct.cancelled(), if !cancelled => {
                cancelled = true;
                token.cancel("cancelled by the MCP client");
            }
        }
    };
    if let Some(t) = task {
        t.abort();
    }
    out
}

impl Asker {
    /// Offers the pending approval `a` to the client's user (elicitation) when it can, and
    /// otherwise leaves it to a person elsewhere; a cancelled call denies it.
    fn start(self, a: Approval) -> tokio::task::JoinHandle<()> {
        let Asker {
            peer,
            ct,
            client,
            tenant,
            gw,
            timeout,
            approver,
            progress,
        } = self;
        tokio::spawn(async move {
            let elicit = approver.is_some()
                && peer
                    .supported_elicitation_modes()
                    .contains(&ElicitationMode::Form);
            let decide = |approve: bool, actor: String, reason: Option<String>| {
                let gw = gw.clone();
                let tenant = tenant.clone();
                let approval_id = a.id.clone();
                async move {
                    // Someone may have answered meanwhile (the CLI, the API): theirs stands.
                    let pending = matches!(
                        gw.store().get_approval(&approval_id),
                        Ok(Some(x)) if x.state == sandboxio_gateway::store::ApprovalState::Pending
                    );
                    if !pending {
                        return;
                    }
                    let action = if approve {
                        AdminAction::Approve {
                            approval_id,
                            reason,
                        }
                    } else {
                        AdminAction::Deny {
                            approval_id,
                            reason,
                        }
                    };
                    if let Err(e) = gw.operator(&tenant, &actor, action).await {
                        tracing::warn!("recording an MCP approval decision failed: {e}");
                    }
                }
            };
            let answer = async {
                if !elicit {
                    if let Some(token) = progress {
                        let note = rmcp::model::ProgressNotificationParam::new(token, 0.0)
                            .with_message(waiting(&a));
                        let _ = peer.notify_progress(note).await;
                    }
                    return None;
                }
                match peer
                    .elicit_with_timeout::<ApprovalForm>(prompt(&a), Some(timeout))
                    .await
                {
                    Ok(Some(f)) => Some((f.approve, (!f.reason.is_empty()).then_some(f.reason))),
                    Err(ElicitationError::UserDeclined) => {
                        Some((false, Some("declined in the MCP client".into())))
                    }
                    // Dismissed, unsupported or failed: a person may still answer elsewhere.
                    Ok(None) | Err(_) => None,
                }
            };
            let actor = approver.unwrap_or_default();
            tokio::select! {
                got = answer => {
                    if let Some((approve, reason)) = got {
                        decide(approve, actor, reason).await;
                    } else {
                        // Waits for a person until the gateway's timeout; a cancel still ends it.
                        ct.cancelled().await;
                        decide(false, format!("mcp client `{client}`"), Some("the call was cancelled".into())).await;
                    }
                }
                _ = ct.cancelled() => {
                    decide(false, format!("mcp client `{client}`"), Some("the call was cancelled".into())).await;
                }
            }
        })
    }
}
