//! CONNECT tunnels: decided on `host:port`, then bytes both ways. A CONNECT sent as the
//! first bytes of an opaque tunnel (relaying through an allowed host that is itself a
//! proxy, or through this proxy) is refused before it leaves; that check is best effort,
//! since the rest of an opaque tunnel is not parsed (a terminated tunnel parses every
//! request: see `terminate`).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::respond::{self, Body};
use super::{connect_any, idle, upstream_unreachable, Proxy, Slot};
use crate::decide::Verdict;
use crate::error::Refusal;
use crate::target::{valid_host, Target};

/// What a tunnel holds while it lives: its place among the sandbox's tunnels and the
/// client connection's slot (so tunnels count against the connection cap too).
pub(super) struct Held {
    _tunnel: OwnedSemaphorePermit,
    _connection: Option<super::Permits>,
}

/// A spawned task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Proxy {
    pub(super) async fn connect(
        self: Arc<Self>,
        req: Request<Incoming>,
        slot: Slot,
    ) -> Response<Body> {
        let Some((host, port)) = req
            .uri()
            .authority()
            .and_then(|a| Some((a.host().to_string(), a.port_u16()?)))
        else {
            return respond::bad_request(&Refusal::BadRequest {
                why: "CONNECT needs `host:port`".into(),
            });
        };
        let target = Target::tunnel(&host, port);
        if !valid_host(&target.host) || port == 0 {
            return respond::bad_request(&Refusal::BadRequest {
                why: format!("`{}` is not a valid host and port", target.authority()),
            });
        }
        // The sandbox's tunnels are capped: past the cap, refused (and recorded) before
        // anything is decided or opened.
        let Ok(tunnel_permit) = self.tunnels.clone().try_acquire_owned() else {
            let refusal = Refusal::TooManyTunnels {
                target: target.authority(),
                limit: self.limits.tunnels,
            };
            return respond::busy(&self.refuse(&target, refusal).await);
        };
        let addrs = match self.decide(&target).await {
            Verdict::Allow(a) => a,
            deny => return respond::denied(&deny),
        };
        let held = Held {
            _tunnel: tunnel_permit,
            _connection: slot.lock().ok().and_then(|mut s| s.take()),
        };
        // A host a secret is bound to: TLS ends here, each request is decided and gets
        // its secrets (see `terminate`).
        if let Some(edge) = self.edge.clone().filter(|e| e.terminates(&target.host)) {
            tokio::spawn(async move {
                match hyper::upgrade::on(req).await {
                    Ok(up) => self.terminate(TokioIo::new(up), target, edge).await,
                    Err(e) => tracing::debug!("egress tunnel upgrade failed: {e}"),
                }
                drop(held);
            });
            return Response::new(respond::body(""));
        }
        let upstream = match connect_any(&addrs).await {
            Ok(s) => s,
            Err(why) => return upstream_unreachable(&target, why),
        };
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(up) => self.pipe(TokioIo::new(up), upstream, target).await,
                Err(e) => tracing::debug!("egress tunnel upgrade failed: {e}"),
            }
            drop(held);
        });
        Response::new(respond::body(""))
    }

    /// Bytes both ways until either side is done or the tunnel has been idle for the
    /// proxy's idle time.
    async fn pipe(
        &self,
        client: TokioIo<hyper::upgrade::Upgraded>,
        upstream: TcpStream,
        target: Target,
    ) {
        let (client, activity) = idle::watch(client);
        tokio::select! {
            _ = self.relay(client, upstream, &target) => {}
            _ = activity.idle_for(self.limits.idle) => {
                tracing::debug!("egress tunnel to {} idle: closed", target.authority());
            }
        }
    }

    async fn relay<C>(&self, client: C, upstream: TcpStream, target: &Target)
    where
        C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut cr, mut cw) = tokio::io::split(client);
        let (mut ur, mut uw) = upstream.into_split();
        let mut down = AbortOnDrop(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut ur, &mut cw).await;
            let _ = cw.shutdown().await;
        }));
        // The client's first bytes: a CONNECT inside the tunnel ends it. They may come in
        // pieces (`CONN`, then `ECT host:443 ...`): read on while they could still be one.
        // Best effort: the tunnel is opaque (TLS, or any protocol), so only its first
        // bytes are looked at; tunnels the proxy terminates parse every request.
        let first = first_bytes(&mut cr).await;
        let n = first.len();
        if is_connect(&first) {
            self.refuse(
                target,
                Refusal::ConnectInConnect {
                    target: target.authority(),
                },
            )
            .await;
            return;
        }
        // Cleartext inside a tunnel to a host no secret is bound to: a placeholder in its
        // first bytes is refused (the value itself never gets here).
        if let Some(name) = self
            .edge
            .as_ref()
            .and_then(|e| e.placeholder_in(&first[..n]))
        {
            let refusal = Refusal::SecretNotBound {
                name: name.to_string(),
                target: target.authority(),
            };
            self.refuse(target, refusal).await;
            return;
        }
        if n > 0 && uw.write_all(&first[..n]).await.is_ok() {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
        }
        let _ = uw.shutdown().await;
        let _ = (&mut down.0).await;
    }
}

/// The most of the client's first bytes looked at, and how long the proxy waits for the
/// rest of a request line that has begun like a CONNECT (a client that sent `CON` and
/// waits for an answer is let through as not one).
const FIRST_MAX: usize = 16 * 1024;
const FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The client's first bytes: at least one read, and more while they are blank or a
/// beginning of `CONNECT ` (up to [`FIRST_MAX`] bytes and [`FIRST_WAIT`] for each read).
async fn first_bytes<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> Vec<u8> {
    let mut first = Vec::new();
    let mut buf = vec![0u8; FIRST_MAX];
    loop {
        let room = FIRST_MAX - first.len();
        let read = if first.is_empty() {
            r.read(&mut buf[..room]).await.ok()
        } else {
            tokio::time::timeout(FIRST_WAIT, r.read(&mut buf[..room]))
                .await
                .ok()
                .and_then(Result::ok)
        };
        match read {
            Some(n) if n > 0 => first.extend_from_slice(&buf[..n]),
            _ => return first,
        }
        if !maybe_connect(&first) || first.len() >= FIRST_MAX {
            return first;
        }
    }
}

/// Whether bytes are too few to tell: blank so far, or a beginning of `CONNECT `.
fn maybe_connect(b: &[u8]) -> bool {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let b = &b[start..];
    b.len() < 8 && b.eq_ignore_ascii_case(&b"CONNECT "[..b.len()])
}

/// Whether bytes start an HTTP CONNECT request (`CONNECT ` in any case, after blank lines).
fn is_connect(b: &[u8]) -> bool {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let b = &b[start..];
    b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"CONNECT ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn connect_requests_are_recognised() {
        assert!(super::is_connect(b"CONNECT a:443 HTTP/1.1\r\n"));
        assert!(super::is_connect(b"\r\nconnect a:443 HTTP/1.1\r\n"));
        assert!(!super::is_connect(b"GET / HTTP/1.1\r\n"));
        assert!(!super::is_connect(b"\x16\x03\x01\x02\x00"));
        assert!(!super::is_connect(b""));
    }

    #[test]
    fn a_beginning_of_connect_asks_for_more() {
        for more in [&b""[..], b"\r\n", b"C", b"con", b"CONNECT", b"\r\nCONNEC"] {
            assert!(super::maybe_connect(more), "{more:?}");
        }
        for enough in [&b"CONNECT "[..], b"GET /", b"\x16\x03", b"COPY", b"CX"] {
            assert!(!super::maybe_connect(enough), "{enough:?}");
        }
    }

    #[tokio::test]
    async fn a_connect_in_pieces_is_read_whole() {
        let (mut client, mut proxy_side) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for piece in [&b"CO"[..], b"NN", b"ECT evil:443 HTTP/1.1\r\n\r\n"] {
                client.write_all(piece).await.unwrap();
                client.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            client
        });
        let first = super::first_bytes(&mut proxy_side).await;
        assert!(
            super::is_connect(&first),
            "{:?}",
            String::from_utf8_lossy(&first)
        );
        drop(writer.await.unwrap());
        // A first read that cannot begin a CONNECT is taken as it is, at once.
        let (mut client, mut proxy_side) = tokio::io::duplex(64);
        use tokio::io::AsyncWriteExt;
        client.write_all(b"GE").await.unwrap();
        assert_eq!(super::first_bytes(&mut proxy_side).await, b"GE");
    }
}
