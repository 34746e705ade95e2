//! A Python approval callback as the gateway's approver, and the one place that schedules
//! Python coroutines on the caller's event loop.

use std::future::Future;

use async_trait::async_trait;
use pyo3::prelude::*;
use sandboxio_gateway::store::Approval;
use sandboxio_gateway::{ApprovalAnswer, ApprovalCallback};

/// Runs `coro` on the event loop of the Python call that started the current operation
/// (the binding scopes every operation with that loop), and awaits it from Rust.
pub fn on_caller_loop(
    py: Python<'_>,
    coro: Bound<'_, PyAny>,
) -> PyResult<impl Future<Output = PyResult<Py<PyAny>>> + Send + 'static> {
    let locals = crate::rt::current_locals(py)?;
    pyo3_async_runtimes::into_future_with_locals(&locals, coro)
}

pub struct PyApprover {
    /// `sandboxio._approval.Decider`: `decider.decide_json(approval) -> coroutine`
    /// answering `(approve, approver, reason)` or `None`.
    decider: Py<PyAny>,
}

impl PyApprover {
    pub fn new(decider: Py<PyAny>) -> Self {
        PyApprover { decider }
    }
}

#[async_trait]
impl ApprovalCallback for PyApprover {
    async fn decide(&self, approval: &Approval) -> Option<ApprovalAnswer> {
        let json = serde_json::to_string(approval).ok()?;
        // No answer once the interpreter is exiting: the ask is denied at its timeout.
        let fut = crate::rt::attach(|py| {
            let coro = self.decider.bind(py).call_method1("decide_json", (json,))?;
            on_caller_loop(py, coro)
        })?;
        let answer = match fut {
            Ok(f) => f.await,
            Err(e) => Err(e),
        };
        crate::rt::attach(|py| match answer {
            Ok(v) => {
                let (approve, approver, reason): (bool, String, Option<String>) =
                    v.bind(py).extract().ok()?;
                Some(ApprovalAnswer {
                    approve,
                    approver,
                    reason,
                })
            }
            // A callback that raised gives no answer: the ask is denied at its timeout.
            Err(e) => {
                let why = crate::sink::describe(py, &e);
                let _ = self.decider.bind(py).call_method1("report_failure", (why,));
                None
            }
        })
        .flatten()
    }
}
