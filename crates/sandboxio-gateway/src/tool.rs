//! Named tools called through the chain (`tool_call` operations).

use async_trait::async_trait;

/// A tool's failure; `transient` says whether a retry may succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub message: String,
    pub transient: bool,
    /// The tool's own stable code for this failure (the record's `error_code`); the
    /// gateway's `SBX_E1514` when unset.
    pub code: Option<&'static str>,
}

/// A tool the gateway can call once every layer said yes.
#[async_trait]
pub trait Tool: Send + Sync {
    async fn call(&self, arguments: &serde_json::Value) -> Result<serde_json::Value, ToolError>;
}
