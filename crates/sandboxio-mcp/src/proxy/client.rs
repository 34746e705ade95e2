//! The MCP client sandboxio is to an upstream: it declares no capabilities of its own
//! (no sampling, roots or elicitation reach the upstream through the proxy), speaks the
//! 2025-11-25 revision (plain `list_changed` notifications), turns the upstream's
//! `notifications/tools/list_changed` into a fresh listing (`Upstream::refresh`), and
//! passes its resources' and prompts' `list_changed` on to every downstream session, and
//! its `notifications/resources/updated` to the sessions subscribed to that resource.

use std::sync::Weak;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};

use super::upstream::Upstream;
use super::Changed;

#[derive(Clone)]
pub struct UpstreamClient {
    pub(crate) upstream: Weak<Upstream>,
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("sandboxio-proxy", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        let Some(up) = self.upstream.upgrade() else {
            return;
        };
        // Not on the connection's own task: the refresh sends a request on it.
        tokio::spawn(async move {
            up.refresh().await;
        });
    }

    async fn on_resource_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(up) = self.upstream.upgrade() {
            up.tell(Changed::Resources);
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        if let Some(up) = self.upstream.upgrade() {
            up.resource_updated(&params.uri);
        }
    }

    async fn on_prompt_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(up) = self.upstream.upgrade() {
            up.forget_prompts();
            up.tell(Changed::Prompts);
        }
    }
}
