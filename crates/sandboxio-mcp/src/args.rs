//! What each tool takes and answers, as typed values; their JSON schemas (the tools'
//! `inputSchema` and `outputSchema`) are generated from these types. Unknown fields are
//! refused, like everywhere else user input enters.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `create_sandbox`: a session with a workspace of its own.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Isolation tier: `namespace` (default), `landlock` or `process`.
    #[serde(default)]
    pub tier: Option<String>,
}

/// `close_sandbox`: ends a session and removes its workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseSandbox {
    /// The sandbox to close (from `create_sandbox`).
    pub sandbox_id: String,
}

/// `exec`: runs a command in a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    /// The sandbox (from `create_sandbox`); absent: this MCP session's default sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// The program and its arguments, e.g. `["ls", "-l"]`.
    pub argv: Vec<String>,
    /// Given to the program on standard input: text, or base64 when `stdin_encoding` is
    /// `base64` (any bytes).
    #[serde(default)]
    pub stdin: Option<String>,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub stdin_encoding: Option<String>,
    /// Wall-clock limit such as `30s` or `2m` (default and ceiling from the configuration).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Why the agent wants this (shown to a person asked to approve it).
    #[serde(default)]
    pub rationale: Option<String>,
}

/// `run_code`: runs a snippet of code in a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    /// The sandbox (from `create_sandbox`); absent: this MCP session's default sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// `python`, `node` or `bash`.
    pub language: String,
    /// The code to run.
    pub code: String,
    /// Wall-clock limit such as `30s` or `2m` (default and ceiling from the configuration).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Why the agent wants this (shown to a person asked to approve it).
    #[serde(default)]
    pub rationale: Option<String>,
}

/// `read_file`: a file of the sandbox's workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// A path relative to the workspace.
    pub path: String,
}

/// `write_file`: creates or replaces a file of the sandbox's workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// A path relative to the workspace; missing directories are created.
    pub path: String,
    /// The content: text, or base64 when `encoding` is `base64`.
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<String>,
}

/// `list_files`: the entries of a directory of the workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFiles {
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// A directory relative to the workspace (default `.`, its root).
    #[serde(default)]
    pub path: Option<String>,
}

/// What `create_sandbox` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SandboxInfo {
    pub sandbox_id: String,
    pub tier: String,
}

/// What `close_sandbox` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Closed {
    pub sandbox_id: String,
    pub closed: bool,
}

/// What `exec` and `run_code` answer when the program ran (whatever its exit status).
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunOutput {
    /// The exit code; absent when a signal ended the program.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, if one did.
    pub signal: Option<i32>,
    /// Standard output (invalid UTF-8 replaced), redacted.
    pub stdout: String,
    /// Standard error (invalid UTF-8 replaced), redacted.
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
    pub oom_killed: bool,
    /// Why the run was cancelled, if it was.
    pub cancelled: Option<String>,
    /// Set when output was left unread after the program ended (a pipe held open from
    /// outside its process tree), and why.
    pub output_incomplete: Option<String>,
    /// Set when the program ran but its output files could not be copied out:
    /// `[SBX_E....] message`. The output above is still the program's.
    pub copy_out_error: Option<String>,
    pub duration_ms: u64,
    /// The gateway's operation id (its record in the audit trail).
    pub operation_id: String,
    pub sandbox_id: String,
}

/// What the file tools answer: the gateway's own result for the operation.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileOutput {
    /// The file or directory (as given).
    pub path: String,
    /// A file's text (UTF-8), redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A file's bytes as base64 when they are not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
    /// Bytes read or written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A directory's entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<serde_json::Value>>,
    pub operation_id: String,
    pub sandbox_id: String,
}

/// A refusal, as the structured content of a tool error: which layer stopped the call,
/// the rules that decided, the reason, and for an ask the approval to answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct Denial {
    /// `SBX_E....` (see docs/ERRORS.md).
    pub code: String,
    /// The layer that stopped it: policy, kill_switch, rate_limit, budget, approval, ...
    pub layer: String,
    /// The rules that decided (`id` and where they are written).
    pub rules: Vec<String>,
    pub reason: String,
    /// For an ask: the approval that was (or is) pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The gateway's operation id, when the chain ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
}
