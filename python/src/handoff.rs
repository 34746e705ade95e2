//! A Rust future as an `asyncio.Future` of the caller's event loop, with one hand-off
//! each way.
//!
//! pyo3-async-runtimes' `future_into_py` spawns a task that spawns the future as a second
//! task (to catch its panic), and hands the result over from the blocking pool: three
//! thread wake-ups per call (a worker for each task, a blocking thread) before the event
//! loop's own. Here the future runs as one task (a panic is caught in place), and the
//! worker that finished it schedules the result on the loop itself
//! (`call_soon_threadsafe`): one wake-up of a worker, one of the loop. Taking the GIL on a
//! worker is what the binding's Python sinks and approvers already do; the event loop
//! releases it whenever it waits, which is when a result is awaited.
//!
//! Cancelling the Python future (its task cancelled) drops the Rust future, as before.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use futures_util::FutureExt as _;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt as _;
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::{own, TASK_PANICKED};

/// Told when the Python future is done; a cancelled one drops the Rust future.
#[pyclass(module = "sandboxio._native")]
struct Done {
    cancel: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl Done {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            if let Some(tx) = self.cancel.lock().ok().and_then(|mut c| c.take()) {
                let _ = tx.send(());
            }
        }
        Ok(())
    }
}

/// Runs on the event loop's thread: completes the future unless it was cancelled.
#[pyclass(module = "sandboxio._native")]
struct Complete;

#[pymethods]
impl Complete {
    fn __call__(&self, fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        let method = if ok { "set_result" } else { "set_exception" };
        fut.call_method1(method, (value,))?;
        Ok(())
    }
}

/// Schedules the outcome on the loop (attached to Python by the caller).
fn hand_over<T>(
    py: Python<'_>,
    event_loop: &Py<PyAny>,
    fut: &Py<PyAny>,
    result: PyResult<T>,
) -> PyResult<()>
where
    T: for<'py> IntoPyObject<'py>,
{
    let (ok, value) = match result.and_then(|v| v.into_py_any(py)) {
        Ok(v) => (true, v),
        Err(e) => (false, e.into_value(py).into_any()),
    };
    event_loop
        .bind(py)
        .call_method1("call_soon_threadsafe", (Complete, fut.bind(py), ok, value))?;
    Ok(())
}

/// `fut` as an awaitable of the current event loop, run on `rt` within `locals` (so the
/// sinks and approvers it calls find the caller's loop).
pub fn spawn<'py, F, T>(
    py: Python<'py>,
    rt: &Handle,
    locals: TaskLocals,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = locals.event_loop(py);
    let py_fut = event_loop.call_method0("create_future")?;
    let (tx, rx) = oneshot::channel();
    py_fut.call_method1(
        "add_done_callback",
        (Done {
            cancel: Mutex::new(Some(tx)),
        },),
    )?;
    let target: Py<PyAny> = py_fut.clone().unbind();
    let event_loop: Py<PyAny> = event_loop.unbind();
    let task = crate::rt::scope(locals, async move {
        let outcome = tokio::select! {
            r = AssertUnwindSafe(fut).catch_unwind() => r,
            _ = rx => return,
        };
        let result = outcome.unwrap_or_else(|_| {
            Err(own(
                TASK_PANICKED,
                "internal",
                "the binding's task for this call panicked",
            ))
        });
        // After the exit hook no loop runs and nothing attaches to Python (`rt::attach`).
        let _ = crate::rt::attach(|py| hand_over(py, &event_loop, &target, result));
    });
    rt.spawn(task);
    Ok(py_fut)
}
