//! Errors of the MCP front end (`SBX_E19xx`). A refusal by a layer of the chain is not an
//! error here: it is a tool result with `isError` and a structured denial (`answer.rs`).

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum McpError {
    #[error("arguments of `{tool}` do not fit its input schema: {why}")]
    BadArguments { tool: String, why: String },
    #[error("no tool named `{name}`")]
    UnknownTool { name: String },
    #[error("no sandbox `{id}` in this MCP session")]
    NoSandbox { id: String },
    #[error("this MCP session already holds {max} sandboxes; close one first")]
    TooManySandboxes { max: usize },
    #[error("tenant `{tenant}` holds the most sandboxes its quota allows ({limit}, MCP sessions and the HTTP API together); close one first")]
    Quota { tenant: String, limit: usize },
    #[error("{why}")]
    Gateway { code: &'static str, why: String },
    #[error("internal state of the MCP session is unusable")]
    Poisoned,
    #[error("serving MCP over {transport} failed: {why}")]
    Transport {
        transport: &'static str,
        why: String,
    },
    #[error(
        "no MCP tool, prompt or resource `{tool}` has been seen (list them once; pins are `<upstream>__<tool>`, `prompt:<upstream>__<prompt>`, `resource:<URI>`, `template:<URI template>`)"
    )]
    NoPin { tool: String },
    #[error("`{pin}` was not approved: the digest given ({given}) is not the latest seen ({seen}); the upstream changed it since; read `sandboxio mcp pins` again")]
    DigestMoved {
        pin: String,
        given: String,
        seen: String,
    },
    #[error("the resource URI `{uri}` is ambiguous ({why}); it was not read")]
    AmbiguousUri { uri: String, why: String },
    #[error("the MCP tool pins in `{path}` are unusable: {why}")]
    Pins { path: String, why: String },
    #[error("the MCP pins in `{path}` would be {size} bytes, more than the {limit} kept; not saved (the upstreams list too much: remove or split the upstream whose listing grew)")]
    PinsTooLarge {
        path: String,
        size: usize,
        limit: usize,
    },
    #[error("the caller may not use `{tool}`: {why}")]
    Forbidden {
        tool: String,
        why: String,
        code: &'static str,
    },
}

impl ErrorCode for McpError {
    fn code(&self) -> &'static str {
        match self {
            McpError::BadArguments { .. } => "SBX_E1901",
            McpError::UnknownTool { .. } => "SBX_E1902",
            McpError::NoSandbox { .. } => "SBX_E1903",
            McpError::TooManySandboxes { .. } => "SBX_E1904",
            McpError::Quota { .. } => "SBX_E1811",
            McpError::Gateway { code, .. } => code,
            McpError::Poisoned => "SBX_E1905",
            McpError::Transport { .. } => "SBX_E1906",
            McpError::Forbidden { code, .. } => code,
            McpError::Pins { .. } => "SBX_E1913",
            McpError::PinsTooLarge { .. } => "SBX_E1923",
            McpError::NoPin { .. } => "SBX_E1915",
            McpError::DigestMoved { .. } => "SBX_E1921",
            McpError::AmbiguousUri { .. } => "SBX_E1922",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            McpError::BadArguments { .. }
            | McpError::UnknownTool { .. }
            | McpError::NoSandbox { .. }
            | McpError::TooManySandboxes { .. }
            | McpError::Quota { .. }
            | McpError::NoPin { .. }
            | McpError::DigestMoved { .. }
            | McpError::AmbiguousUri { .. } => ErrorClass::Usage,
            McpError::Forbidden { .. } => ErrorClass::Denied,
            McpError::Gateway { .. }
            | McpError::Poisoned
            | McpError::Transport { .. }
            | McpError::Pins { .. }
            | McpError::PinsTooLarge { .. } => ErrorClass::Internal,
        }
    }
}
