//! Open connections: the bound on how many, and which one gives its place to a new one
//! once the bound is reached. A connection with no request in progress (still sending its
//! first request's headers, or idle between requests), or whose request body has not moved
//! for [`STALLED`], is closed to make room, the one waiting the longest first; a
//! connection whose request is being received or served, its response still streaming
//! included, keeps its place. A client that opens connections and sends nothing, sends its
//! headers a byte at a time, or announces a body it never sends, therefore cannot hold
//! every place while others wait: each new connection pushes one of its waiting ones out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::Router;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a new connection waits for the place of the idle one it pushed out (which
/// closes at once, unless a request started on it in between).
const MAKE_ROOM: Duration = Duration::from_millis(250);
/// A request body with no new bytes for this long is waiting, not being received: its
/// connection may be closed for a newcomer.
pub const STALLED: Duration = Duration::from_secs(2);

/// Milliseconds since `epoch`.
fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One open connection's state, shared by its task and the bound.
pub struct ConnState {
    inflight: AtomicUsize,
    /// When it last had no request in progress, or its request body last moved (ms since
    /// the bound was made).
    idle_since_ms: AtomicU64,
    /// Its request's body is still being received.
    receiving: std::sync::atomic::AtomicBool,
    epoch: Instant,
    /// Already asked to make room (one new connection per idle one).
    leaving: std::sync::atomic::AtomicBool,
    /// Closes the connection (to make room).
    pub evict: Notify,
}

impl ConnState {
    /// No request in progress.
    pub fn idle(&self) -> bool {
        self.inflight.load(Ordering::SeqCst) == 0
    }

    fn now_ms(&self) -> u64 {
        ms_since(self.epoch)
    }

    /// Waiting for its client: no request in progress, or a request body that has not
    /// moved for [`STALLED`]. Such a connection may be closed for a newcomer.
    pub fn waiting(&self) -> bool {
        self.idle()
            || (self.receiving.load(Ordering::SeqCst)
                && self
                    .now_ms()
                    .saturating_sub(self.idle_since_ms.load(Ordering::SeqCst))
                    >= STALLED.as_millis() as u64)
    }

    /// Asked to make room while a request had started: it stays, and may be asked again.
    pub fn stay(&self) {
        self.leaving.store(false, Ordering::SeqCst);
    }
}

pub struct Conns {
    slots: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    next: AtomicU64,
    epoch: Instant,
}

/// An admitted connection: its place, its state, and its entry (removed on drop).
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    pub state: Arc<ConnState>,
    id: u64,
    conns: Arc<Conns>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut m) = self.conns.open.lock() {
            m.remove(&self.id);
        }
    }
}

impl Conns {
    pub fn new(max: usize) -> Arc<Conns> {
        Arc::new(Conns {
            slots: Arc::new(Semaphore::new(max)),
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// The places (shutdown waits until it holds all of them: every connection closed).
    pub fn slots(&self) -> Arc<Semaphore> {
        self.slots.clone()
    }

    fn now_ms(&self) -> u64 {
        ms_since(self.epoch)
    }

    /// A place for a new connection: a free one, or the place of the connection waiting the
    /// longest (see [`ConnState::waiting`]), which is closed for it; `None` when every
    /// connection is busy.
    pub async fn admit(self: &Arc<Conns>) -> Option<Admitted> {
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let victim = self.open.lock().ok().and_then(|m| {
                    m.values()
                        .filter(|c| c.waiting() && !c.leaving.load(Ordering::SeqCst))
                        .min_by_key(|c| c.idle_since_ms.load(Ordering::SeqCst))
                        .cloned()
                })?;
                victim.leaving.store(true, Ordering::SeqCst);
                victim.evict.notify_one();
                tokio::time::timeout(MAKE_ROOM, self.slots.clone().acquire_owned())
                    .await
                    .ok()?
                    .ok()?
            }
        };
        let state = Arc::new(ConnState {
            inflight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            receiving: std::sync::atomic::AtomicBool::new(false),
            epoch: self.epoch,
            leaving: std::sync::atomic::AtomicBool::new(false),
            evict: Notify::new(),
        });
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.open.lock() {
            m.insert(id, state.clone());
        }
        Some(Admitted {
            _permit: permit,
            state,
            id,
            conns: self.clone(),
        })
    }

    /// The router as one connection's service: each request counts as in progress until
    /// its response body has been sent whole or dropped.
    pub fn service(self: &Arc<Conns>, app: Router, state: Arc<ConnState>) -> Tracked {
        Tracked {
            app,
            state,
            conns: self.clone(),
        }
    }
}

/// A request in progress on a connection; when it ends, the connection is idle from then.
struct InFlight {
    state: Arc<ConnState>,
    conns: Arc<Conns>,
}

impl InFlight {
    fn new(state: Arc<ConnState>, conns: Arc<Conns>) -> InFlight {
        state.inflight.fetch_add(1, Ordering::SeqCst);
        InFlight { state, conns }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.receiving.store(false, Ordering::SeqCst);
        self.state
            .idle_since_ms
            .store(self.conns.now_ms(), Ordering::SeqCst);
        self.state.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds its request's [`InFlight`] until it is sent or dropped.
struct Guarded {
    inner: Body,
    _inflight: InFlight,
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that notes when its bytes move and when it has all arrived.
struct Received<B> {
    inner: B,
    state: Arc<ConnState>,
}

impl<B> HttpBody for Received<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                let now = self.state.now_ms();
                self.state.idle_since_ms.store(now, Ordering::SeqCst);
            }
            Poll::Ready(_) => self.state.receiving.store(false, Ordering::SeqCst),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The router, counting the requests in progress on one connection.
#[derive(Clone)]
pub struct Tracked {
    app: Router,
    state: Arc<ConnState>,
    conns: Arc<Conns>,
}

impl<B> tower::Service<Request<B>> for Tracked
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inflight = InFlight::new(self.state.clone(), self.conns.clone());
        let req = if req.body().is_end_stream() {
            req.map(Body::new)
        } else {
            let now = self.state.now_ms();
            self.state.idle_since_ms.store(now, Ordering::SeqCst);
            self.state.receiving.store(true, Ordering::SeqCst);
            let state = self.state.clone();
            req.map(|inner| Body::new(Received { inner, state }))
        };
        let fut = tower::Service::call(&mut self.app, req);
        Box::pin(async move {
            let res = fut.await?;
            Ok(res.map(|inner| {
                Body::new(Guarded {
                    inner,
                    _inflight: inflight,
                })
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_full_bound_closes_the_connection_idle_longest_and_never_a_busy_one() {
        let conns = Conns::new(2);
        let a = conns.admit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let b = conns.admit().await.unwrap();
        // `a` has a request in progress: `b`, idle, is the one asked to go.
        let busy = InFlight::new(a.state.clone(), conns.clone());
        let closer = {
            let b_state = b.state.clone();
            tokio::spawn(async move {
                b_state.evict.notified().await;
                drop(b);
            })
        };
        let c = conns.admit().await.unwrap();
        closer.await.unwrap();
        // Now `a` is busy and `c` is busy: no place for a fourth.
        let _busy_c = InFlight::new(c.state.clone(), conns.clone());
        assert!(conns.admit().await.is_none());
        // `a` finishes its request: it can be pushed out.
        drop(busy);
        let a_state = a.state.clone();
        let closer = tokio::spawn(async move {
            a_state.evict.notified().await;
            drop(a);
        });
        assert!(conns.admit().await.is_some());
        closer.await.unwrap();
    }
}
