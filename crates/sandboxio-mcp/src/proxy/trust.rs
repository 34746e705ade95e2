//! `sandboxio mcp trust <upstream>__<tool> [--digest <hex>]`: a person approves a tool's
//! changed definition, recorded like the other operator actions (who, which tool, both
//! digests). With `--digest` (the `seen` digest `sandboxio mcp pins` showed), only that
//! definition is approved: if the upstream changed it since, nothing is (`SBX_E1921`).
//! Without it, whatever is newest when the command runs is approved.

use sandboxio_core::{OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::Runtime;

use super::pins::{Pin, Pins};
use crate::error::McpError;

/// Approves the latest definition of `tool` (only when its digest is `digest`, if
/// given); records who did. Returns the pin as it was.
pub async fn trust(
    rt: &Runtime,
    tool: &str,
    actor: &str,
    digest: Option<&str>,
) -> Result<Pin, McpError> {
    let pins = Pins::open(rt.state_dir())?;
    let Some(before) = pins.approve_digest(tool, digest)? else {
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
            "`{actor}` approved the changed definition of `{tool}` (sha256 {} replaces {}){}",
            before.seen,
            if before.approved.is_empty() {
                "nothing"
            } else {
                &before.approved
            },
            if digest.is_some() {
                ", the digest they read"
            } else {
                ""
            }
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
