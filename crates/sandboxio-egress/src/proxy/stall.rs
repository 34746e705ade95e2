//! A request body that gives up when its client stops sending: no frame for the proxy's
//! idle time ends the body with an error, so the upstream request fails, its answer goes
//! back and the connection's slot is given back. Without it, a body announced and never
//! sent held its slot (and two descriptors) for as long as the client liked, and inside a
//! terminated tunnel it kept the tunnel "busy" past its idle close.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// `inner`, ended with [`Stalled`] once no frame has come for `limit`.
pub(super) struct Stalling<B> {
    inner: B,
    limit: Duration,
    /// Started at the first wait, reset by every frame.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> Stalling<B> {
    pub(super) fn new(inner: B, limit: Duration) -> Stalling<B> {
        Stalling {
            inner,
            limit,
            timer: None,
        }
    }
}

/// The error a stalled body ends with.
#[derive(Debug)]
pub(super) struct Stalled(Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body sent nothing for {:?}", self.0)
    }
}

impl std::error::Error for Stalled {}

impl<B> Body for Stalling<B>
where
    B: Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(t) = this.timer.as_mut() {
                    t.as_mut().reset(Instant::now() + this.limit);
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let limit = this.limit;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled(limit))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
