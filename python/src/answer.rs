//! An operation's outcome as the package's own Python values, made from the gateway's
//! structs on the event loop's thread: an `_outcome.Outcome` whose record is made an
//! `AuditEvent` on first use ([`LazyRecord`]), with its `ExecResult` and tool output.
//!
//! The answer used to cross as the outcome's JSON (3.4 KB for a `run_code`: the record
//! and the result, each with the sandbox's enforcement), serialised on the worker, then
//! parsed by `json.loads`, `AuditEvent.from_dict` and `ExecResult.from_outcome` on the
//! loop's thread. That thread runs right after waiting for the operation, when little of
//! that code is in the CPU's caches: the parse cost ~200 us there (~40 us back to back).
//! Here only the fields the package reads become Python objects, with the same values
//! `from_dict` and `from_outcome` give (`tests/test_answer.py` compares the two on
//! real outcomes); the other backends (HTTP server, E2B) still answer JSON.

use chrono::{Datelike as _, Timelike as _};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt as _};
use sandboxio_core::{ExecResult, OperationRecord};
use sandboxio_gateway::Outcome;
use std::sync::atomic::{AtomicBool, Ordering};

/// The Python classes and values the answer is made of, looked up once.
struct Names {
    object_new: Py<PyAny>,
    outcome: Py<PyAny>,
    audit_event: Py<PyAny>,
    exec_result: Py<PyAny>,
    tiers: Py<PyAny>,
    tier: Py<PyAny>,
    zero: Py<PyAny>,
    decimal: Py<PyAny>,
    datetime: Py<PyAny>,
    utc: Py<PyAny>,
}

static NAMES: PyOnceLock<Names> = PyOnceLock::new();

fn names(py: Python<'_>) -> PyResult<&Names> {
    NAMES.get_or_try_init(py, || {
        let events = py.import("sandboxio.events")?;
        let datetime = py.import("datetime")?;
        Ok(Names {
            object_new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
            outcome: py
                .import("sandboxio._outcome")?
                .getattr("Outcome")?
                .unbind(),
            audit_event: events.getattr("AuditEvent")?.unbind(),
            exec_result: py
                .import("sandboxio.results")?
                .getattr("ExecResult")?
                .unbind(),
            tiers: events.getattr("_TIERS")?.unbind(),
            tier: events.getattr("IsolationTier")?.unbind(),
            zero: events.getattr("_ZERO")?.unbind(),
            decimal: events.getattr("Decimal")?.unbind(),
            datetime: datetime.getattr("datetime")?.unbind(),
            utc: datetime.getattr("timezone")?.getattr("utc")?.unbind(),
        })
    })
}

/// Off by the benchmark only (`_bench_json_answer`): answer JSON text, as before.
static JSON_ANSWER: AtomicBool = AtomicBool::new(false);

/// For the benchmark: `True` makes operations answer the outcome's JSON text (parsed by
/// the package, the path of the other backends) instead of Python values.
#[pyfunction]
pub fn _bench_json_answer(on: bool) {
    JSON_ANSWER.store(on, Ordering::Relaxed);
}

/// What an operation answers Python: made into Python values on the loop's thread.
pub enum Reply {
    Json(String),
    Values {
        outcome: Box<Outcome>,
        capture_code: bool,
        /// The record made at once: the operation answers it (`write_file`).
        record_now: bool,
    },
}

impl Reply {
    pub fn of(
        outcome: Outcome,
        capture_code: bool,
        record_now: bool,
    ) -> Result<Reply, serde_json::Error> {
        if JSON_ANSWER.load(Ordering::Relaxed) {
            return serde_json::to_string(&outcome).map(Reply::Json);
        }
        Ok(Reply::Values {
            outcome: Box::new(outcome),
            capture_code,
            record_now,
        })
    }
}

impl<'py> IntoPyObject<'py> for Reply {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Reply::Json(text) => text.into_bound_py_any(py),
            Reply::Values {
                outcome,
                capture_code,
                record_now,
            } => {
                let n = names(py)?;
                let Outcome {
                    record,
                    result,
                    tool_output,
                } = *outcome;
                // What `_outcome.check` reads on every operation, so that the record
                // itself is made only if something reads it.
                let decision = PyString::new(py, record.verdict.as_str()).into_any();
                let status = PyString::new(py, record.status.as_str()).into_any();
                let error_code = record.error_code.as_deref().into_bound_py_any(py)?;
                let result = match result {
                    Some(r) => Some(exec_result(py, n, r, &record)?),
                    None => None,
                };
                let (lazy, key) = if record_now {
                    (
                        audit_event(py, n, &record, capture_code)?,
                        intern!(py, "record"),
                    )
                } else {
                    let lazy = LazyRecord {
                        record,
                        capture_code,
                        built: PyOnceLock::new(),
                    };
                    (Bound::new(py, lazy)?.into_any(), intern!(py, "_record"))
                };
                let result = match result {
                    Some((obj, d)) => {
                        d.set_item(key, &lazy)?;
                        obj
                    }
                    None => py.None().into_bound(py),
                };
                let tool_output = match tool_output {
                    Some(v) => json_value(py, v)?,
                    None => py.None().into_bound(py),
                };
                // `_outcome.Outcome(lazy, result, tool_output, decision, status,
                // error_code)`, its slots set here rather than by its `__init__`.
                let out = n.object_new.bind(py).call1((n.outcome.bind(py),))?;
                out.setattr(intern!(py, "_record"), lazy)?;
                out.setattr(intern!(py, "result"), result)?;
                out.setattr(intern!(py, "tool_output"), tool_output)?;
                out.setattr(intern!(py, "decision"), decision)?;
                out.setattr(intern!(py, "status"), status)?;
                out.setattr(intern!(py, "error_code"), error_code)?;
                Ok(out)
            }
        }
    }
}

/// An operation's record, made the package's `AuditEvent` when first asked for
/// (`get()`; the same object after): `Outcome.record` and `ExecResult.record` ask. A
/// `run_code` whose caller reads only the output never makes it. Making it was most of
/// the ~78 us the answer's values took on the event loop's thread, which runs them cold
/// right after it woke for the answer.
#[pyclass(frozen, module = "sandboxio._native")]
pub struct LazyRecord {
    record: OperationRecord,
    capture_code: bool,
    built: PyOnceLock<Py<PyAny>>,
}

#[pymethods]
impl LazyRecord {
    /// The record as an `AuditEvent` (`AuditEvent.from_dict` of its JSON).
    fn get(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.built
            .get_or_try_init(py, || {
                audit_event(py, names(py)?, &self.record, self.capture_code).map(Bound::unbind)
            })
            .map(|e| e.clone_ref(py))
    }
}

/// A frozen dataclass instance with its fields set at once, as `from_dict` does.
fn instance<'py>(
    py: Python<'py>,
    n: &Names,
    class: &Py<PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let obj = n.object_new.bind(py).call1((class.bind(py),))?;
    let dict = obj
        .getattr(intern!(py, "__dict__"))?
        .cast_into::<PyDict>()?;
    Ok((obj, dict))
}

/// `AuditEvent.from_dict(record JSON, capture_code=...)`, from the record itself.
fn audit_event<'py>(
    py: Python<'py>,
    n: &Names,
    r: &OperationRecord,
    capture_code: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (event, d) = instance(py, n, &n.audit_event)?;
    let ts = &r.ts;
    // The gateway's RFC 3339 time read by `datetime.fromisoformat`: cut to microseconds.
    let micros = (ts.nanosecond() / 1000).min(999_999);
    let ts = n.datetime.bind(py).call1((
        ts.year(),
        ts.month(),
        ts.day(),
        ts.hour(),
        ts.minute(),
        ts.second(),
        micros,
        n.utc.bind(py),
    ))?;
    d.set_item(intern!(py, "ts"), ts)?;
    d.set_item(intern!(py, "event"), &r.event)?;
    d.set_item(intern!(py, "sandbox_id"), &r.sandbox_id)?;
    d.set_item(intern!(py, "backend"), &r.backend)?;
    let isolation = match r.isolation {
        None => py.None().into_bound(py),
        Some(t) => match n.tiers.bind(py).get_item(t.as_str()) {
            Ok(v) => v,
            // A tier the package has no member for: the same ValueError as `from_dict`.
            Err(_) => n.tier.bind(py).call1((t.as_str(),))?,
        },
    };
    d.set_item(intern!(py, "isolation"), isolation)?;
    d.set_item(intern!(py, "tenant_id"), &r.tenant_id)?;
    d.set_item(intern!(py, "session_id"), &r.session_id)?;
    d.set_item(intern!(py, "code_sha256"), &r.code_sha256)?;
    let argv = match &r.argv {
        Some(a) => PyTuple::new(py, a)?.into_any(),
        None => py.None().into_bound(py),
    };
    d.set_item(intern!(py, "argv"), argv)?;
    d.set_item(intern!(py, "exit_code"), r.exit_code)?;
    d.set_item(intern!(py, "duration_ms"), r.duration_ms)?;
    d.set_item(intern!(py, "bytes_in"), r.bytes_in)?;
    d.set_item(intern!(py, "bytes_out"), r.bytes_out)?;
    d.set_item(intern!(py, "network_denials"), r.network_denials)?;
    let code = if capture_code { r.code.as_ref() } else { None };
    d.set_item(intern!(py, "code"), code)?;
    d.set_item(intern!(py, "operation_id"), &r.operation_id)?;
    d.set_item(intern!(py, "tool_name"), &r.tool_name)?;
    d.set_item(intern!(py, "agent_id"), &r.agent_id)?;
    d.set_item(intern!(py, "path"), &r.path)?;
    d.set_item(intern!(py, "signal"), r.signal)?;
    d.set_item(intern!(py, "status"), r.status.as_str())?;
    d.set_item(intern!(py, "decision"), r.verdict.as_str())?;
    d.set_item(intern!(py, "layer"), r.layer.as_str())?;
    // `_rule`: `FILE:ID`, or the id alone.
    let rules = PyTuple::new(
        py,
        r.rules.iter().map(|rule| match rule.file.as_deref() {
            Some(file) if !file.is_empty() => format!("{file}:{}", rule.id),
            _ => rule.id.clone(),
        }),
    )?;
    d.set_item(intern!(py, "rules"), rules)?;
    d.set_item(intern!(py, "reason"), &r.reason)?;
    d.set_item(intern!(py, "error_code"), &r.error_code)?;
    d.set_item(
        intern!(py, "cost_reserved"),
        money(py, n, &r.cost_reserved)?,
    )?;
    d.set_item(intern!(py, "cost_settled"), money(py, n, &r.cost_settled)?)?;
    d.set_item(intern!(py, "approval_id"), &r.approval_id)?;
    d.set_item(intern!(py, "approver"), &r.approver)?;
    d.set_item(intern!(py, "trace_id"), &r.trace_id)?;
    d.set_item(intern!(py, "span_id"), &r.span_id)?;
    // A map's keys are sorted: the `(key, value)` pairs `from_dict` sorts.
    let labels = PyTuple::new(py, r.labels.iter())?;
    d.set_item(intern!(py, "labels"), labels)?;
    Ok(event)
}

/// `_money`: `None`, the shared zero, or a `Decimal` of the amount's text.
fn money<'py>(
    py: Python<'py>,
    n: &Names,
    m: &Option<sandboxio_core::Money>,
) -> PyResult<Bound<'py, PyAny>> {
    match m {
        None => Ok(py.None().into_bound(py)),
        Some(m) => {
            let text = String::from(*m);
            if text == "0" {
                Ok(n.zero.bind(py).clone())
            } else {
                n.decimal.bind(py).call1((text,))
            }
        }
    }
}

/// `ExecResult.from_outcome(result JSON, record)`, from the result itself, but for its
/// `record`: the caller puts the [`LazyRecord`] under `_record` in the instance's
/// `__dict__` (`results.py` makes the field from it on first use). Answers the instance
/// and its `__dict__`.
fn exec_result<'py>(
    py: Python<'py>,
    n: &Names,
    r: ExecResult,
    record: &OperationRecord,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let (obj, d) = instance(py, n, &n.exec_result)?;
    let (stdout, stdout_raw) = text_and_bytes(py, &r.stdout)?;
    let (stderr, stderr_raw) = text_and_bytes(py, &r.stderr)?;
    d.set_item(intern!(py, "stdout"), stdout)?;
    d.set_item(intern!(py, "stderr"), stderr)?;
    d.set_item(intern!(py, "exit_code"), record.exit_code)?;
    d.set_item(intern!(py, "signal"), record.signal)?;
    d.set_item(intern!(py, "timed_out"), r.timed_out)?;
    d.set_item(intern!(py, "oom_killed"), r.oom_killed)?;
    let duration_ms = if r.duration_ms != 0 {
        r.duration_ms
    } else {
        record.duration_ms
    };
    d.set_item(intern!(py, "duration_ms"), duration_ms)?;
    let sandbox_id = if !r.sandbox_id.is_empty() {
        r.sandbox_id.as_str()
    } else {
        record.sandbox_id.as_deref().unwrap_or("")
    };
    d.set_item(intern!(py, "sandbox_id"), sandbox_id)?;
    d.set_item(intern!(py, "stdout_raw"), stdout_raw)?;
    d.set_item(intern!(py, "stderr_raw"), stderr_raw)?;
    // What the program wrote beyond the capture's cap (`ExecResult.from_outcome` reads the
    // same fields of the JSON).
    d.set_item(intern!(py, "stdout_truncated"), r.stdout_truncated)?;
    d.set_item(intern!(py, "stderr_truncated"), r.stderr_truncated)?;
    d.set_item(intern!(py, "stdout_bytes"), r.stdout_bytes)?;
    d.set_item(intern!(py, "stderr_bytes"), r.stderr_bytes)?;
    Ok((obj, d))
}

/// The bytes, and their text as `bytes.decode("utf-8", "replace")` gives it.
fn text_and_bytes<'py>(
    py: Python<'py>,
    b: &[u8],
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let raw = PyBytes::new(py, b);
    let text = match std::str::from_utf8(b) {
        Ok(s) => PyString::new(py, s).into_any(),
        // Python's own decoder, so the replacement characters are where it puts them.
        Err(_) => raw.call_method1(intern!(py, "decode"), ("utf-8", "replace"))?,
    };
    Ok((text, raw.into_any()))
}

/// A JSON value as `json.loads` makes it.
fn json_value(py: Python<'_>, v: serde_json::Value) -> PyResult<Bound<'_, PyAny>> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(x) => {
            if let Some(i) = x.as_i64() {
                i.into_bound_py_any(py)?
            } else if let Some(u) = x.as_u64() {
                u.into_bound_py_any(py)?
            } else {
                x.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?
            }
        }
        Value::String(s) => PyString::new(py, &s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, json_value(py, item)?)?;
            }
            dict.into_any()
        }
    })
}
