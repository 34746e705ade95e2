//! Every telemetry name sandboxio writes: span attributes, metric names, log fields.
//!
//! No other module writes an attribute name as a literal. The targeted OpenTelemetry
//! GenAI semantic-conventions version is pinned here; bumping it is a changelog entry.

/// The GenAI semantic-conventions version these names follow.
pub const SEMCONV_VERSION: &str = "1.37.0";

/// Span name prefix: spans are named `execute_tool {tool}`.
pub const SPAN_EXECUTE_TOOL: &str = "execute_tool";
/// The operation name value for tool execution.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";
/// The caller's agent span operation name, under which ours nest.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";

// Attributes from the GenAI convention.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
pub const ERROR_TYPE: &str = "error.type";

// sandboxio's own attributes (the convention has no vocabulary for a sandbox).
pub const SBX_BACKEND: &str = "sandboxio.backend";
pub const SBX_ISOLATION: &str = "sandboxio.isolation";
pub const SBX_SANDBOX_ID: &str = "sandboxio.sandbox.id";
pub const SBX_EXIT_CODE: &str = "sandboxio.exit_code";
pub const SBX_DURATION_MS: &str = "sandboxio.duration_ms";
pub const SBX_BYTES_IN: &str = "sandboxio.bytes_in";
pub const SBX_BYTES_OUT: &str = "sandboxio.bytes_out";
pub const SBX_DECISION: &str = "sandboxio.decision";
pub const SBX_LAYER: &str = "sandboxio.layer";
pub const SBX_RULE: &str = "sandboxio.rule";
pub const SBX_STATUS: &str = "sandboxio.status";
pub const SBX_TENANT: &str = "sandboxio.tenant_id";
pub const SBX_NETWORK_DENIALS: &str = "sandboxio.network_denials";
pub const SBX_COST_RESERVED: &str = "sandboxio.cost.reserved";
pub const SBX_COST_SETTLED: &str = "sandboxio.cost.settled";
pub const SBX_ATTEMPTS: &str = "sandboxio.attempts";
pub const SBX_REPLAYED: &str = "sandboxio.replayed";
pub const SBX_CODE: &str = "sandboxio.code";

// Metric names.
pub const M_OPERATIONS: &str = "sandboxio.operations";
pub const M_DURATION: &str = "sandboxio.operation.duration";
pub const M_DENIALS: &str = "sandboxio.denials";
pub const M_APPROVALS_PENDING: &str = "sandboxio.approvals.pending";
pub const M_APPROVAL_WAIT: &str = "sandboxio.approvals.wait";
pub const M_BUDGET_SPENT: &str = "sandboxio.budget.spent";
pub const M_BUDGET_REMAINING: &str = "sandboxio.budget.remaining";
pub const M_LATENCY_VIOLATIONS: &str = "sandboxio.latency_budget.violations";
pub const M_NETWORK_DENIALS: &str = "sandboxio.network.denials";
pub const M_SINK_FAILURES: &str = "sandboxio.audit.sink_failures";
pub const M_REDACTIONS: &str = "sandboxio.redactions";
pub const M_RETRIES: &str = "sandboxio.retries";

// Environment variables.
pub const ENV_AUDIT_TIMEOUT: &str = "SBX_AUDIT_TIMEOUT";
pub const ENV_DEBUG: &str = "SBX_DEBUG";
