//! `sandboxio mcp`: MCP over stdio, over the same chain as `run` (one record per call).
//! Standard output belongs to the protocol: nothing else is printed there.

use std::time::Duration;

use anyhow::Result;
use sandboxio_core::{HumanDuration, Principal};
use sandboxio_mcp::McpOptions;

use crate::args::{Common, McpArgs, McpCmd};
use crate::exit;
use crate::out::outln;
use crate::setup;

pub async fn mcp(common: Common, args: McpArgs, cmd: Option<McpCmd>) -> Result<i32> {
    // Refused before anything is opened or created.
    sandboxio_core::check_tenant(&args.tenant)?;
    if let Some(a) = &args.agent {
        sandboxio_core::check_agent(a)?;
    }
    let loaded = setup::load(&common)?;
    match cmd {
        Some(McpCmd::Trust { tool, digest }) => {
            let runtime = loaded.runtime(&common, None)?;
            let pin =
                sandboxio_mcp::proxy::trust(&runtime, &tool, &setup::actor(), digest.as_deref())
                    .await?;
            if pin.changed() {
                outln!(
                    "approved the new description of `{tool}`: {}",
                    pin.description
                )?;
            } else {
                outln!("`{tool}` was not changed; its description stays approved")?;
            }
            return Ok(exit::OK);
        }
        Some(McpCmd::Pins) => {
            let runtime = loaded.runtime(&common, None)?;
            let pins = sandboxio_mcp::proxy::pins::Pins::open(runtime.state_dir())?;
            outln!("{}", crate::out::pretty(&pins.list())?)?;
            return Ok(exit::OK);
        }
        None => {}
    }
    let timeout = args
        .approval_timeout
        .as_deref()
        .map(str::parse::<HumanDuration>)
        .transpose()?
        .map(|d| d.as_duration());
    // Asks wait for a decision in the store: elicitation, the CLI or the HTTP API write it.
    let runtime = loaded.runtime(&common, timeout)?;
    runtime.recover(loaded.config.limits.timeout.0).await?;
    let principal = Principal {
        tenant: args.tenant.clone(),
        session: None,
        agent: args.agent.clone(),
    };
    sandboxio_mcp::serve_stdio(McpOptions::from_runtime(&runtime)?, principal).await?;
    // Sandboxes are closed; let spawned record writers finish.
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(exit::OK)
}
