//! `NativeStream`: an exec or run_code whose output arrives while it runs. The operation
//! runs in its own task (scoped with the caller's event loop, so Python sinks and approval
//! callbacks still run there); `next()` yields each redacted event as JSON, then `None`;
//! `outcome()` answers the one outcome; `cancel()` (the iterator closed early, or its task
//! cancelled) kills the program's whole tree and waits for the operation's record.

use std::sync::Arc;

use pyo3::prelude::*;
use sandboxio_core::{ExecEvent, ExecRequest, OperationArgs};
use sandboxio_gateway::{CallOptions, CancelToken, GatewayError, Outcome, Redactor, Sandbox};
use tokio::sync::{mpsc, Mutex};

use crate::error::invalid;
use crate::session::NativeSandbox;

/// Events buffered between the program and the Python reader.
const EVENT_BUFFER: usize = 64;

type Pending = Option<(OperationArgs, ExecRequest, CallOptions)>;
type Running = Option<tokio::task::JoinHandle<Result<Outcome, GatewayError>>>;

#[pyclass(frozen, module = "sandboxio._native")]
pub struct NativeStream {
    sbx: Arc<Sandbox>,
    redactor: Arc<Redactor>,
    pending: std::sync::Mutex<Pending>,
    events: Arc<Mutex<Option<mpsc::Receiver<ExecEvent>>>>,
    done: Arc<Mutex<Running>>,
    cancel: CancelToken,
}

impl NativeStream {
    pub fn new(
        sbx: Arc<Sandbox>,
        redactor: Arc<Redactor>,
        args: OperationArgs,
        req: ExecRequest,
        extra: CallOptions,
    ) -> Self {
        NativeStream {
            sbx,
            redactor,
            pending: std::sync::Mutex::new(Some((args, req, extra))),
            events: Arc::new(Mutex::new(None)),
            done: Arc::new(Mutex::new(None)),
            cancel: CancelToken::new(),
        }
    }
}

fn event_json(e: &ExecEvent) -> Result<String, serde_json::Error> {
    serde_json::to_string(e)
}

#[pymethods]
impl NativeStream {
    /// Starts the operation (awaitable; the caller's loop runs its sinks).
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let Some((args, req, mut extra)) = self.pending.lock().ok().and_then(|mut p| p.take())
        else {
            return Err(invalid("the stream was already started"));
        };
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        extra.stream.events = Some(tx);
        extra.cancel = Some(self.cancel.clone());
        let locals = crate::rt::current_locals(py)?;
        let sbx = self.sbx.clone();
        let events = self.events.clone();
        let done = self.done.clone();
        crate::rt::future_into_py(py, async move {
            *events.lock().await = Some(rx);
            let task = crate::rt::scope(locals, async move {
                sbx.call(args, Some(req), None, extra).await
            });
            *done.lock().await = Some(tokio::spawn(task));
            Ok(())
        })
    }

    /// The next event as JSON, or `None` when the program is gone (awaitable).
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let events = self.events.clone();
        crate::rt::future_into_py(py, async move {
            let mut guard = events.lock().await;
            let Some(rx) = guard.as_mut() else {
                return Ok(None);
            };
            match rx.recv().await {
                Some(e) => Ok(Some(event_json(&e).map_err(|e| invalid(e.to_string()))?)),
                None => Ok(None),
            }
        })
    }

    /// The operation's outcome JSON, once it has ended (awaitable).
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let done = self.done.clone();
        let redactor = self.redactor.clone();
        crate::rt::future_into_py(py, async move {
            let Some(task) = done.lock().await.take() else {
                return Err(invalid(
                    "the stream was not started, or its outcome was taken",
                ));
            };
            let r = task
                .await
                .map_err(|e| invalid(format!("the streaming operation's task failed: {e}")))?;
            NativeSandbox::answer(&redactor, r)
        })
    }

    /// Kills the program if it still runs and waits until its operation has returned (its
    /// record says cancelled). Idempotent (awaitable).
    fn cancel<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.cancel.cancel("the stream was closed by its reader");
        let done = self.done.clone();
        let events = self.events.clone();
        crate::rt::future_into_py(py, async move {
            // Nobody reads any more: a full channel must not hold the program up.
            *events.lock().await = None;
            if let Some(task) = done.lock().await.take() {
                let _ = task.await;
            }
            Ok(())
        })
    }
}
