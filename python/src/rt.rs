//! The extension's tokio runtime, owned here so that it stops in order at interpreter exit.
//!
//! pyo3-async-runtimes' own tokio runtime is a process-wide static that is never shut
//! down, so its threads outlive the interpreter. One of them can be inside Python at that
//! moment (handing an operation's result to the event loop: `call_soon_threadsafe` writes
//! to the loop's socket with the GIL released); when it asks for the GIL back while the
//! interpreter finalises, CPython ends the thread with `pthread_exit`, whose forced unwind
//! through Rust frames aborts the whole process (SIGABRT after the program's last output).
//!
//! So the binding runs every Python-facing future on this runtime instead (through
//! pyo3-async-runtimes' generic API), and an `atexit` hook ([`shutdown`]), which runs
//! before the interpreter starts finalising, stops it: from then on no Rust thread attaches
//! to Python ([`attach`] answers `None`, results are no longer handed to event loops), the
//! runtime's tasks are dropped and its threads joined, with the GIL released so that a
//! thread waiting for it can finish what it was doing.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObject;
use pyo3_async_runtimes::generic::{self, ContextExt};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{own, RUNTIME_STOPPED};

/// How long the exit hook waits for the runtime's blocking threads (a store call, a result
/// being handed over) before it lets the interpreter go on.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

struct State {
    /// Taken (and shut down) by [`shutdown`].
    runtime: Option<Runtime>,
    /// Kept after the shutdown: spawning on it then drops the task at once.
    handle: Option<Handle>,
}

static STATE: Mutex<State> = Mutex::new(State {
    runtime: None,
    handle: None,
});

/// Set by the exit hook before anything else: no Rust thread attaches to Python after it.
static STOPPED: AtomicBool = AtomicBool::new(false);

tokio::task_local! {
    static LOCALS: OnceCell<TaskLocals>;
}

/// Whether the exit hook ran (the interpreter is about to finalise).
pub fn stopped() -> bool {
    STOPPED.load(Ordering::SeqCst)
}

fn stopped_error() -> PyErr {
    own(
        RUNTIME_STOPPED,
        "usage",
        "the native runtime was stopped at interpreter exit",
    )
}

/// The runtime's handle, building the runtime on first use.
fn handle() -> PyResult<Handle> {
    let mut st = STATE.lock().map_err(|_| {
        own(
            RUNTIME_STOPPED,
            "internal",
            "the runtime's state lock is poisoned",
        )
    })?;
    if let Some(h) = &st.handle {
        return Ok(h.clone());
    }
    if stopped() {
        return Err(stopped_error());
    }
    let rt = Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandboxio-rt")
        .build()
        .map_err(|e| {
            own(
                RUNTIME_STOPPED,
                "internal",
                format!("cannot start the async runtime: {e}"),
            )
        })?;
    let h = rt.handle().clone();
    st.runtime = Some(rt);
    st.handle = Some(h.clone());
    Ok(h)
}

/// Runs `f` attached to the interpreter, unless the interpreter is exiting (the exit hook
/// ran) or cannot be attached to: then `None`, and nothing touches Python. Every Python
/// call the binding makes from a Rust thread (sinks, approvers) goes through here.
pub fn attach<F, R>(f: F) -> Option<R>
where
    F: for<'py> FnOnce(Python<'py>) -> R,
{
    if stopped() {
        return None;
    }
    Python::try_attach(f)
}

/// `loop`-aware awaitable of a Rust future, run on this runtime (the binding's one way to
/// hand a future to Python; `handoff.rs`). After the exit hook it refuses with `SBX_E2120`.
pub fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    future_into_py_from(py, fut, false, None)
}

/// [`future_into_py`], the future's first poll made on this thread when `start_here`, and
/// run to its end when its Python future is cancelled if `on_cancel` is given (see
/// [`crate::handoff::spawn`]).
pub fn future_into_py_from<F, T>(
    py: Python<'_>,
    fut: F,
    start_here: bool,
    on_cancel: Option<crate::handoff::OnCancel>,
) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    if stopped() {
        return Err(stopped_error());
    }
    let rt = handle()?;
    if GENERIC_HANDOFF.load(Ordering::Relaxed) {
        return match on_cancel {
            None => generic::future_into_py::<Native, F, T>(py, fut),
            Some(c) => {
                // pyo3-async-runtimes drops the future it was given when the Python future
                // is cancelled: that one only waits for the operation's own task.
                let task = rt.spawn(scope(current_locals(py)?, fut));
                let mut wait = RunsToEnd {
                    task: Some(task),
                    on_cancel: c,
                };
                generic::future_into_py::<Native, _, T>(py, async move {
                    let Some(task) = wait.task.as_mut() else {
                        return Err(stopped_error());
                    };
                    let r = task.await;
                    wait.ended();
                    r.map_err(|_| {
                        own(
                            crate::error::TASK_PANICKED,
                            "internal",
                            "the binding's task for this call panicked",
                        )
                    })?
                })
            }
        };
    }
    let locals = current_locals(py)?;
    crate::handoff::spawn(py, &rt, locals, fut, start_here, on_cancel)
}

/// The wait for an operation's own task (the generic hand-off): dropped before the task
/// ended, it fires the operation's token and the task runs on.
struct RunsToEnd<R: Send + 'static> {
    task: Option<tokio::task::JoinHandle<R>>,
    on_cancel: crate::handoff::OnCancel,
}

impl<R: Send + 'static> RunsToEnd<R> {
    /// The task has ended: nothing to do when dropped.
    fn ended(&mut self) {
        self.task = None;
    }
}

impl<R: Send + 'static> Drop for RunsToEnd<R> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            let guard = self.on_cancel.fire();
            if let Ok(h) = handle() {
                h.spawn(async move {
                    let _guard = guard;
                    let _ = task.await;
                });
            }
        }
    }
}

/// For the benchmark only: hand futures over through pyo3-async-runtimes' generic path
/// (two tasks and a blocking-pool thread per call) instead of `handoff.rs`, so both can
/// be compared in one process (`python/bench/handoff.py`).
static GENERIC_HANDOFF: AtomicBool = AtomicBool::new(false);

/// `sandboxio._native._bench_generic_handoff(on)`: see [`GENERIC_HANDOFF`].
#[pyfunction]
pub fn _bench_generic_handoff(on: bool) {
    GENERIC_HANDOFF.store(on, Ordering::Relaxed);
}

/// The task locals (event loop and context) of the Python call in progress.
pub fn current_locals(py: Python<'_>) -> PyResult<TaskLocals> {
    generic::get_current_locals::<Native>(py)
}

/// Runs `fut` with the given task locals, so that the sinks and approvers it calls
/// schedule their coroutines on that event loop.
pub fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
where
    F: Future<Output = R> + Send + 'static,
{
    Native::scope(locals, fut)
}

/// The exit hook (registered with `atexit` when the module is imported; also callable as
/// `sandboxio._native.shutdown()`). Idempotent.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    STOPPED.store(true, Ordering::SeqCst);
    let runtime = match STATE.lock() {
        Ok(mut st) => st.runtime.take(),
        Err(_) => None,
    };
    if let Some(rt) = runtime {
        // Detached, so that a runtime thread waiting for the GIL can finish and be joined.
        py.detach(move || rt.shutdown_timeout(SHUTDOWN_WAIT));
    }
}

/// The runtime pyo3-async-runtimes schedules on.
struct Native;

/// A task on the runtime, or none (the runtime could not be had).
enum Join {
    Task(tokio::task::JoinHandle<()>),
    Refused,
}

impl Future for Join {
    type Output = Result<(), JoinFailure>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Join::Task(h) => Pin::new(h)
                .poll(cx)
                .map(|r| r.map_err(|e| JoinFailure(Some(e)))),
            Join::Refused => Poll::Ready(Err(JoinFailure(None))),
        }
    }
}

struct JoinFailure(Option<tokio::task::JoinError>);

impl generic::JoinError for JoinFailure {
    fn is_panic(&self) -> bool {
        self.0.as_ref().is_some_and(|e| e.is_panic())
    }
    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        match self.0 {
            Some(e) if e.is_panic() => e.into_panic(),
            _ => Box::new("the task did not run"),
        }
    }
}

impl generic::Runtime for Native {
    type JoinError = JoinFailure;
    type JoinHandle = Join;

    fn spawn<F>(fut: F) -> Join
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match handle() {
            Ok(h) => Join::Task(h.spawn(fut)),
            Err(_) => Join::Refused,
        }
    }

    /// pyo3-async-runtimes hands results to the event loop from here (attached to Python);
    /// after the exit hook that is skipped: no loop runs any more, and the thread must not
    /// touch an interpreter that is finalising.
    fn spawn_blocking<F>(f: F) -> Join
    where
        F: FnOnce() + Send + 'static,
    {
        match handle() {
            Ok(h) => Join::Task(h.spawn_blocking(move || {
                if !stopped() {
                    f()
                }
            })),
            Err(_) => Join::Refused,
        }
    }
}

impl ContextExt for Native {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        LOCALS.try_with(|c| c.get().cloned()).unwrap_or_default()
    }
}
