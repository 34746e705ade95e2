//! The tool behind `SafetyBoundary.check` and `BudgetGuard.request`: the chain decides
//! (kill switch, policy, rate limit, budget, approval) and records; running it only
//! confirms that every layer said yes.

use async_trait::async_trait;
use sandboxio_gateway::{Tool, ToolError};

pub struct PermitTool;

#[async_trait]
impl Tool for PermitTool {
    async fn call(&self, _arguments: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        Ok(serde_json::json!({ "permitted": true }))
    }
}
