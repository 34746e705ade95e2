//! `sandboxio mcp`: the MCP server over standard input and output, as the local user's
//! principal. Standard output carries MCP messages only; logs go to standard error.

use rmcp::ServiceExt as _;
use sandboxio_core::Principal;

use crate::error::McpError;
use crate::handler::{Front, McpOptions, SandboxioMcp};

/// Serves until the client closes standard input; the session's sandboxes are closed then.
pub async fn serve_stdio(opts: McpOptions, principal: Principal) -> Result<(), McpError> {
    let handler = SandboxioMcp::new(opts, Front::Local(principal));
    let running =
        handler
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Transport {
                transport: "stdio",
                why: e.to_string(),
            })?;
    running.waiting().await.map_err(|e| McpError::Transport {
        transport: "stdio",
        why: e.to_string(),
    })?;
    Ok(())
}
