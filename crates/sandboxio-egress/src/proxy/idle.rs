//! Idle tunnels: the client's side of a tunnel wrapped so that every byte read from it or
//! written to it (what the upstream sent back) counts as activity, and a future that ends
//! once there has been none for a given time. A tunnel serves until either ends. A
//! request waiting for its upstream's answer (the client silent meanwhile) keeps it busy,
//! not idle.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a stream last moved a byte.
pub(super) struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last byte.
    last: AtomicU64,
    /// Requests waiting for their upstream.
    busy: AtomicUsize,
}

/// A request in flight: the stream is not idle while this lives.
pub(super) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Marks a request in flight until the guard is dropped.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Ends once no byte has moved for `limit` and no request is in flight.
    pub(super) async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + limit;
            if self.busy.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(limit).await;
                continue;
            }
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// `io`, its bytes counted as activity.
pub(super) struct Watched<S> {
    io: S,
    activity: Arc<Activity>,
}

/// Wraps `io`; the activity it reports starts now.
pub(super) fn watch<S>(io: S) -> (Watched<S>, Arc<Activity>) {
    let activity = Arc::new(Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
        busy: AtomicUsize::new(0),
    });
    (
        Watched {
            io,
            activity: activity.clone(),
        },
        activity,
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_either_way_keep_it_alive_and_silence_ends_it() {
        use std::time::Duration;
        let (mut peer, io) = tokio::io::duplex(64);
        let (mut io, activity) = super::watch(io);
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peer.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            io.read_exact(&mut b).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            io.write_all(b"y").await.unwrap();
        }
        activity.idle_for(Duration::from_millis(300)).await;
        // 1.2 s of a byte every 200 ms, then 300 ms of silence.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1500), "{took:?}");
        assert!(took < Duration::from_millis(3000), "{took:?}");
        // A request in flight keeps a silent stream from being idle.
        let start = tokio::time::Instant::now();
        let busy = activity.busy();
        let waited = tokio::time::timeout(
            Duration::from_millis(700),
            activity.idle_for(Duration::from_millis(200)),
        )
        .await;
        assert!(waited.is_err(), "idle while a request was in flight");
        drop(busy);
        activity.idle_for(Duration::from_millis(200)).await;
        assert!(start.elapsed() >= Duration::from_millis(900));
    }
}
