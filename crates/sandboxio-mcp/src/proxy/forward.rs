//! One proxied call: a `tool_call` operation (the namespaced tool and its arguments)
//! through the whole chain, carried out by the upstream (`Submission::tool`). Policy sees
//! the arguments (`args` matchers); the record keeps them, redacted; the gateway redacts
//! the upstream's result (the serialised `CallToolResult`) once, and that redacted value
//! is what the client receives. A call to a tool whose description changed since it was
//! approved is refused before the chain, with its own record.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandboxio_core::{
    Layer, Operation, OperationArgs, OperationRecord, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::{CancelToken, Submission, Tool, ToolError};

use super::upstream::Upstream;
use crate::answer;
use crate::error::McpError;
use crate::handler::SandboxioMcp;

/// Carries out one call on the upstream, once every layer said yes.
struct UpstreamTool {
    upstream: Arc<Upstream>,
    tool: String,
    cancel: CancelToken,
}

#[async_trait]
impl Tool for UpstreamTool {
    async fn call(&self, arguments: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        let args = match arguments {
            serde_json::Value::Object(m) => Some(m.clone()),
            serde_json::Value::Null => None,
            _ => {
                return Err(ToolError {
                    message: "the arguments are not a JSON object".into(),
                    transient: false,
                    code: Some("SBX_E1901"),
                })
            }
        };
        match self.upstream.call(&self.tool, args, &self.cancel).await {
            Ok(r) => serde_json::to_value(&r).map_err(|e| ToolError {
                message: format!("the upstream's result could not be kept: {e}"),
                transient: false,
                code: Some("SBX_E1912"),
            }),
            Err(e) => Err(ToolError {
                message: format!("upstream `{}`: {e}", self.upstream.name()),
                transient: false,
                code: Some(e.code()),
            }),
        }
    }
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
        match self.forward(upstream, tool, &name, request, &cx).await {
            Ok(r) => r,
            Err(e) => answer::error(&e),
        }
    }

    async fn forward(
        &self,
        upstream: Arc<Upstream>,
        tool: String,
        name: &str,
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.proxy_principal(name, cx).await?;
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let Some(proxy) = self.opts.proxy.as_ref() else {
            return Err(McpError::UnknownTool { name: name.into() });
        };
        if proxy.pins().is_changed(name) {
            let rec = self.refused_changed(&who, name, &arguments).await;
            return Ok(answer::refused(&answer::denial(&rec)));
        }
        let token = CancelToken::new();
        let ct = cx.ct.clone();
        let cancel_watch = tokio::spawn({
            let token = token.clone();
            async move {
                ct.cancelled().await;
                token.cancel("cancelled by the MCP client");
            }
        });
        let mut op = Operation::new(
            who.clone(),
            OperationArgs::ToolCall {
                tool: name.to_string(),
                arguments,
            },
        );
        op.idempotent = false;
        let mut sub = Submission::new(op);
        sub.labels
            .insert("mcp.upstream".into(), upstream.name().to_string());
        sub.cancel = Some(token.clone());
        sub.tool = Some(Arc::new(UpstreamTool {
            upstream,
            tool,
            cancel: token,
        }));
        let (pending, asks) = crate::ask::attach(
            cx,
            who.tenant.clone(),
            self.opts.gateway.clone(),
            self.opts.approval_timeout,
        );
        sub.approval_pending = Some(pending);
        let out = self.opts.gateway.submit(sub).await;
        cancel_watch.abort();
        asks.abort();
        let o = out.map_err(|e| McpError::Gateway {
            code: sandboxio_core::ErrorCode::code(&e),
            why: e.to_string(),
        })?;
        let ran = o.record.verdict == Verdict::Allow && o.record.status == OperationStatus::Ok;
        match (ran, o.tool_output) {
            (true, Some(v)) => {
                serde_json::from_value::<CallToolResult>(v).map_err(|e| McpError::Gateway {
                    code: "SBX_E1912",
                    why: format!("the upstream's result could not be returned: {e}"),
                })
            }
            _ => Ok(answer::refused(&answer::denial(&o.record))),
        }
    }

    /// Over HTTP, calling an upstream's tool needs the `exec` scope (it runs something
    /// on the caller's behalf).
    async fn proxy_principal(
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

    /// The one record of a call refused because the tool's description changed.
    async fn refused_changed(
        &self,
        who: &Principal,
        name: &str,
        arguments: &serde_json::Value,
    ) -> OperationRecord {
        let id = format!("mcp-{}", uuid_like());
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
        rec.reason = format!(
            "the description of `{name}` changed since it was approved; run `sandboxio mcp trust {name}` after reading it"
        );
        // The auditor redacts the record (the arguments too) before any sink sees it.
        if let Err(e) = self.opts.gateway.auditor().record(rec.clone()).await {
            tracing::warn!(
                code = sandboxio_core::ErrorCode::code(&e),
                "recording a refused MCP call failed: {e}"
            );
        }
        rec
    }
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}-{:x}", std::process::id())
}
