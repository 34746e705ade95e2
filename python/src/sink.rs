//! A Python audit sink as a gateway audit sink. The gateway awaits it inline for every
//! record, like its own sinks. The Python side (`sandboxio._sinkcall.SinkCall`) owns the
//! sink's timeout and failure mode: it awaits `sink.emit(event)` under
//! `asyncio.wait_for`, turns a failure into an `AuditSinkWarning` in `warn` mode, and
//! raises in `fail` mode, which this adapter hands to the gateway as a sink failure.

use async_trait::async_trait;
use pyo3::prelude::*;
use sandboxio_gateway::{AuditError, AuditEvent, AuditSink};

use crate::approver::on_caller_loop;

/// Why a Python sink was not called: the interpreter is exiting (see `rt.rs`).
const EXITING: &str = "the python interpreter is exiting";

pub struct PySink {
    name: String,
    /// A `SinkCall`: `call.emit_json(line) -> coroutine`.
    call: Py<PyAny>,
}

impl PySink {
    pub fn new(py: Python<'_>, call: Py<PyAny>) -> PyResult<Self> {
        let name: String = call.bind(py).getattr("name")?.extract()?;
        Ok(PySink { name, call })
    }
}

#[async_trait]
impl AuditSink for PySink {
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let line = event.as_json()?;
        let fail = |why: String| AuditError::SinkFailed {
            sink: self.name.clone(),
            why,
            timed_out: false,
        };
        let fut = crate::rt::attach(|py| {
            let coro = self.call.bind(py).call_method1("emit_json", (line,))?;
            on_caller_loop(py, coro)
        })
        .ok_or_else(|| fail(EXITING.into()))?
        .map_err(|e| fail(e.to_string()))?;
        match fut.await {
            Ok(_) => Ok(()),
            Err(e) => Err(fail(
                crate::rt::attach(|py| describe(py, &e)).unwrap_or_else(|| EXITING.into()),
            )),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// `Type: message` of a Python exception, for the gateway's warning and error.
pub fn describe(py: Python<'_>, e: &PyErr) -> String {
    let ty = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    format!("{ty}: {}", e.value(py))
}
