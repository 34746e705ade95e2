//! sandboxio as an MCP proxy: the tools of each `[[mcp.upstream]]` are offered as
//! `<upstream>__<tool>`, and each call is a `tool_call` operation through the gateway's
//! chain (policy with argument matchers, rate limits, budgets, approvals, one record with
//! the arguments redacted; the result redacted once by the gateway before it is returned).
//!
//! Layout: `upstream` (one server: connection, restarts, timeouts), `launch` (its
//! transport: a sandboxed process or streamable HTTP), `client` (the MCP client we are to
//! it), `pins` and `offer_pins` (description pins of tools, prompts and resources against
//! the rug pull), `forward` (one call, resource read or prompt through the chain),
//! `offers` and `uri` (resources and prompts, namespaced), `subscribe` and
//! `subscriptions` (resource subscriptions through the chain, updates to subscribers). This file holds the set of upstreams and the downstream sessions to tell when
//! the tool list changes.

mod channel_io;
mod client;
pub mod forward;
pub mod launch;
pub mod offer_pins;
mod offers;
pub mod pins;
mod subscribe;
mod subscriptions;
mod trust;
pub mod upstream;
pub mod uri;

use std::sync::{Arc, Mutex};

use rmcp::model::Tool;
use rmcp::service::Peer;
use rmcp::RoleServer;
use sandboxio_config::UpstreamSection;
use sandboxio_core::ExecRequest;
use sandboxio_gateway::Gateway;

use pins::{Pins, Shown};
pub use trust::trust;
pub use upstream::{CallError, Upstream};

/// Separates an upstream's name from its tool's name.
pub const SEPARATOR: &str = "__";
/// Marks a tool that changed since it was approved: the approved definition follows.
pub const CHANGED_MARK: &str = "[sandboxio: this tool changed since it was approved; shown as approved; calls are refused until a person approves the change] ";
/// Marks a tool first seen after its upstream's first listing (withheld until approved).
pub const NEW_MARK: &str = "[sandboxio: a tool new since its upstream was first listed; withheld; calls are refused until a person approves it] ";

/// The downstream MCP sessions to tell about list changes, and the pins.
pub struct Notifier {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    pub(crate) pins: Pins,
    pub(crate) subscriptions: subscriptions::Subscriptions,
}

impl Notifier {
    /// Pins every tool of a fresh listing; a changed or new unapproved tool is logged.
    fn observe(&self, up: &Upstream) {
        let items = up
            .tools()
            .iter()
            .map(|t| {
                (
                    format!("{}{SEPARATOR}{}", up.name(), t.name),
                    pins::observed(t),
                )
            })
            .collect();
        let prefix = format!("{}{SEPARATOR}", up.name());
        for (name, seen) in self.pins.observe_listing(&prefix, items) {
            offer_pins::warn_seen(&name, &seen);
        }
    }

    /// Sends `notifications/tools/list_changed` to every downstream session still open.
    fn list_changed(&self) {
        self.tell(Changed::Tools);
    }

    /// Sends the `list_changed` notification of `what` to every downstream session still
    /// open (an upstream said its list changed).
    pub(crate) fn tell(&self, what: Changed) {
        let peers = match self.peers.lock() {
            Ok(mut p) => {
                p.retain(|x| !x.is_transport_closed());
                p.clone()
            }
            Err(_) => return,
        };
        for p in peers {
            tokio::spawn(async move {
                let _ = match what {
                    Changed::Tools => p.notify_tool_list_changed().await,
                    Changed::Resources => p.notify_resource_list_changed().await,
                    Changed::Prompts => p.notify_prompt_list_changed().await,
                };
            });
        }
    }
}

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Changed {
    Tools,
    Resources,
    Prompts,
}

/// Every upstream, in configuration order.
pub struct Proxy {
    upstreams: Vec<Arc<Upstream>>,
    notifier: Arc<Notifier>,
}

impl Proxy {
    pub fn new(
        gw: Arc<Gateway>,
        base: ExecRequest,
        upstreams: &[UpstreamSection],
        pins: Pins,
    ) -> Arc<Proxy> {
        let notifier = Arc::new(Notifier {
            peers: Mutex::new(Vec::new()),
            pins,
            subscriptions: subscriptions::Subscriptions::default(),
        });
        let upstreams = upstreams
            .iter()
            .map(|u| {
                Upstream::new(
                    u.clone(),
                    gw.clone(),
                    base.clone(),
                    Arc::downgrade(&notifier),
                )
            })
            .collect();
        Arc::new(Proxy {
            upstreams,
            notifier,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.upstreams.is_empty()
    }

    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    pub fn pins(&self) -> &Pins {
        &self.notifier.pins
    }

    /// A downstream session to tell when the list changes.
    pub fn subscribe(&self, peer: Peer<RoleServer>) {
        if let Ok(mut p) = self.notifier.peers.lock() {
            p.retain(|x| !x.is_transport_closed());
            p.push(peer);
        }
    }

    /// The namespaced tools of every upstream. Upstreams never listed are started first,
    /// all at once, each within its own start timeout; one that does not come up is left
    /// out (and tried again at the next listing).
    pub async fn tools(&self) -> Vec<Tool> {
        let pending: Vec<_> = self
            .upstreams
            .iter()
            .filter(|u| !u.listed())
            .map(|u| {
                let u = u.clone();
                tokio::spawn(async move {
                    if let Err(e) = u.ensure_listed().await {
                        tracing::warn!(upstream = %u.name(), code = e.code(), "MCP upstream unavailable: {e}");
                    }
                })
            })
            .collect();
        for p in pending {
            let _ = p.await;
        }
        let mut out = Vec::new();
        for u in &self.upstreams {
            for t in u.tools() {
                let name = format!("{}{SEPARATOR}{}", u.name(), t.name);
                out.push(shown_tool(&self.notifier.pins, name, t));
            }
        }
        out
    }

    /// The upstream and its own tool name for a namespaced name.
    pub fn find(&self, name: &str) -> Option<(Arc<Upstream>, String)> {
        let (up, tool) = name.split_once(SEPARATOR)?;
        if tool.is_empty() {
            return None;
        }
        self.upstreams
            .iter()
            .find(|u| u.name() == up)
            .map(|u| (u.clone(), tool.to_string()))
    }

    /// Ends every upstream and waits (each at most `within`) until their processes'
    /// operations have returned and been recorded.
    pub async fn shutdown(&self, within: std::time::Duration) {
        let all: Vec<_> = self
            .upstreams
            .iter()
            .map(|u| {
                let u = u.clone();
                tokio::spawn(async move { u.shutdown(within).await })
            })
            .collect();
        for a in all {
            let _ = a.await;
        }
    }

    /// Ends every upstream (their process trees with them).
    pub fn stop(&self) {
        for u in &self.upstreams {
            u.stop();
        }
    }
}

/// A tool as the agent sees it: as listed, or, while a change is unapproved, the approved
/// definition (marked), or withheld (marked, nothing of the upstream's text) when none is
/// kept or the tool is new.
fn shown_tool(pins: &Pins, name: String, listed: Tool) -> Tool {
    let trust = format!("(`sandboxio mcp trust {name}`) ");
    let withheld = |mark: &str| {
        Tool::new(
            name.clone(),
            format!("{mark}{trust}"),
            Arc::new(serde_json::Map::from_iter([(
                "type".to_string(),
                serde_json::Value::String("object".into()),
            )])),
        )
    };
    match pins.shown(&name) {
        Shown::AsListed => {
            let mut t = listed;
            t.name = name.into();
            t
        }
        Shown::Approved(v) => match serde_json::from_value::<Tool>(v) {
            Ok(mut t) => {
                let d = t.description.as_deref().unwrap_or_default();
                t.description = Some(format!("{CHANGED_MARK}{trust}{d}").into());
                t.name = name.into();
                t
            }
            Err(_) => withheld(CHANGED_MARK),
        },
        Shown::Withheld => withheld(CHANGED_MARK),
        Shown::New => withheld(NEW_MARK),
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}
