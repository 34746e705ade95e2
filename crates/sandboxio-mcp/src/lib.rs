//! sandboxio over the Model Context Protocol: an MCP server (stdio and streamable HTTP)
//! whose tools run code, commands and file operations in sandboxes, each call one
//! operation through the gateway's chain with one record.
//!
//! Layout: `catalog` (the tools as data: schemas, annotations), `args` (typed inputs and
//! outputs), `handler` (the MCP server), `call` (one call through the chain), `answer`
//! (outcome to tool result, denials as structured tool errors), `progress` (output as
//! progress notifications), `ask` (approvals through elicitation), `sessions` (sandboxes of
//! one MCP session), `stdio` and `http` (transports), `proxy` (upstream MCP servers whose
//! tools are re-offered, each call through the chain).

pub mod answer;
pub mod args;
mod ask;
mod call;
pub mod catalog;
pub mod error;
pub mod handler;
pub mod http;
mod progress;
pub mod proxy;
pub mod sessions;
pub mod stdio;
mod stdio_ids;

pub use error::McpError;
pub use handler::{Front, McpOptions, SandboxioMcp};
pub use stdio::serve_stdio;
