//! A Rust future as an `asyncio.Future` of the caller's event loop, with one hand-off
//! each way.
//!
//! pyo3-async-runtimes' `future_into_py` spawns a task that spawns the future as a second
//! task (to catch its panic), and hands the result over from the blocking pool: three
//! thread wake-ups per call (a worker for each task, a blocking thread) before the event
//! loop's own. Here the future runs as one task (a panic is caught in place), and the
//! worker that finished it posts the result to the loop's [`Inbox`] without touching
//! Python: one socket write, which the loop watches (`add_reader`), and the result is made
//! a Python object and set on the loop's own thread. Before, the worker took the GIL and
//! called `call_soon_threadsafe`, whose socket write woke the loop's thread only for it to
//! wait for the GIL the worker still held (a second wake-up when the worker let it go),
//! and a worker's GIL round trip with a fresh thread state on every call; that path
//! remains for a loop that cannot watch a socket.
//!
//! Cancelling the Python future (its task cancelled) drops the Rust future, unless the
//! caller gave an [`OnCancel`]: a gateway operation is not cancel-safe (dropped mid-flight
//! it leaves no record, an open journal intent and a held budget reservation), so its
//! token is fired instead (the program's whole tree is killed) and the future runs to its
//! end on the runtime, which records it `cancelled`; its result is dropped. The Python
//! side sees `CancelledError` at once, and [`Settling::wait`] lets it wait for the end.

use std::future::Future;
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use futures_util::FutureExt as _;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::IntoPyObjectExt as _;
use pyo3_async_runtimes::TaskLocals;
use sandboxio_gateway::CancelToken;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use crate::error::{own, TASK_PANICKED};

/// Why an operation's token fires when its Python future is cancelled (the record's
/// reason: `cancelled: ...`).
pub const CANCELLED_BY_CALLER: &str = "the caller cancelled the operation";

/// How many cancelled operations (of one sandbox) still run to their end: counted from
/// the moment the Python future is cancelled (on the loop's thread, before the awaiting
/// task sees `CancelledError`) until the Rust future has ended.
#[derive(Debug)]
pub struct Settling {
    running: watch::Sender<usize>,
}

impl Default for Settling {
    fn default() -> Self {
        Settling {
            running: watch::channel(0).0,
        }
    }
}

impl Settling {
    fn enter(self: &Arc<Self>) -> SettlingGuard {
        self.running.send_modify(|n| *n += 1);
        SettlingGuard(self.clone())
    }

    /// Until no cancelled operation runs any more.
    pub async fn wait(&self) {
        let mut rx = self.running.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// One cancelled operation still running; counted down when dropped (the operation ended,
/// or the runtime was shut down).
pub(crate) struct SettlingGuard(Arc<Settling>);

impl Drop for SettlingGuard {
    fn drop(&mut self) {
        self.0.running.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// What cancelling the Python future does instead of dropping the Rust future: fires
/// `token` (in the operation's `CallOptions.cancel`) and lets the future end, counted in
/// `settling` meanwhile.
#[derive(Clone)]
pub struct OnCancel {
    pub token: CancelToken,
    pub settling: Arc<Settling>,
}

impl OnCancel {
    /// Fires the token and counts the operation as settling.
    pub(crate) fn fire(&self) -> SettlingGuard {
        let guard = self.settling.enter();
        self.token.cancel(CANCELLED_BY_CALLER);
        guard
    }
}

/// Told when the Python future is done: a cancelled one drops the Rust future, or, with an
/// [`OnCancel`], fires its token (here, on the loop's thread, so the operation counts as
/// settling before the awaiting task resumes) and tells the task to run on to the end.
#[pyclass(module = "sandboxio._native")]
struct Done {
    cancel: Mutex<Option<oneshot::Sender<Option<SettlingGuard>>>>,
    on_cancel: Option<OnCancel>,
}

#[pymethods]
impl Done {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            if let Some(tx) = self.cancel.lock().ok().and_then(|mut c| c.take()) {
                // A task that has ended already gets nothing: the guard comes back and
                // is dropped here.
                let _ = tx.send(self.on_cancel.as_ref().map(OnCancel::fire));
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
        complete(fut, ok, value)
    }
}

/// On the event loop's thread: sets the future's result or exception unless it is done
/// (cancelled) already.
fn complete(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    settle(fut, ok, value)
}

/// Sets the future's result (`ok`) or exception.
fn settle(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let method = if ok {
        intern!(fut.py(), "set_result")
    } else {
        intern!(fut.py(), "set_exception")
    };
    fut.call_method1(method, (value,))?;
    Ok(())
}

/// Schedules the outcome on the loop (attached to Python by the caller): the path for a
/// loop that has no [`Inbox`].
fn hand_over<T>(
    py: Python<'_>,
    event_loop: &Py<PyAny>,
    fut: &Py<PyAny>,
    result: PyResult<T>,
) -> PyResult<()>
where
    T: for<'py> IntoPyObject<'py>,
{
    let (ok, value) = as_python(py, result);
    event_loop
        .bind(py)
        .call_method1("call_soon_threadsafe", (Complete, fut.bind(py), ok, value))?;
    Ok(())
}

/// `(true, value)` or `(false, exception)`, as Python objects.
fn as_python<T>(py: Python<'_>, result: PyResult<T>) -> (bool, Py<PyAny>)
where
    T: for<'py> IntoPyObject<'py>,
{
    match result.and_then(|v| v.into_py_any(py)) {
        Ok(v) => (true, v),
        Err(e) => (false, e.into_value(py).into_any()),
    }
}

/// What the loop's thread runs to complete one future: the result made a Python object.
type Deliver = Box<dyn for<'py> FnOnce(Python<'py>) -> (bool, Py<PyAny>) + Send>;

/// One result waiting in a [`Mailbox`]: the Python future, its [`Done`] callback (taken
/// off before the result is set) and the result.
struct Posted {
    fut: Py<PyAny>,
    done: Py<PyAny>,
    deliver: Deliver,
}

/// Results waiting for the event loop's thread, and the socket pair that tells it.
struct Mailbox {
    /// Watched by the loop (`add_reader`); drained before the queue is taken.
    rx: UnixStream,
    tx: UnixStream,
    queue: Mutex<Vec<Posted>>,
}

impl Mailbox {
    fn new() -> std::io::Result<Mailbox> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Mailbox {
            rx,
            tx,
            queue: Mutex::new(Vec::new()),
        })
    }

    /// From any thread, without Python: queues the result and, if the queue was empty (the
    /// loop not yet told), writes one byte. No GIL is taken here.
    fn post(&self, posted: Posted) {
        let first = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.push(posted);
            q.len() == 1
        };
        if first {
            let _ = (&self.tx).write(&[1]);
        }
    }
}

/// One per event loop (kept in a `WeakKeyDictionary` keyed by the loop, so it goes when
/// the loop is collected; a closed loop's selector lets go of it at once): the loop calls
/// it when the mailbox's socket is readable, and it completes every future whose result
/// is queued, on the loop's thread.
#[pyclass(frozen, module = "sandboxio._native")]
struct Inbox {
    mailbox: Arc<Mailbox>,
}

#[pymethods]
impl Inbox {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        // Drain first: a result queued after this point writes a new byte. A short read
        // emptied the socket (one system call, not a second one to see it empty).
        let mut buf = [0u8; 64];
        while matches!((&self.mailbox.rx).read(&mut buf), Ok(n) if n == buf.len()) {}
        let items =
            std::mem::take(&mut *self.mailbox.queue.lock().unwrap_or_else(|e| e.into_inner()));
        let mut first_error = None;
        for Posted { fut, done, deliver } in items {
            let (ok, value) = deliver(py);
            if let Err(e) = complete_posted(fut.bind(py), done.bind(py), ok, value.bind(py)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// [`complete`] for a result that came through the inbox: the future's [`Done`] callback
/// is taken off first, since a future that gets its result was not cancelled. Left on, it
/// was one more handle for the loop to schedule and run (a call of `cancelled()`) on
/// every operation, between the result and the awaiting task's resumption. It also
/// tells whether the future is done: a future that is done (cancelled: nothing else
/// completes it) has handed its callbacks to the loop already, so none is taken off.
fn complete_posted(
    fut: &Bound<'_, PyAny>,
    done: &Bound<'_, PyAny>,
    ok: bool,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let removed = fut.call_method1(intern!(fut.py(), "remove_done_callback"), (done,))?;
    if removed.extract::<usize>()? == 0 {
        return Ok(());
    }
    settle(fut, ok, value)
}

/// The loops' inboxes, by loop (a `weakref.WeakKeyDictionary`).
static INBOXES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The mailbox of the loop seen last, with a weak reference to that loop: most programs
/// run one loop, and the dictionary's lookup (a Python method making a weak reference
/// per call) ran on the loop's thread before every operation. Holds the mailbox (its two
/// sockets) of a loop that is gone until another loop's replaces it.
static LAST: Mutex<Option<(Py<PyAny>, Arc<Mailbox>)>> = Mutex::new(None);

/// `weakref.ref`.
static WEAKREF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// [`mailbox`], through [`LAST`] when `event_loop` is the loop seen last.
fn mailbox_of(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Option<Arc<Mailbox>> {
    if let Ok(last) = LAST.lock() {
        if let Some((loop_ref, m)) = last.as_ref() {
            if loop_ref.bind(py).call0().is_ok_and(|l| l.is(event_loop)) {
                return Some(m.clone());
            }
        }
    }
    let m = mailbox(py, event_loop)?;
    let weak = WEAKREF
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("weakref")?.getattr("ref")?.unbind())
        })
        .ok()
        .and_then(|r| r.bind(py).call1((event_loop,)).ok());
    if let (Some(weak), Ok(mut last)) = (weak, LAST.lock()) {
        // The one it replaces is dropped here, attached.
        let _old = last.replace((weak.unbind(), m.clone()));
    }
    Some(m)
}

/// The mailbox of `event_loop`, made and watched on first use; `None` if that loop cannot
/// watch a socket (`add_reader` unsupported) or be a weak key: its results then go
/// through `call_soon_threadsafe` ([`hand_over`]).
fn mailbox(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> Option<Arc<Mailbox>> {
    let inboxes = INBOXES
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py
                .import("weakref")?
                .getattr("WeakKeyDictionary")?
                .call0()?
                .unbind())
        })
        .ok()?
        .bind(py);
    if let Ok(found) = inboxes.call_method1("get", (event_loop,)) {
        if let Ok(inbox) = found.cast::<Inbox>() {
            return Some(inbox.get().mailbox.clone());
        }
    }
    let mailbox = Arc::new(Mailbox::new().ok()?);
    let inbox = Bound::new(
        py,
        Inbox {
            mailbox: mailbox.clone(),
        },
    )
    .ok()?;
    inboxes.set_item(event_loop, &inbox).ok()?;
    let fd = mailbox.rx.as_raw_fd();
    if event_loop.call_method1("add_reader", (fd, &inbox)).is_err() {
        let _ = inboxes.del_item(event_loop);
        return None;
    }
    Some(mailbox)
}

/// `fut` as an awaitable of the current event loop, run on `rt` within `locals` (so the
/// sinks and approvers it calls find the caller's loop).
///
/// With `start_here`, the future's first poll runs on this thread, without the GIL and in
/// the runtime's context, before it goes to the runtime: an operation's synchronous start
/// (the request resolved, the policy decided, up to its first wait, the admission's store
/// call) then begins at once rather than after a parked worker wakes, which on a small VM
/// took tens of microseconds of every call. The caller asks for it only for a small
/// request: that start runs on the event loop's thread, which waits meanwhile. A first
/// poll's wakers are a no-op one; the runtime polls the task again as soon as it is
/// spawned, and every poll registers its waker anew, so no wake-up is lost.
///
/// With `on_cancel`, cancelling the Python future (or dropping it unfinished) fires the
/// token and the future still runs to its end (see the module's documentation).
pub fn spawn<'py, F, T>(
    py: Python<'py>,
    rt: &Handle,
    locals: TaskLocals,
    fut: F,
    start_here: bool,
    on_cancel: Option<OnCancel>,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = locals.event_loop(py);
    let py_fut = event_loop.call_method0(intern!(py, "create_future"))?;
    let (tx, rx) = oneshot::channel();
    let done = Bound::new(
        py,
        Done {
            cancel: Mutex::new(Some(tx)),
            on_cancel: on_cancel.clone(),
        },
    )?
    .into_any();
    py_fut.call_method1(intern!(py, "add_done_callback"), (&done,))?;
    let done = done.unbind();
    let target: Py<PyAny> = py_fut.clone().unbind();
    let mailbox = mailbox_of(py, &event_loop);
    let event_loop: Py<PyAny> = event_loop.unbind();
    let mut task = crate::rt::scope(locals, async move {
        let mut fut = std::pin::pin!(AssertUnwindSafe(fut).catch_unwind());
        let outcome = tokio::select! {
            r = &mut fut => r,
            told = rx => {
                if let Some(c) = on_cancel {
                    // Cancelled (the guard came with the message), or the Python future
                    // was dropped unfinished (no message): either way nobody waits for
                    // the result, and the operation must end and be recorded.
                    let _guard = told.ok().flatten().unwrap_or_else(|| c.fire());
                    let _ = fut.await;
                }
                return;
            }
        };
        let result = outcome.unwrap_or_else(|_| {
            Err(own(
                TASK_PANICKED,
                "internal",
                "the binding's task for this call panicked",
            ))
        });
        match mailbox {
            Some(m) => m.post(Posted {
                fut: target,
                done,
                deliver: Box::new(move |py| as_python(py, result)),
            }),
            // After the exit hook no loop runs and nothing attaches to Python (`rt::attach`).
            None => {
                let _ = crate::rt::attach(|py| hand_over(py, &event_loop, &target, result));
            }
        }
    });
    if start_here {
        let done = py.detach(|| {
            let _in_runtime = rt.enter();
            let mut cx = Context::from_waker(Waker::noop());
            task.as_mut().poll(&mut cx).is_ready()
        });
        if done {
            return Ok(py_fut);
        }
    }
    rt.spawn(task);
    Ok(py_fut)
}
