//! The tools sandboxio offers over MCP: names, descriptions, input and output schemas and
//! annotations, as data. What each does lives in `call.rs`.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};

use crate::args;

/// One of the tools, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolName {
    CreateSandbox,
    CloseSandbox,
    Exec,
    RunCode,
    ReadFile,
    WriteFile,
    ListFiles,
}

impl ToolName {
    pub const ALL: [ToolName; 7] = [
        ToolName::CreateSandbox,
        ToolName::CloseSandbox,
        ToolName::Exec,
        ToolName::RunCode,
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::ListFiles,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::CreateSandbox => "create_sandbox",
            ToolName::CloseSandbox => "close_sandbox",
            ToolName::Exec => "exec",
            ToolName::RunCode => "run_code",
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
            ToolName::ListFiles => "list_files",
        }
    }

    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The annotations a client shows and uses to decide whether to confirm a call.
    /// `(read_only, destructive, idempotent)`; no tool reaches an open world (the
    /// sandbox has no network unless the configuration grants it).
    pub fn hints(self) -> (bool, bool, bool) {
        match self {
            ToolName::CreateSandbox => (false, false, false),
            ToolName::CloseSandbox => (false, true, true),
            ToolName::Exec | ToolName::RunCode => (false, true, false),
            ToolName::ReadFile | ToolName::ListFiles => (true, false, true),
            ToolName::WriteFile => (false, true, true),
        }
    }

    fn description(self) -> &'static str {
        match self {
            ToolName::CreateSandbox => "Create a sandbox: an isolated session with a workspace of its own that later calls can name by `sandbox_id`. Calls without a `sandbox_id` use this MCP session's default sandbox.",
            ToolName::CloseSandbox => "Close a sandbox: cancel what runs in it and remove its workspace.",
            ToolName::Exec => "Run a command in a sandbox (no network, resource limits on). The workspace is read-only at $SANDBOX_INPUT; files written to $SANDBOX_OUTPUT land back in it. Every call passes the policy gateway and is recorded.",
            ToolName::RunCode => "Run Python, Node or Bash code in a sandbox (no network, resource limits on), with the workspace at $SANDBOX_INPUT and $SANDBOX_OUTPUT. Every call passes the policy gateway and is recorded.",
            ToolName::ReadFile => "Read a file of a sandbox's workspace (text, or base64 when it is not UTF-8).",
            ToolName::WriteFile => "Create or replace a file of a sandbox's workspace.",
            ToolName::ListFiles => "List a directory of a sandbox's workspace.",
        }
    }

    fn schemas(self) -> Result<(Arc<JsonObject>, Arc<JsonObject>), String> {
        Ok(match self {
            ToolName::CreateSandbox => (
                schema_for_input::<args::CreateSandbox>()?,
                schema_for_output::<args::SandboxInfo>(),
            ),
            ToolName::CloseSandbox => (
                schema_for_input::<args::CloseSandbox>()?,
                schema_for_output::<args::Closed>(),
            ),
            ToolName::Exec => (
                schema_for_input::<args::Exec>()?,
                schema_for_output::<args::RunOutput>(),
            ),
            ToolName::RunCode => (
                schema_for_input::<args::RunCode>()?,
                schema_for_output::<args::RunOutput>(),
            ),
            ToolName::ReadFile => (
                schema_for_input::<args::ReadFile>()?,
                schema_for_output::<args::FileOutput>(),
            ),
            ToolName::WriteFile => (
                schema_for_input::<args::WriteFile>()?,
                schema_for_output::<args::FileOutput>(),
            ),
            ToolName::ListFiles => (
                schema_for_input::<args::ListFiles>()?,
                schema_for_output::<args::FileOutput>(),
            ),
        })
    }

    /// The tool as `tools/list` shows it.
    pub fn tool(self) -> Result<Tool, String> {
        let (input, output) = self.schemas()?;
        let (read_only, destructive, idempotent) = self.hints();
        let mut tool = Tool::new(self.as_str(), self.description(), input);
        tool.output_schema = Some(output);
        Ok(tool.with_annotations(
            ToolAnnotations::new()
                .read_only(read_only)
                .destructive(destructive)
                .idempotent(idempotent)
                .open_world(false),
        ))
    }
}

/// Every tool, in a stable order.
pub fn tools() -> Result<Vec<Tool>, String> {
    ToolName::ALL.into_iter().map(ToolName::tool).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_input_schema_and_an_output_schema() {
        let tools = tools().unwrap();
        assert_eq!(tools.len(), ToolName::ALL.len());
        for t in &tools {
            assert_eq!(t.input_schema.get("type").unwrap(), "object", "{}", t.name);
            assert!(t.output_schema.is_some(), "{}", t.name);
            assert_eq!(ToolName::parse(&t.name).unwrap().as_str(), t.name);
        }
    }

    #[test]
    fn reading_tools_are_read_only_and_running_tools_are_destructive() {
        for t in tools().unwrap() {
            let a = t.annotations.unwrap();
            match t.name.as_ref() {
                "read_file" | "list_files" => {
                    assert_eq!(a.read_only_hint, Some(true));
                    assert_eq!(a.destructive_hint, Some(false));
                }
                "exec" | "run_code" => {
                    assert_eq!(a.read_only_hint, Some(false));
                    assert_eq!(a.destructive_hint, Some(true));
                    assert_eq!(a.idempotent_hint, Some(false));
                }
                _ => assert_eq!(a.read_only_hint, Some(false)),
            }
            assert_eq!(a.open_world_hint, Some(false));
        }
    }

    #[test]
    fn input_schemas_refuse_unknown_fields() {
        let exec = ToolName::Exec.tool().unwrap();
        assert_eq!(
            exec.input_schema.get("additionalProperties"),
            Some(&serde_json::json!(false))
        );
        let required = exec.input_schema.get("required").unwrap();
        assert_eq!(required, &serde_json::json!(["argv"]));
    }
}
