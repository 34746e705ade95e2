//! `NativeSandbox`: a gateway session. Each method is one operation through the whole
//! chain (one record each), answered as the package's values made from the outcome
//! (`answer.rs`; already redacted by the gateway). Errors carry their code and are
//! redacted with the sandbox's secrets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use sandboxio_core::{ByteSize, ExecRequest, Language, OperationArgs};
use sandboxio_gateway::{
    CallOptions, CancelToken, GatewayError, Outcome, Redactor, Sandbox, Secret,
};

use crate::answer::Reply;
use crate::error::{coded, invalid, own, SANDBOX_CLOSED};
use crate::handoff::{OnCancel, Settling};

#[pyclass(frozen, module = "sandboxio._native")]
pub struct NativeSandbox {
    sbx: Arc<Sandbox>,
    secrets: Vec<Secret>,
    redactor: Arc<Redactor>,
    labels: BTreeMap<String, String>,
    /// How long the last operation took inside Rust (`Sandbox::call`), in microseconds:
    /// the benchmark subtracts it from the time Python saw for the same call.
    last_call_us: Arc<AtomicU64>,
    /// `AuditConfig.capture_code`: whether the answered record keeps the code.
    capture_code: bool,
    /// Its operations whose Python future was cancelled and that still run to their end
    /// (to be recorded `cancelled`); `settle()` waits for them.
    settling: Arc<Settling>,
}

/// Largest request (content, standard input and code together) whose operation starts on
/// the caller's thread: its digests there take a few microseconds at most.
const START_HERE_MAX_BYTES: usize = 16 * 1024;

/// What Python may set on a run: the program's environment, its input, limits, network.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub stdin: Option<String>,
    /// `base64` when `stdin` is base64 of bytes (Python's `bytes`); text otherwise.
    #[serde(default)]
    pub stdin_encoding: Option<sandboxio_core::wire::ByteEncoding>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub pids: Option<u32>,
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Host variables passed through by name (replaces the configured allowlist).
    #[serde(default)]
    pub env_allowlist: Option<Vec<String>>,
    /// A host directory the program reads at `$SANDBOX_INPUT` (default: the workspace).
    #[serde(default)]
    pub input_dir: Option<PathBuf>,
    /// A host directory that receives `$SANDBOX_OUTPUT` (default: the workspace).
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
    /// `{"mode": "none"}` (default), `{"mode": "full"}`, or an allowlist; policy decides.
    #[serde(default)]
    pub network: Option<sandboxio_core::NetworkMode>,
    #[serde(default)]
    pub traceparent: Option<String>,
    #[serde(default)]
    pub rationale: Option<String>,
    /// `stdin` decoded (`parse`).
    #[serde(skip)]
    stdin_bytes: Option<Vec<u8>>,
}

impl RunOptions {
    pub fn parse(json: &str) -> PyResult<RunOptions> {
        let mut o: RunOptions =
            serde_json::from_str(json).map_err(|e| invalid(format!("invalid run options: {e}")))?;
        o.stdin_bytes = match o.stdin.take() {
            Some(text) => Some(
                sandboxio_core::wire::decode(text, o.stdin_encoding)
                    .map_err(|e| invalid(format!("invalid stdin: {e}")))?,
            ),
            None if o.stdin_encoding.is_some() => {
                return Err(invalid("stdin_encoding given without stdin"))
            }
            None => None,
        };
        Ok(o)
    }

    pub fn request(&self) -> ExecRequest {
        let mut req = ExecRequest::new(Vec::<String>::new());
        req.env = self.env.clone();
        req.stdin = self.stdin_bytes.clone();
        if let Some(t) = self.timeout_ms {
            req.limits.timeout = Duration::from_millis(t);
        }
        if let Some(m) = self.memory_bytes {
            req.limits.memory = ByteSize(m);
        }
        if let Some(p) = self.pids {
            req.limits.pids = p;
        }
        if let Some(a) = &self.env_allowlist {
            req.env_allowlist = a.clone();
        }
        if let Some(n) = &self.network {
            req.network = n.clone();
        }
        req.input_dir = self.input_dir.clone();
        req.output_dir = self.output_dir.clone();
        req.files = self
            .files
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        req
    }
}

impl NativeSandbox {
    pub fn new(
        sbx: Sandbox,
        secrets: Vec<Secret>,
        redactor: Arc<Redactor>,
        labels: Vec<(String, String)>,
        capture_code: bool,
    ) -> Self {
        NativeSandbox {
            sbx: Arc::new(sbx),
            secrets,
            redactor,
            labels: labels.into_iter().collect(),
            last_call_us: Arc::new(AtomicU64::new(0)),
            capture_code,
            settling: Arc::new(Settling::default()),
        }
    }

    pub fn options(&self, traceparent: Option<String>, rationale: Option<String>) -> CallOptions {
        CallOptions {
            secrets: self.secrets.clone(),
            traceparent,
            labels: self.labels.clone(),
            rationale,
            ..CallOptions::default()
        }
    }

    /// The outcome's JSON, or the error: a stream's answer (`stream.rs`).
    pub fn answer(redactor: &Redactor, r: Result<Outcome, GatewayError>) -> PyResult<String> {
        match r {
            Ok(out) => serde_json::to_string(&out).map_err(|e| invalid(e.to_string())),
            Err(e) => Err(coded(&e, |s| redactor.redact_str(s).into_owned())),
        }
    }

    fn op<'py>(
        &self,
        py: Python<'py>,
        args: OperationArgs,
        exec: Option<ExecRequest>,
        content: Option<Vec<u8>>,
        mut extra: CallOptions,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.sbx.is_closed() {
            return Err(own(SANDBOX_CLOSED, "usage", "the sandbox is closed"));
        }
        // An operation is not cancel-safe (dropped mid-flight, it would leave no record,
        // an open journal intent and a held budget reservation): a cancelled Python
        // future fires this token instead, and the operation runs on to its record.
        let token = CancelToken::new();
        extra.cancel = Some(token.clone());
        let on_cancel = OnCancel {
            token,
            settling: self.settling.clone(),
        };
        let sbx = self.sbx.clone();
        let redactor = self.redactor.clone();
        let last = self.last_call_us.clone();
        let capture_code = self.capture_code;
        // These answer the record itself: made at once, not on first use.
        let record_now = matches!(
            args,
            OperationArgs::FileWrite { .. } | OperationArgs::FileDelete { .. }
        );
        // A small request starts on the caller's thread (`handoff::spawn`); a large one
        // (its content or input digested before the first wait) on the runtime.
        let size = content.as_ref().map_or(0, Vec::len)
            + exec
                .as_ref()
                .and_then(|e| e.stdin.as_ref())
                .map_or(0, Vec::len)
            + match &args {
                OperationArgs::RunCode { code, .. } => code.len(),
                _ => 0,
            };
        let start_here = size <= START_HERE_MAX_BYTES;
        crate::rt::future_into_py_from(
            py,
            async move {
                let t = std::time::Instant::now();
                let r = sbx.call(args, exec, content, extra).await;
                last.store(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                match r {
                    Ok(out) => {
                        Reply::of(out, capture_code, record_now).map_err(|e| invalid(e.to_string()))
                    }
                    Err(e) => Err(coded(&e, |s| redactor.redact_str(s).into_owned())),
                }
            },
            start_here,
            Some(on_cancel),
        )
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sbx
    }

    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }
}

#[pymethods]
impl NativeSandbox {
    #[getter]
    fn id(&self) -> String {
        self.sbx.id().to_string()
    }

    #[getter]
    fn tier(&self) -> String {
        self.sbx.tier().to_string()
    }

    #[getter]
    fn workspace(&self) -> PathBuf {
        self.sbx.workspace().to_path_buf()
    }

    /// Microseconds the last operation spent in `Sandbox::call` (for the benchmark).
    #[getter]
    fn last_call_us(&self) -> u64 {
        self.last_call_us.load(Ordering::Relaxed)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.sbx.is_closed()
    }

    /// Runs a command (argv) in the sandbox; `options` is the JSON of `RunOptions`.
    fn exec<'py>(
        &self,
        py: Python<'py>,
        argv: Vec<String>,
        options: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        if argv.is_empty() {
            return Err(invalid("a command needs at least a program name"));
        }
        let o = RunOptions::parse(options)?;
        let extra = self.options(o.traceparent.clone(), o.rationale.clone());
        self.op(
            py,
            OperationArgs::Exec { argv },
            Some(o.request()),
            None,
            extra,
        )
    }

    /// Runs code in a language (`python`, `node`, `bash`).
    fn run_code<'py>(
        &self,
        py: Python<'py>,
        language: &str,
        code: String,
        options: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let language = language
            .parse::<Language>()
            .map_err(|e| coded(&e, |s| self.redactor.redact_str(s).into_owned()))?;
        let o = RunOptions::parse(options)?;
        let extra = self.options(o.traceparent.clone(), o.rationale.clone());
        self.op(
            py,
            OperationArgs::RunCode { language, code },
            Some(o.request()),
            None,
            extra,
        )
    }

    #[pyo3(signature = (path, traceparent=None))]
    fn read_file<'py>(
        &self,
        py: Python<'py>,
        path: String,
        traceparent: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let extra = self.options(traceparent, None);
        self.op(py, OperationArgs::FileRead { path }, None, None, extra)
    }

    #[pyo3(signature = (path, content, traceparent=None))]
    fn write_file<'py>(
        &self,
        py: Python<'py>,
        path: String,
        content: Vec<u8>,
        traceparent: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let extra = self.options(traceparent, None);
        let args = OperationArgs::FileWrite {
            path,
            size: content.len() as u64,
            content_sha256: None,
        };
        self.op(py, args, None, Some(content), extra)
    }

    #[pyo3(signature = (path, traceparent=None))]
    fn delete_file<'py>(
        &self,
        py: Python<'py>,
        path: String,
        traceparent: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let extra = self.options(traceparent, None);
        self.op(py, OperationArgs::FileDelete { path }, None, None, extra)
    }

    /// Starts a command or code with live output; the stream yields its events.
    #[pyo3(signature = (language, code, argv, options))]
    fn stream(
        &self,
        language: Option<String>,
        code: Option<String>,
        argv: Option<Vec<String>>,
        options: &str,
    ) -> PyResult<crate::stream::NativeStream> {
        if self.sbx.is_closed() {
            return Err(own(SANDBOX_CLOSED, "usage", "the sandbox is closed"));
        }
        let o = RunOptions::parse(options)?;
        let args = match (language, code, argv) {
            (Some(l), Some(code), None) => OperationArgs::RunCode {
                language: l
                    .parse::<Language>()
                    .map_err(|e| coded(&e, |s| self.redactor.redact_str(s).into_owned()))?,
                code,
            },
            (None, None, Some(argv)) if !argv.is_empty() => OperationArgs::Exec { argv },
            _ => return Err(invalid("stream needs either code and a language, or argv")),
        };
        let extra = self.options(o.traceparent.clone(), o.rationale.clone());
        Ok(crate::stream::NativeStream::new(
            self.sbx.clone(),
            self.redactor.clone(),
            args,
            o.request(),
            extra,
        ))
    }

    /// For the benchmark: the same `run_code` operation `n` times from Rust (no Python on
    /// the path), answering each one's duration in microseconds (awaitable).
    fn bench_run_code<'py>(
        &self,
        py: Python<'py>,
        code: String,
        n: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sbx = self.sbx.clone();
        let secrets = self.secrets.clone();
        let labels = self.labels.clone();
        crate::rt::future_into_py(py, async move {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let extra = CallOptions {
                    secrets: secrets.clone(),
                    labels: labels.clone(),
                    ..CallOptions::default()
                };
                let args = OperationArgs::RunCode {
                    language: Language::Python,
                    code: code.clone(),
                };
                let t = std::time::Instant::now();
                let r = sbx
                    .call(
                        args,
                        Some(ExecRequest::new(Vec::<String>::new())),
                        None,
                        extra,
                    )
                    .await;
                let us = t.elapsed().as_micros() as u64;
                r.map_err(|e| invalid(e.to_string()))?;
                out.push(us);
            }
            Ok(out)
        })
    }

    /// Waits until every operation of this sandbox whose awaitable was cancelled has ended
    /// (its program killed, its record written, its budget reservation released)
    /// (awaitable).
    fn settle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let settling = self.settling.clone();
        crate::rt::future_into_py(py, async move {
            settling.wait().await;
            Ok(())
        })
    }

    /// What this sandbox can do (bits of `Capability`).
    fn capabilities(&self) -> u32 {
        self.sbx.capabilities().bits()
    }

    /// Ends the session and removes its workspace.
    fn close(&self) {
        self.sbx.close();
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.sbx)
    }
}
