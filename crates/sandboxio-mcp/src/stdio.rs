//! `sandboxio mcp`: the MCP server over standard input and output, as the local user's
//! principal. Standard output carries MCP messages only; logs go to standard error.

use rmcp::ServiceExt as _;
use sandboxio_core::Principal;

use crate::error::McpError;
use crate::handler::{Front, McpOptions, SandboxioMcp};

/// How long stopping waits for the upstreams' processes to end and be recorded.
const UPSTREAM_STOP: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves until the client closes standard input; the session's sandboxes are closed
/// then, and the upstreams stopped (their records written).
pub async fn serve_stdio(opts: McpOptions, principal: Principal) -> Result<(), McpError> {
    let proxy = opts.proxy.clone();
    let handler = SandboxioMcp::new(opts, Front::Local(principal));
    let running =
        handler
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Transport {
                transport: "stdio",
                why: e.to_string(),
            })?;
    let ended = running.waiting().await.map_err(|e| McpError::Transport {
        transport: "stdio",
        why: e.to_string(),
    });
    // The upstreams' processes are operations too: end them and let their records be
    // written before the process exits.
    if let Some(p) = proxy {
        p.shutdown(UPSTREAM_STOP).await;
    }
    ended?;
    Ok(())
}
