//! `NativeRuntime`: one gateway runtime per Python backend (`sandboxio.LocalBackend`),
//! built by the gateway's composition root from a configuration, with the backend's own
//! audit sinks, failure mode, approval callback and tools. Never global.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use pyo3::prelude::*;
use sandboxio_config::Config;
use sandboxio_core::{AdminAction, Capability, CostCategory, Money, Operation, OperationArgs};
use sandboxio_core::{IsolationTier, Principal};
use sandboxio_gateway::{
    Approver, AuditSink, Embedding, OnSinkFailure, Redactor, Runtime, RuntimeOptions, Secret,
    Submission, Tool,
};

use crate::error::{coded, invalid};
use crate::session::NativeSandbox;

#[pyclass(frozen, module = "sandboxio._native")]
pub struct NativeRuntime {
    rt: Arc<Runtime>,
}

/// Parses `since`/`until` given as milliseconds since the epoch.
fn at_ms(ms: i64) -> PyResult<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| invalid(format!("timestamp `{ms}` ms is out of range")))
}

/// Secrets from Python, each long enough to redact safely.
pub fn secrets_of(values: Vec<String>) -> Vec<Secret> {
    values.into_iter().map(Secret::new).collect()
}

impl NativeRuntime {
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The redactor for a sandbox's secrets on top of the runtime's (host env, config).
    pub fn redactor(&self, secrets: &[Secret]) -> PyResult<Arc<Redactor>> {
        self.rt
            .gateway()
            .redaction()
            .for_request(secrets)
            .map_err(|e| coded(&e, |s| s.to_string()))
    }
}

#[pymethods]
impl NativeRuntime {
    /// Builds the runtime and finishes what a crashed process left (awaitable).
    #[staticmethod]
    #[pyo3(signature = (state_dir, config_text, config_origin, policy_files, sinks, on_sink_failure, capture_code, sink_timeout_ms, decider, approval_timeout_ms, env, tools, helper))]
    #[allow(clippy::too_many_arguments)]
    fn open<'py>(
        py: Python<'py>,
        state_dir: PathBuf,
        config_text: Option<String>,
        config_origin: String,
        policy_files: Vec<PathBuf>,
        sinks: Vec<Py<PyAny>>,
        on_sink_failure: Option<String>,
        capture_code: Option<bool>,
        sink_timeout_ms: Option<u64>,
        decider: Option<Py<PyAny>>,
        approval_timeout_ms: Option<u64>,
        env: Vec<(String, String)>,
        tools: Vec<String>,
        helper: Option<PathBuf>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config = match config_text {
            Some(t) => Config::parse(&t, &config_origin).map_err(|e| coded(&e, |s| s.into()))?,
            None => Config::default(),
        };
        let mut opts = RuntimeOptions::new(config, state_dir);
        opts.policy_files = policy_files;
        opts.env = env;
        opts.approval_timeout = approval_timeout_ms.map(Duration::from_millis);
        opts.approver = match decider {
            Some(d) => Approver::Callback(Arc::new(crate::approver::PyApprover::new(d))),
            None => Approver::Nobody,
        };
        let mut embed = Embedding {
            capture_code,
            helper,
            sink_timeout: sink_timeout_ms.map(Duration::from_millis),
            ..Embedding::default()
        };
        embed.on_sink_failure = match on_sink_failure.as_deref() {
            None => None,
            Some("warn") => Some(OnSinkFailure::Warn),
            Some("fail") => Some(OnSinkFailure::Fail),
            Some(other) => {
                return Err(invalid(format!(
                    "on_sink_failure `{other}` is not one of `warn`, `fail`"
                )))
            }
        };
        for s in sinks {
            let sink: Arc<dyn AuditSink> = Arc::new(crate::sink::PySink::new(py, s)?);
            embed.sinks.push(sink);
        }
        for t in tools {
            let tool: Arc<dyn Tool> = Arc::new(crate::tool::PermitTool);
            embed.tools.push((t, tool));
        }
        opts.embed = embed;
        let rt = Runtime::open(opts).map_err(|e| coded(&e, |s| s.into()))?;
        crate::rt::future_into_py(py, async move {
            rt.recover(Duration::from_secs(3600))
                .await
                .map_err(|e| coded(&e, |s| s.into()))?;
            Ok(NativeRuntime { rt: Arc::new(rt) })
        })
    }

    /// Opens a session with its own workspace.
    #[pyo3(signature = (tenant, agent, tier, work_root, secrets, labels, capture_code=false))]
    #[allow(clippy::too_many_arguments)]
    fn create_sandbox(
        &self,
        tenant: String,
        agent: Option<String>,
        tier: Option<String>,
        work_root: Option<PathBuf>,
        secrets: Vec<String>,
        labels: Vec<(String, String)>,
        capture_code: bool,
    ) -> PyResult<NativeSandbox> {
        let tier = match tier {
            None => None,
            Some(t) => Some(
                t.parse::<IsolationTier>()
                    .map_err(|e| coded(&e, |s| s.into()))?,
            ),
        };
        // A tier this build cannot run is refused here, not at every operation after.
        if let Some(t) = tier {
            sandboxio_gateway::Gateway::tier_supported(t)
                .map_err(|why| invalid(format!("tier `{t}`: {why}")))?;
        }
        let mut principal = Principal::tenant(tenant);
        principal.agent = agent;
        let secrets = secrets_of(secrets);
        let redactor = self.redactor(&secrets)?;
        let sbx = sandboxio_gateway::Sandbox::create(
            self.rt.gateway().clone(),
            principal,
            tier,
            work_root.as_deref(),
        )
        .map_err(|e| coded(&e, |s| redactor.redact_str(s).into_owned()))?;
        Ok(NativeSandbox::new(
            sbx,
            secrets,
            redactor,
            labels,
            capture_code,
        ))
    }

    /// What the in-process backend can do.
    fn capabilities(&self) -> u32 {
        (Capability::EXEC
            | Capability::RUN_CODE
            | Capability::FILESYSTEM
            | Capability::STREAM
            | Capability::RESOURCE_LIMITS
            | Capability::COST_REPORTING)
            .bits()
    }

    /// The settled ledger between two instants, as JSON lines of cost entries.
    #[pyo3(signature = (since_ms, until_ms))]
    fn ledger(&self, since_ms: i64, until_ms: Option<i64>) -> PyResult<String> {
        let since = at_ms(since_ms)?;
        let until = match until_ms {
            Some(u) => at_ms(u)?,
            None => Utc::now(),
        };
        let lines = self
            .rt
            .store()
            .ledger(since, until)
            .map_err(|e| coded(&e, |s| s.into()))?;
        serde_json::to_string(&lines).map_err(|e| invalid(e.to_string()))
    }

    /// An operator action (kill, resume, approve, deny) through the chain; one record.
    /// `action` is the JSON of the action (`{"action": "kill", "reason": "..."}`).
    fn admin<'py>(
        &self,
        py: Python<'py>,
        tenant: String,
        actor: String,
        action: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let action: AdminAction = serde_json::from_str(&action)
            .map_err(|e| invalid(format!("invalid admin action: {e}")))?;
        let rt = self.rt.clone();
        crate::rt::future_into_py(py, async move {
            let out = rt
                .gateway()
                .admin(&tenant, &actor, action)
                .await
                .map_err(|e| coded(&e, |s| s.into()))?;
            serde_json::to_string(&out).map_err(|e| invalid(e.to_string()))
        })
    }

    /// A named tool call through the whole chain (policy, rate limit, budget with the
    /// caller's estimate and category, approval); one record. Answers the outcome JSON.
    #[pyo3(signature = (tenant, agent, tool, arguments, estimate, category, rationale))]
    #[allow(clippy::too_many_arguments)]
    fn tool_call<'py>(
        &self,
        py: Python<'py>,
        tenant: String,
        agent: Option<String>,
        tool: String,
        arguments: String,
        estimate: Option<String>,
        category: Option<String>,
        rationale: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments: serde_json::Value = serde_json::from_str(&arguments)
            .map_err(|e| invalid(format!("tool arguments are not JSON: {e}")))?;
        let mut principal = Principal::tenant(tenant);
        principal.agent = agent;
        let mut op = Operation::new(principal, OperationArgs::ToolCall { tool, arguments });
        if let Some(e) = estimate {
            op.estimated_cost = Some(e.parse::<Money>().map_err(|e| coded(&e, |s| s.into()))?);
        }
        if let Some(c) = category {
            op.cost_category =
                serde_json::from_value::<CostCategory>(serde_json::Value::String(c.clone()))
                    .map_err(|_| invalid(format!("cost category `{c}` is not known")))?;
        }
        op.rationale = rationale;
        let rt = self.rt.clone();
        crate::rt::future_into_py(py, async move {
            let out = rt
                .gateway()
                .submit(Submission::new(op))
                .await
                .map_err(|e| coded(&e, |s| s.into()))?;
            serde_json::to_string(&out).map_err(|e| invalid(e.to_string()))
        })
    }

    /// Redacts text with the runtime's redaction plus `secrets` (for the package's own
    /// messages, log records and reprs).
    fn redact(&self, text: &str, secrets: Vec<String>) -> PyResult<String> {
        let r = self.redactor(&secrets_of(secrets))?;
        Ok(r.redact_str(text).into_owned())
    }

    fn state_dir(&self) -> PathBuf {
        self.rt.state_dir().to_path_buf()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.rt)
    }
}
