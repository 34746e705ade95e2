//! The MCP server: one handler per MCP session (stdio: the process; HTTP: each
//! `Mcp-Session-Id`), holding that session's sandboxes. Every tool call becomes one
//! operation through the gateway's chain (`call.rs`).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandboxio_core::{ExecRequest, Principal};
use sandboxio_gateway::{Gateway, Runtime};

use crate::catalog::{self, ToolName};
use crate::proxy::pins::Pins;
use crate::proxy::Proxy;
use crate::sessions::Sandboxes;

/// The newest protocol revision served: later ones forbid the server-to-client requests
/// (elicitation) that an ask uses.
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// What every handler is built from: the runtime's gateway and sandbox settings.
#[derive(Clone)]
pub struct McpOptions {
    pub gateway: Arc<Gateway>,
    /// The configured sandbox request (network, environment allowlist); limits unset.
    pub exec: ExecRequest,
    /// Where session workspaces are created (the system temp dir by default).
    pub work_root: Option<PathBuf>,
    /// How long an ask waits (elicitation included) before it is denied.
    pub approval_timeout: std::time::Duration,
    /// The upstream MCP servers whose tools are offered too (`[[mcp.upstream]]`).
    pub proxy: Option<Arc<Proxy>>,
    /// Whether a stdio client's answer to an elicitation may approve an ask
    /// (`[mcp] elicitation_approvals`: a client a person operates; off by default, as the
    /// agent asking would otherwise approve itself). Over HTTP the key's `approve` scope
    /// decides instead.
    pub elicitation_approvals: bool,
    /// The tenants' sandbox quota the sessions share (HTTP: with the HTTP API's).
    pub quota: Option<Arc<crate::sessions::Quota>>,
    /// The most MCP sessions over HTTP one tenant, and the server, may hold at once.
    pub max_sessions_per_tenant: usize,
    pub max_sessions: usize,
    /// How long an HTTP MCP session may stay unused before it is closed.
    pub session_idle: std::time::Duration,
}

impl McpOptions {
    /// The options of a runtime, with a proxy for its `[[mcp.upstream]]` entries (their
    /// description pins in the state directory; a damaged pins file is an error).
    pub fn from_runtime(rt: &Runtime) -> Result<McpOptions, crate::McpError> {
        let upstreams = &rt.config().mcp.upstream;
        let proxy = if upstreams.is_empty() {
            None
        } else {
            let pins = Pins::open(rt.state_dir())?;
            Some(Proxy::new(
                rt.gateway().clone(),
                rt.exec_request(),
                upstreams,
                pins,
            ))
        };
        Ok(McpOptions {
            gateway: rt.gateway().clone(),
            exec: rt.exec_request(),
            work_root: rt.config().sandbox.work_root.clone(),
            approval_timeout: rt.gateway().config().approval_timeout,
            proxy,
            elicitation_approvals: rt.config().mcp.elicitation_approvals,
            quota: None,
            max_sessions_per_tenant: crate::http::MAX_SESSIONS_PER_TENANT,
            max_sessions: crate::http::MAX_SESSIONS,
            session_idle: crate::http::SESSION_IDLE,
        })
    }
}

/// Who calls: the local user of `sandboxio mcp`, or an HTTP caller whose credential the
/// server checked (its tenant and scopes).
#[derive(Clone)]
pub enum Front {
    Local(Principal),
    Http(sandboxio_server::AppState),
}

/// The handler of one MCP session.
pub struct SandboxioMcp {
    pub(crate) opts: McpOptions,
    pub(crate) front: Front,
    pub(crate) sandboxes: Arc<Sandboxes>,
    /// Tells this MCP session apart from the others (its resource subscriptions).
    pub(crate) session: u64,
    /// Held while the session lives (HTTP: its owner is forgotten when it is dropped).
    pub(crate) lease: Option<Arc<()>>,
}

impl SandboxioMcp {
    pub fn new(opts: McpOptions, front: Front) -> SandboxioMcp {
        static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let sandboxes = Arc::new(
            Sandboxes::new(opts.gateway.clone(), opts.work_root.clone())
                .with_quota(opts.quota.clone()),
        );
        SandboxioMcp {
            opts,
            front,
            sandboxes,
            session: SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            lease: None,
        }
    }
}

impl ServerHandler for SandboxioMcp {
    fn get_info(&self) -> ServerConfig {
        let caps = match &self.opts.proxy {
            Some(_) => ServerCapabilities::builder()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
            None => ServerCapabilities::builder().enable_tools().build(),
        };
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("sandboxio", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(PROTOCOL)
            .with_instructions(
                "Run code and commands in sandboxes behind a policy gateway. Each call is decided \
                 by policy (allow, ask, deny), may wait for a person's approval, and leaves one \
                 audit record. A refusal is a tool error whose structured content names the layer, \
                 the rules and the reason.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&PROTOCOL))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = catalog::tools().map_err(|e| ErrorData::internal_error(e, None))?;
        if let Some(p) = &self.opts.proxy {
            tools.extend(p.tools().await);
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let items = match &self.opts.proxy {
            Some(p) => p.resources().await,
            None => Vec::new(),
        };
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let items = match &self.opts.proxy {
            Some(p) => p.resource_templates().await,
            None => Vec::new(),
        };
        Ok(ListResourceTemplatesResult::with_all_items(items))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let found = match self.opts.proxy.as_ref() {
            Some(p) => p
                .resolve_resource(&request.uri)
                .map_err(|e| crate::proxy::forward::mcp_error(&self.redacted_error(e)))?,
            None => None,
        };
        let Some((up, decoded, own)) = found else {
            // The spec's "resource not found".
            return Err(ErrorData::resource_not_found(
                format!("no resource `{}`", self.redacted_uri(&request.uri)),
                Some(serde_json::json!({ "code": "SBX_E1916" })),
            ));
        };
        let name = format!("{}__{}", up.name(), crate::proxy::forward::READ_RESOURCE);
        // Refused when the resource (in either spelling) or a template it could expand
        // changed; policy and the upstream see the normal form only.
        let pin = self.offer_pin(&up, &[decoded.as_str(), own.as_str()]);
        self.check_offer(&pin, &name, serde_json::json!({ "uri": own }), &context)
            .await?;
        Ok(self.proxy_read(up, own, context).await?.into())
    }

    #[allow(deprecated)] // resources/subscribe is part of the revisions served (to 2025-11-25)
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.proxy_subscription(&request.uri, true, context).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.proxy_subscription(&request.uri, false, context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let items = match &self.opts.proxy {
            Some(p) => p.prompts().await,
            None => Vec::new(),
        };
        Ok(ListPromptsResult::with_all_items(items))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let found = self.opts.proxy.as_ref().and_then(|p| p.find(&request.name));
        let Some((up, own)) = found else {
            return Err(ErrorData::invalid_params(
                format!("no prompt `{}`", withheld_name(&request.name)),
                Some(serde_json::json!({ "code": "SBX_E1916" })),
            ));
        };
        // Only a prompt of the upstream's last prompt listing, exactly.
        match up.has_prompt(&own).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(ErrorData::invalid_params(
                    format!("no prompt `{}`", withheld_name(&request.name)),
                    Some(serde_json::json!({ "code": "SBX_E1916" })),
                ))
            }
            Err(e) => {
                return Err(crate::proxy::forward::mcp_error(
                    &crate::McpError::Gateway {
                        code: e.code(),
                        why: format!("upstream `{}`: {e}", up.name()),
                    },
                ))
            }
        }
        let name = format!("{}__{}", up.name(), crate::proxy::forward::GET_PROMPT);
        let pin = crate::proxy::offer_pins::prompt_pin(&request.name);
        let arguments = serde_json::json!({ "name": own, "arguments": request.arguments });
        self.check_offer(&pin, &name, arguments, &context).await?;
        Ok(self.proxy_prompt(up, own, request, context).await?.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(p) = &self.opts.proxy {
            p.subscribe(context.peer.clone());
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let upstream = self.opts.proxy.as_ref().and_then(|p| p.find(&request.name));
        if let Some((up, tool)) = upstream {
            // Only a name of the upstream's last listing, exactly: a variant (case,
            // spaces, invisible characters) that a lenient upstream would take for a
            // listed tool never reaches it, so pins and exact-name rules hold.
            return match up.has_tool(&tool).await {
                Ok(true) => Ok(self.proxy_call(up, tool, request, context).await.into()),
                Ok(false) => Err(unknown_tool(&withheld_name(&request.name))),
                Err(e) => Ok(crate::answer::error(&crate::McpError::Gateway {
                    code: e.code(),
                    why: format!("upstream `{}`: {e}", up.name()),
                })
                .into()),
            };
        }
        let Some(tool) = ToolName::parse(&request.name) else {
            return Err(unknown_tool(&withheld_name(&request.name)));
        };
        Ok(self.call(tool, request, context).await.into())
    }
}

/// An unknown tool: a protocol error (the spec's -32602), with our code.
impl SandboxioMcp {
    /// `s` as the records have it (the gateway's redaction): a refusal before the chain
    /// echoes what the client sent, and rmcp logs it, so a credential in a name or URI
    /// must not reach the error text or the log in clear. Withheld whole when the
    /// redactor cannot be built.
    pub(crate) fn redacted(&self, s: &str) -> String {
        match self.opts.gateway.redaction().base() {
            Ok(r) => r.redact_str(s).into_owned(),
            Err(_) => format!("[{} bytes withheld]", s.len()),
        }
    }

    /// A namespaced URI as the records would have it: the upstream's URI decoded (an
    /// encoded credential would slip past the redactor), then redacted.
    pub(crate) fn redacted_uri(&self, wrapped: &str) -> String {
        match crate::proxy::uri::unwrap(wrapped) {
            Some((up, own)) => format!("{}{up}/{}", crate::proxy::uri::SCHEME, self.redacted(&own)),
            None => self.redacted(wrapped),
        }
    }

    /// `e` with the URI it echoes redacted.
    pub(crate) fn redacted_error(&self, e: crate::McpError) -> crate::McpError {
        match e {
            crate::McpError::AmbiguousUri { uri, why } => crate::McpError::AmbiguousUri {
                uri: self.redacted_uri(&uri),
                why,
            },
            other => other,
        }
    }
}

/// An unknown tool or prompt name as echoed: its length only (a name is free text to
/// the client, and the redactor does not know every credential's shape).
fn withheld_name(name: &str) -> String {
    format!("<a name of {} characters>", name.chars().count())
}

fn unknown_tool(name: &str) -> ErrorData {
    let e = crate::McpError::UnknownTool { name: name.into() };
    ErrorData::invalid_params(
        e.to_string(),
        Some(serde_json::json!({ "code": sandboxio_core::ErrorCode::code(&e) })),
    )
}
