//! One tool call: who calls, the typed arguments, the operation, the chain. Every call
//! that reaches a sandbox is exactly one `Gateway::submit` (one record); the MCP request's
//! cancellation cancels it (the sandbox kills the whole process tree, the record says
//! `cancelled`), its progress token receives the program's output as it runs, and an ask
//! is offered to the client's user through elicitation when the client supports it.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandboxio_core::{
    ErrorCode, ExecRequest, HumanDuration, IsolationTier, Language, OperationArgs, Principal,
    Verdict,
};
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::session::CallOptions;
use sandboxio_gateway::{CancelToken, Outcome, Sandbox};
use serde::de::DeserializeOwned;

use crate::answer;
use crate::args;
use crate::catalog::ToolName;
use crate::error::McpError;
use crate::handler::{Front, SandboxioMcp};

fn parse<T: DeserializeOwned>(
    tool: ToolName,
    arguments: Option<rmcp::model::JsonObject>,
) -> Result<T, McpError> {
    serde_json::from_value(serde_json::Value::Object(arguments.unwrap_or_default())).map_err(|e| {
        McpError::BadArguments {
            tool: tool.as_str().to_string(),
            why: e.to_string(),
        }
    })
}

fn bad(tool: ToolName, why: impl std::fmt::Display) -> McpError {
    McpError::BadArguments {
        tool: tool.as_str().to_string(),
        why: why.to_string(),
    }
}

fn gateway_error(e: sandboxio_gateway::GatewayError) -> McpError {
    McpError::Gateway {
        code: e.code(),
        why: e.to_string(),
    }
}

/// The scope an HTTP caller needs for a tool.
fn scope(tool: ToolName) -> Scope {
    match tool {
        ToolName::Exec => Scope::Exec,
        ToolName::RunCode => Scope::RunCode,
        _ => Scope::Files,
    }
}

impl SandboxioMcp {
    pub(crate) async fn call(
        &self,
        tool: ToolName,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        match self.dispatch(tool, request, &cx).await {
            Ok(r) => r,
            Err(e) => answer::error(&e),
        }
    }

    async fn dispatch(
        &self,
        tool: ToolName,
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.principal(tool, cx).await?;
        let arguments = request.arguments;
        match tool {
            ToolName::CreateSandbox => {
                let a: args::CreateSandbox = parse(tool, arguments)?;
                let tier = a
                    .tier
                    .map(|t| t.parse::<IsolationTier>())
                    .transpose()
                    .map_err(|e| bad(tool, e))?;
                // A tier this build cannot run is refused here, like the HTTP API does: a
                // sandbox of it would fail every call made in it.
                let effective = tier.unwrap_or(self.opts.gateway.config().default_tier);
                sandboxio_gateway::Gateway::tier_supported(effective)
                    .map_err(|why| bad(tool, format!("tier `{effective}`: {why}")))?;
                let s = self.sandboxes.create(&who, tier)?;
                self.lifecycle_record("mcp.sandbox_create", &who, s.id())
                    .await;
                Ok(CallToolResult::structured(
                    serde_json::to_value(args::SandboxInfo {
                        sandbox_id: s.id().to_string(),
                        tier: format!(
                            "{}",
                            tier.unwrap_or(self.opts.gateway.config().default_tier)
                        ),
                    })
                    .unwrap_or_default(),
                ))
            }
            ToolName::CloseSandbox => {
                let a: args::CloseSandbox = parse(tool, arguments)?;
                if !self.sandboxes.close(&who.tenant, &a.sandbox_id)? {
                    return Err(McpError::NoSandbox { id: a.sandbox_id });
                }
                self.lifecycle_record("mcp.sandbox_close", &who, &a.sandbox_id)
                    .await;
                Ok(CallToolResult::structured(
                    serde_json::to_value(args::Closed {
                        sandbox_id: a.sandbox_id,
                        closed: true,
                    })
                    .unwrap_or_default(),
                ))
            }
            ToolName::Exec => {
                let a: args::Exec = parse(tool, arguments)?;
                if a.argv.is_empty() {
                    return Err(bad(tool, "`argv` is empty"));
                }
                let sbx = self.sandboxes.get(&who, a.sandbox_id.as_deref())?;
                let mut req = self.opts.exec.clone();
                req.stdin = match a.stdin {
                    Some(text) => Some(
                        decode_bytes(text, a.stdin_encoding.as_deref(), "stdin", "stdin_encoding")
                            .map_err(|why| bad(tool, why))?,
                    ),
                    None if a.stdin_encoding.is_some() => {
                        return Err(bad(tool, "`stdin_encoding` is given without `stdin`"))
                    }
                    None => None,
                };
                if let Some(t) = a.timeout {
                    req.limits.timeout = t
                        .parse::<HumanDuration>()
                        .map_err(|e| bad(tool, e))?
                        .as_duration();
                }
                let args = OperationArgs::Exec { argv: a.argv };
                let o = self
                    .submit(&sbx, args, Some(req), None, a.rationale, cx)
                    .await?;
                Ok(answer::run(&o, sbx.id()))
            }
            ToolName::RunCode => {
                let a: args::RunCode = parse(tool, arguments)?;
                let language = a.language.parse::<Language>().map_err(|e| bad(tool, e))?;
                let sbx = self.sandboxes.get(&who, a.sandbox_id.as_deref())?;
                let mut req = self.opts.exec.clone();
                if let Some(t) = a.timeout {
                    req.limits.timeout = t
                        .parse::<HumanDuration>()
                        .map_err(|e| bad(tool, e))?
                        .as_duration();
                }
                let args = OperationArgs::RunCode {
                    language,
                    code: a.code,
                };
                let o = self
                    .submit(&sbx, args, Some(req), None, a.rationale, cx)
                    .await?;
                Ok(answer::run(&o, sbx.id()))
            }
            ToolName::ReadFile => {
                let a: args::ReadFile = parse(tool, arguments)?;
                let sbx = self.sandboxes.get(&who, a.sandbox_id.as_deref())?;
                let args = OperationArgs::FileRead { path: a.path };
                let o = self.submit(&sbx, args, None, None, None, cx).await?;
                Ok(answer::file(&o, sbx.id()))
            }
            ToolName::ListFiles => {
                let a: args::ListFiles = parse(tool, arguments)?;
                let sbx = self.sandboxes.get(&who, a.sandbox_id.as_deref())?;
                let path = a.path.unwrap_or_else(|| ".".into());
                let args = OperationArgs::FileRead { path };
                let o = self.submit(&sbx, args, None, None, None, cx).await?;
                Ok(answer::file(&o, sbx.id()))
            }
            ToolName::WriteFile => {
                let a: args::WriteFile = parse(tool, arguments)?;
                let bytes = decode_bytes(a.content, a.encoding.as_deref(), "content", "encoding")
                    .map_err(|why| bad(tool, why))?;
                let sbx = self.sandboxes.get(&who, a.sandbox_id.as_deref())?;
                let args = OperationArgs::FileWrite {
                    path: a.path,
                    size: bytes.len() as u64,
                    content_sha256: None,
                };
                let o = self.submit(&sbx, args, None, Some(bytes), None, cx).await?;
                Ok(answer::file(&o, sbx.id()))
            }
        }
    }

    /// The principal of this call; an HTTP caller must hold an API key with the tool's
    /// scope (a refusal is recorded by the server's `Caller::require`).
    async fn principal(
        &self,
        tool: ToolName,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Principal, McpError> {
        match &self.front {
            Front::Local(p) => Ok(p.clone()),
            Front::Http(state) => {
                let caller = crate::http::caller(cx).ok_or_else(|| McpError::Forbidden {
                    tool: tool.as_str().into(),
                    why: "no authenticated caller".into(),
                    code: "SBX_E1907",
                })?;
                if caller.is_capability() {
                    return Err(McpError::Forbidden {
                        tool: tool.as_str().into(),
                        why: "capability tokens are for the HTTP API; use an API key".into(),
                        code: "SBX_E1907",
                    });
                }
                let needed = match tool {
                    ToolName::CreateSandbox | ToolName::CloseSandbox => {
                        // Any of the sandbox scopes lets a caller hold sandboxes.
                        [Scope::Exec, Scope::RunCode, Scope::Files]
                            .into_iter()
                            .find(|s| caller.credential.scopes.contains(*s))
                            .unwrap_or(Scope::Exec)
                    }
                    t => scope(t),
                };
                caller
                    .require(state, needed)
                    .await
                    .map_err(|e| McpError::Forbidden {
                        tool: tool.as_str().into(),
                        why: e.to_string(),
                        code: e.code(),
                    })?;
                Ok(Principal::tenant(caller.tenant()))
            }
        }
    }

    /// Runs one operation through the chain, tied to the MCP request: its cancellation
    /// cancels the operation, its progress token receives the output, an ask is offered
    /// for elicitation.
    async fn submit(
        &self,
        sbx: &Sandbox,
        args: OperationArgs,
        exec: Option<ExecRequest>,
        content: Option<Vec<u8>>,
        rationale: Option<String>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Outcome, McpError> {
        let token = CancelToken::new();
        let mut extra = CallOptions {
            cancel: Some(token.clone()),
            rationale,
            ..CallOptions::default()
        };
        let progress = match exec.is_some() {
            true => crate::progress::attach(cx),
            false => None,
        };
        let progress = progress.map(|(tx, task)| {
            extra.stream.events = Some(tx);
            task
        });
        let asker = self.asker(cx, sbx.principal().tenant.clone());
        let (pending, asks) = tokio::sync::mpsc::unbounded_channel();
        extra.approval_pending = Some(pending);
        let out = crate::ask::watched(
            Box::pin(sbx.call(args, exec, content, extra)),
            asks,
            asker,
            &token,
        )
        .await;
        if let Some(p) = progress {
            let _ = p.await;
        }
        out.map_err(gateway_error)
    }

    /// Sandbox creation and closing are the front end's own actions: recorded through the
    /// same auditor as the chain's operations.
    async fn lifecycle_record(&self, event: &str, who: &Principal, sandbox_id: &str) {
        let mut rec = sandboxio_core::OperationRecord::new(format!("{event}-{sandbox_id}"), event);
        rec.tool_name = event.to_string();
        rec.tenant_id = Some(who.tenant.clone());
        rec.session_id = Some(sandbox_id.to_string());
        rec.sandbox_id = Some(sandbox_id.to_string());
        rec.backend = "mcp".into();
        rec.verdict = Verdict::Allow;
        rec.status = sandboxio_core::OperationStatus::Ok;
        rec.reason = format!("{event} for tenant `{}`", who.tenant);
        if let Err(e) = self.opts.gateway.auditor().record(rec).await {
            tracing::warn!(
                code = e.code(),
                "recording an MCP sandbox event failed: {e}"
            );
        }
    }
}

/// The bytes of a text field whose sibling `encoding_field` says how it is written:
/// `utf8` (the default: the text itself) or `base64`.
fn decode_bytes(
    text: String,
    encoding: Option<&str>,
    field: &str,
    encoding_field: &str,
) -> Result<Vec<u8>, String> {
    match encoding {
        None | Some("utf8") | Some("utf-8") => Ok(text.into_bytes()),
        Some("base64") => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|e| format!("`{field}` is not base64: {e}"))
        }
        Some(other) => Err(format!(
            "`{encoding_field}` is `{other}`; expected `utf8` or `base64`"
        )),
    }
}
