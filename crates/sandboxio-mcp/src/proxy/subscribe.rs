//! `resources/subscribe` and `resources/unsubscribe` of an upstream's resource, and the
//! refusal of prompts and resources whose description changed since it was approved.
//!
//! A subscribe is the operation `tool_call` of `<upstream>__resources/subscribe` with
//! `{"uri": <the upstream's own URI>}` (an unsubscribe: `<upstream>__resources/unsubscribe`):
//! decided by policy (`args` matchers), rate-limited, approved where asked, recorded once.
//! Carried out once every layer said yes: the session is added to the subscribers of that
//! resource, then the upstream is asked (at the first subscriber; it is told to unsubscribe
//! when the last one leaves). Each `notifications/resources/updated` of the upstream then
//! reaches the subscribed sessions under the namespaced URI (`subscriptions.rs`). A refusal
//! is the JSON-RPC error `-32001` with the structured denial, like a refused read.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer};
use sandboxio_core::{OperationStatus, Principal, Verdict};
use sandboxio_gateway::{CancelToken, Tool, ToolError};

use super::forward::{denied_error, mcp_error, upstream_call};
use super::upstream::Upstream;
use super::{offer_pins, Notifier, SEPARATOR};
use crate::answer;
use crate::error::McpError;
use crate::handler::SandboxioMcp;

/// The operation's tool name for a subscription to an upstream's resource.
pub const SUBSCRIBE: &str = "resources/subscribe";
/// The operation's tool name for ending one.
pub const UNSUBSCRIBE: &str = "resources/unsubscribe";

/// Carries out a subscribe or unsubscribe once every layer said yes.
struct Subscription {
    upstream: Arc<Upstream>,
    notifier: Arc<Notifier>,
    own: String,
    on: bool,
    session: u64,
    peer: Peer<RoleServer>,
    cancel: CancelToken,
}

fn failed(up: &Upstream, e: super::CallError) -> ToolError {
    ToolError {
        message: format!("upstream `{}`: {e}", up.name()),
        transient: false,
        code: Some(e.code()),
    }
}

#[async_trait]
impl Tool for Subscription {
    async fn call(&self, _arguments: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        let subs = &self.notifier.subscriptions;
        let name = self.upstream.name();
        if self.on {
            // Subscribed here first, so an update sent right after the upstream's answer
            // is not lost.
            subs.add(name, &self.own, self.session, self.peer.clone());
            if let Err(e) = self
                .upstream
                .subscription(&self.own, true, &self.cancel)
                .await
            {
                subs.remove(name, &self.own, self.session);
                return Err(failed(&self.upstream, e));
            }
            return Ok(serde_json::json!({ "subscribed": true }));
        }
        let was = subs.has(name, &self.own, self.session);
        let last = subs.remove(name, &self.own, self.session);
        if was && last {
            self.upstream
                .subscription(&self.own, false, &self.cancel)
                .await
                .map_err(|e| failed(&self.upstream, e))?;
        }
        Ok(serde_json::json!({ "subscribed": false, "upstream_told": was && last }))
    }
}

impl SandboxioMcp {
    /// `resources/subscribe` (`on`) or `resources/unsubscribe` of a namespaced URI.
    pub(crate) async fn proxy_subscription(
        &self,
        wrapped: &str,
        on: bool,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let proxy = self.opts.proxy.clone();
        let found = match proxy.as_ref() {
            Some(p) => p
                .resolve_resource(wrapped)
                .map_err(|e| mcp_error(&self.redacted_error(e)))?,
            None => None,
        };
        let (Some(proxy), Some((upstream, decoded, own))) = (proxy, found) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource `{}`", self.redacted_uri(wrapped)),
                Some(serde_json::json!({ "code": "SBX_E1916" })),
            ));
        };
        let name = format!(
            "{}{SEPARATOR}{}",
            upstream.name(),
            if on { SUBSCRIBE } else { UNSUBSCRIBE }
        );
        let arguments = serde_json::json!({ "uri": own });
        let who = self
            .proxy_principal(&name, &cx)
            .await
            .map_err(|e| mcp_error(&e))?;
        if on {
            let pin = self.offer_pin(&upstream, &[decoded.as_str(), own.as_str()]);
            self.refuse_if_changed(&who, &pin, &name, &arguments)
                .await?;
        }
        let token = CancelToken::new();
        let mut sub = upstream_call(&who, upstream.name(), name, arguments, &token);
        sub.tool = Some(Arc::new(Subscription {
            upstream,
            notifier: proxy.notifier.clone(),
            own,
            on,
            session: self.session,
            peer: cx.peer.clone(),
            cancel: token.clone(),
        }));
        let asker = self.asker(&cx, who.tenant.clone());
        let (pending, asks) = tokio::sync::mpsc::unbounded_channel();
        sub.approval_pending = Some(pending);
        let out =
            crate::ask::watched(Box::pin(self.opts.gateway.submit(sub)), asks, asker, &token).await;
        let o = out.map_err(|e| {
            mcp_error(&McpError::Gateway {
                code: sandboxio_core::ErrorCode::code(&e),
                why: e.to_string(),
            })
        })?;
        if o.record.verdict == Verdict::Allow && o.record.status == OperationStatus::Ok {
            Ok(())
        } else {
            Err(denied_error(&answer::denial(&o.record)))
        }
    }

    /// The pin a read or subscription of `upstream`'s resource is refused by when it
    /// changed: the resource's, keyed by the canonical namespaced URI whatever spelling
    /// the client sent (`owns`: the upstream's URI decoded, then normalised), or a changed
    /// template the URI could expand.
    pub(crate) fn offer_pin(&self, upstream: &Upstream, owns: &[&str]) -> String {
        let changed = self
            .opts
            .proxy
            .as_ref()
            .and_then(|p| offer_pins::changed_for_uri(p.pins(), upstream.name(), owns));
        let own = owns.last().copied().unwrap_or_default();
        changed.unwrap_or_else(|| offer_pins::resource_pin(&super::uri::wrap(upstream.name(), own)))
    }

    /// Refuses, with one record, a request about a prompt or resource (pin `pin`) whose
    /// description changed since it was approved.
    pub(crate) async fn refuse_if_changed(
        &self,
        who: &Principal,
        pin: &str,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(), ErrorData> {
        let Some(proxy) = self.opts.proxy.as_ref() else {
            return Ok(());
        };
        if !proxy.pins().is_changed(pin) {
            return Ok(());
        }
        let reason = format!(
            "`{pin}` changed since it was approved; run `sandboxio mcp trust {pin}` after reading it"
        );
        let rec = self.refused_changed(who, name, arguments, reason).await;
        Err(denied_error(&answer::denial(&rec)))
    }

    /// The principal of a prompt get or resource read, refused when what it names changed
    /// since it was approved.
    pub(crate) async fn check_offer(
        &self,
        pin: &str,
        name: &str,
        arguments: serde_json::Value,
        cx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let pinned = self
            .opts
            .proxy
            .as_ref()
            .is_some_and(|p| p.pins().is_changed(pin));
        if !pinned {
            return Ok(());
        }
        let who = self
            .proxy_principal(name, cx)
            .await
            .map_err(|e| mcp_error(&e))?;
        self.refuse_if_changed(&who, pin, name, &arguments).await
    }
}
