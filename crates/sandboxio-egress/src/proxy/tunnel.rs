//! CONNECT tunnels: decided on `host:port`, then bytes both ways. A CONNECT sent inside
//! an allowed tunnel (relaying through an allowed host that is itself a proxy, or through
//! this proxy) is refused before it leaves.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::respond::{self, Body};
use super::{connect_any, upstream_unreachable, Proxy};
use crate::decide::Verdict;
use crate::error::Refusal;
use crate::target::{valid_host, Target};

impl Proxy {
    pub(super) async fn connect(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
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
        let addrs = match self.decide(&target).await {
            Verdict::Allow(a) => a,
            deny => return respond::denied(&deny),
        };
        // A host a secret is bound to: TLS ends here, each request is decided and gets
        // its secrets (see `terminate`).
        if let Some(edge) = self.edge.clone().filter(|e| e.terminates(&target.host)) {
            tokio::spawn(async move {
                match hyper::upgrade::on(req).await {
                    Ok(up) => self.terminate(TokioIo::new(up), target, edge).await,
                    Err(e) => tracing::debug!("egress tunnel upgrade failed: {e}"),
                }
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
        });
        Response::new(respond::body(""))
    }

    async fn pipe(
        &self,
        client: TokioIo<hyper::upgrade::Upgraded>,
        upstream: TcpStream,
        target: Target,
    ) {
        let (mut cr, mut cw) = tokio::io::split(client);
        let (mut ur, mut uw) = upstream.into_split();
        let down = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut ur, &mut cw).await;
            let _ = cw.shutdown().await;
        });
        // The client's first bytes: a CONNECT inside the tunnel ends it.
        let mut first = vec![0u8; 16 * 1024];
        let n: usize = cr.read(&mut first).await.unwrap_or_default();
        if is_connect(&first[..n]) {
            down.abort();
            self.refuse(
                &target,
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
            down.abort();
            let refusal = Refusal::SecretNotBound {
                name: name.to_string(),
                target: target.authority(),
            };
            self.refuse(&target, refusal).await;
            return;
        }
        if n > 0 && uw.write_all(&first[..n]).await.is_ok() {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
        }
        let _ = uw.shutdown().await;
        let _ = down.await;
    }
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
}
