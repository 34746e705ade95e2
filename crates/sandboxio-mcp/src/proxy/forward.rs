//! One proxied request: a `tool_call` operation through the whole chain, carried out by
//! the upstream (`Submission::tool`). A `tools/call` is the operation of the namespaced
//! tool with its arguments; a `resources/read` is `<upstream>__resources/read` with
//! `{"uri": <the upstream's own URI>}`; a `prompts/get` is `<upstream>__prompts/get` with
//! `{"name": <its own prompt name>, "arguments": {...}}` (no real tool can be named so:
//! tool names hold no `/`). Policy sees the arguments (`args` matchers); the record keeps
//! them, redacted; the gateway redacts the upstream's result (serialised) once, and that
//! redacted value is what the client receives. What the upstream is asked is read back
//! from the arguments the chain decided on. A call to a tool whose description changed
//! since it was approved is refused before the chain, with its own record.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, GetPromptResult, JsonObject,
    ReadResourceResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use sandboxio_core::{
    Layer, Operation, OperationArgs, OperationRecord, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::{CancelToken, Submission, Tool, ToolError};

use super::upstream::{CallError, Upstream};
use super::{uri, SEPARATOR};
use crate::answer;
use crate::args::Denial;
use crate::error::McpError;
use crate::handler::SandboxioMcp;

/// The operation's tool name for a resource read of an upstream.
pub const READ_RESOURCE: &str = "resources/read";
/// The operation's tool name for a prompt of an upstream.
pub const GET_PROMPT: &str = "prompts/get";
/// The JSON-RPC error code of a resource read or prompt get that a layer refused (the
/// structured denial is the error's data).
pub const DENIED: i32 = -32001;

/// What the upstream is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tool,
    Resource,
    Prompt,
}

/// Carries out one request on the upstream, once every layer said yes.
struct UpstreamTool {
    upstream: Arc<Upstream>,
    kind: Kind,
    /// The upstream's own tool name (for `Kind::Tool`).
    tool: String,
    cancel: CancelToken,
}

fn tool_error(message: String, code: &'static str) -> ToolError {
    ToolError {
        message,
        transient: false,
        code: Some(code),
    }
}

fn object(v: Option<&serde_json::Value>) -> Result<Option<JsonObject>, ToolError> {
    match v {
        Some(serde_json::Value::Object(m)) => Ok(Some(m.clone())),
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(_) => Err(tool_error(
            "the arguments are not a JSON object".into(),
            "SBX_E1901",
        )),
    }
}

fn string<'a>(v: &'a serde_json::Value, key: &str) -> Result<&'a str, ToolError> {
    v.get(key)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| tool_error(format!("`{key}` is not a string"), "SBX_E1901"))
}

impl UpstreamTool {
    fn failed(&self, e: CallError) -> ToolError {
        tool_error(
            format!("upstream `{}`: {e}", self.upstream.name()),
            e.code(),
        )
    }
}

fn kept(v: Result<serde_json::Value, serde_json::Error>) -> Result<serde_json::Value, ToolError> {
    v.map_err(|e| {
        tool_error(
            format!("the upstream's result could not be kept: {e}"),
            "SBX_E1912",
        )
    })
}

#[async_trait]
impl Tool for UpstreamTool {
    async fn call(&self, arguments: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        let up = &self.upstream;
        match self.kind {
            Kind::Tool => {
                let args = object(Some(arguments))?;
                let r = up.call(&self.tool, args, &self.cancel).await;
                kept(serde_json::to_value(r.map_err(|e| self.failed(e))?))
            }
            Kind::Resource => {
                let own = string(arguments, "uri")?;
                let r = up.read_resource(own, &self.cancel).await;
                kept(serde_json::to_value(r.map_err(|e| self.failed(e))?))
            }
            Kind::Prompt => {
                let name = string(arguments, "name")?;
                let args = object(arguments.get("arguments"))?;
                let r = up.get_prompt(name, args, &self.cancel).await;
                kept(serde_json::to_value(r.map_err(|e| self.failed(e))?))
            }
        }
    }
}

/// The submission of one call into an upstream (a tool call, a resource read, a prompt, a
/// subscription): a `tool_call` operation, never retried, labelled with its upstream and
/// cancelled by `token`. The caller sets the tool that carries it out.
pub fn upstream_call(
    who: &Principal,
    upstream: &str,
    tool: String,
    arguments: serde_json::Value,
    token: &CancelToken,
) -> Submission {
    let mut op = Operation::new(who.clone(), OperationArgs::ToolCall { tool, arguments });
    op.idempotent = false;
    let mut sub = Submission::new(op);
    sub.labels
        .insert("mcp.upstream".into(), upstream.to_string());
    sub.cancel = Some(token.clone());
    sub
}

/// A refusal as a JSON-RPC error (for requests without a tool result to carry it).
pub fn denied_error(d: &Denial) -> ErrorData {
    let text = answer::refused(d)
        .content
        .first()
        .and_then(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_else(|| d.reason.clone());
    ErrorData::new(
        rmcp::model::ErrorCode(DENIED),
        text,
        serde_json::to_value(d).ok(),
    )
}

/// A front-end error as a JSON-RPC error carrying its code.
pub fn mcp_error(e: &McpError) -> ErrorData {
    use sandboxio_core::ErrorCode as _;
    ErrorData::invalid_params(
        format!("error[{}]: {e}", e.code()),
        Some(serde_json::json!({ "code": e.code(), "reason": e.to_string() })),
    )
}

impl SandboxioMcp {
    pub(crate) async fn proxy_call(
        &self,
        upstream: Arc<Upstream>,
        tool: String,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let name = request.name.to_string();
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let got = self
            .forward(upstream, Kind::Tool, tool, &name, arguments, &cx)
            .await;
        match got {
            Ok(Ok(v)) => serde_json::from_value::<CallToolResult>(v).unwrap_or_else(|e| {
                answer::error(&McpError::Gateway {
                    code: "SBX_E1912",
                    why: format!("the upstream's result could not be returned: {e}"),
                })
            }),
            Ok(Err(d)) => answer::refused(&d),
            Err(e) => answer::error(&e),
        }
    }

    /// `resources/read` of a namespaced URI: one operation; the contents' URIs are
    /// namespaced again.
    pub(crate) async fn proxy_read(
        &self,
        upstream: Arc<Upstream>,
        own_uri: String,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let name = format!("{}{SEPARATOR}{READ_RESOURCE}", upstream.name());
        let up = upstream.name().to_string();
        let arguments = serde_json::json!({ "uri": own_uri });
        match self
            .forward(
                upstream,
                Kind::Resource,
                String::new(),
                &name,
                arguments,
                &cx,
            )
            .await
        {
            Ok(Ok(mut v)) => {
                if let Some(items) = v.get_mut("contents").and_then(|c| c.as_array_mut()) {
                    for item in items {
                        if let Some(u) = item.get_mut("uri") {
                            if let Some(s) = u.as_str() {
                                *u = serde_json::Value::String(uri::wrap(&up, s));
                            }
                        }
                    }
                }
                serde_json::from_value(v).map_err(|e| {
                    mcp_error(&McpError::Gateway {
                        code: "SBX_E1912",
                        why: format!("the upstream's resource could not be returned: {e}"),
                    })
                })
            }
            Ok(Err(d)) => Err(denied_error(&d)),
            Err(e) => Err(mcp_error(&e)),
        }
    }

    /// `prompts/get` of a namespaced prompt: one operation.
    pub(crate) async fn proxy_prompt(
        &self,
        upstream: Arc<Upstream>,
        own_name: String,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, ErrorData> {
        let name = format!("{}{SEPARATOR}{GET_PROMPT}", upstream.name());
        let arguments = serde_json::json!({
            "name": own_name,
            "arguments": request.arguments.unwrap_or_default(),
        });
        match self
            .forward(upstream, Kind::Prompt, String::new(), &name, arguments, &cx)
            .await
        {
            Ok(Ok(v)) => serde_json::from_value(v).map_err(|e| {
                mcp_error(&McpError::Gateway {
                    code: "SBX_E1912",
                    why: format!("the upstream's prompt could not be returned: {e}"),
                })
            }),
            Ok(Err(d)) => Err(denied_error(&d)),
            Err(e) => Err(mcp_error(&e)),
        }
    }

    /// Submits the operation `name` with `arguments`; the upstream's (redacted) result,
    /// or the denial of the layer that stopped it.
    async fn forward(
        &self,
        upstream: Arc<Upstream>,
        kind: Kind,
        tool: String,
        name: &str,
        arguments: serde_json::Value,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Result<serde_json::Value, Denial>, McpError> {
        let who = self.proxy_principal(name, cx).await?;
        let Some(proxy) = self.opts.proxy.as_ref() else {
            return Err(McpError::UnknownTool { name: name.into() });
        };
        if kind == Kind::Tool && proxy.pins().is_changed(name) {
            let new = proxy.pins().get(name).is_some_and(|p| p.unapproved());
            let reason = if new {
                format!(
                    "`{name}` is new since its upstream was first listed and was never approved; run `sandboxio mcp trust {name}` after reading it (`sandboxio mcp pins`)"
                )
            } else {
                format!(
                    "`{name}` changed since it was approved (description, schemas or annotations); run `sandboxio mcp trust {name}` after reading it (`sandboxio mcp pins`)"
                )
            };
            let rec = self.refused_changed(&who, name, &arguments, reason).await;
            return Ok(Err(answer::denial(&rec)));
        }
        let token = CancelToken::new();
        let mut sub = upstream_call(&who, upstream.name(), name.to_string(), arguments, &token);
        sub.tool = Some(Arc::new(UpstreamTool {
            upstream,
            kind,
            tool,
            cancel: token.clone(),
        }));
        let asker = self.asker(cx, who.tenant.clone());
        let (pending, asks) = tokio::sync::mpsc::unbounded_channel();
        sub.approval_pending = Some(pending);
        let out =
            crate::ask::watched(Box::pin(self.opts.gateway.submit(sub)), asks, asker, &token).await;
        let o = out.map_err(|e| McpError::Gateway {
            code: sandboxio_core::ErrorCode::code(&e),
            why: e.to_string(),
        })?;
        let ran = o.record.verdict == Verdict::Allow && o.record.status == OperationStatus::Ok;
        match (ran, o.tool_output) {
            (true, Some(v)) => Ok(Ok(v)),
            _ => Ok(Err(answer::denial(&o.record))),
        }
    }

    /// Over HTTP, calling an upstream's tool needs the `exec` scope (it runs something
    /// on the caller's behalf).
    pub(crate) async fn proxy_principal(
        &self,
        name: &str,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Principal, McpError> {
        match &self.front {
            crate::handler::Front::Local(p) => Ok(p.clone()),
            crate::handler::Front::Http(state) => {
                let forbidden = |why: String, code: &'static str| McpError::Forbidden {
                    tool: name.into(),
                    why,
                    code,
                };
                let caller = crate::http::caller(cx)
                    .ok_or_else(|| forbidden("no authenticated caller".into(), "SBX_E1907"))?;
                if caller.is_capability() {
                    return Err(forbidden(
                        "capability tokens are for the HTTP API; use an API key".into(),
                        "SBX_E1907",
                    ));
                }
                caller
                    .require(state, sandboxio_gateway::credential::Scope::Exec)
                    .await
                    .map_err(|e| forbidden(e.to_string(), sandboxio_core::ErrorCode::code(&e)))?;
                Ok(Principal::tenant(caller.tenant()))
            }
        }
    }

    /// The one record of a request refused because what it names (a tool, prompt or
    /// resource) changed since it was approved.
    pub(crate) async fn refused_changed(
        &self,
        who: &Principal,
        name: &str,
        arguments: &serde_json::Value,
        reason: String,
    ) -> OperationRecord {
        let id = format!("mcp-{}", unique());
        let mut rec = OperationRecord::new(id, "tool_call");
        rec.tool_name = name.to_string();
        rec.tenant_id = Some(who.tenant.clone());
        rec.agent_id = who.agent.clone();
        rec.backend = "mcp".into();
        rec.arguments = Some(arguments.clone());
        rec.verdict = Verdict::Deny;
        rec.status = OperationStatus::Denied;
        rec.layer = Layer::Admit;
        rec.error_code = Some("SBX_E1911".into());
        rec.reason = reason;
        // The auditor redacts the record (the arguments too) before any sink sees it.
        if let Err(e) = self.opts.gateway.auditor().record(rec.clone()).await {
            tracing::warn!(
                code = sandboxio_core::ErrorCode::code(&e),
                "recording a refused MCP request failed: {e}"
            );
        }
        rec
    }
}

/// An id unique within this host: time, process and a per-process counter.
fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
