//! `sandboxio mcp trust <upstream>__<tool>`: a person approves a tool's changed
//! description, recorded like the other operator actions (who, which tool, both digests).

use sandboxio_core::{OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::Runtime;

use super::pins::{Pin, Pins};
use crate::error::McpError;

/// Approves the latest description of `tool`; records who did. Returns the pin as it was.
pub async fn trust(rt: &Runtime, tool: &str, actor: &str) -> Result<Pin, McpError> {
    let pins = Pins::open(rt.state_dir())?;
    let Some(before) = pins.approve(tool)? else {
        return Err(McpError::NoPin { tool: tool.into() });
    };
    let mut rec = OperationRecord::new(
        format!("mcp-trust-{}", &before.seen[..16.min(before.seen.len())]),
        "mcp.trust",
    );
    rec.tool_name = tool.to_string();
    rec.backend = "mcp".into();
    rec.verdict = Verdict::Allow;
    rec.status = OperationStatus::Ok;
    rec.approver = Some(actor.to_string());
    rec.reason = if before.changed() {
        format!(
            "`{actor}` approved the changed description of `{tool}` (sha256 {} replaces {})",
            before.seen, before.approved
        )
    } else {
        format!(
            "`{actor}` confirmed the description of `{tool}` (sha256 {})",
            before.seen
        )
    };
    rt.gateway()
        .auditor()
        .record(rec)
        .await
        .map_err(|e| McpError::Gateway {
            code: sandboxio_core::ErrorCode::code(&e),
            why: e.to_string(),
        })?;
    Ok(before)
}
