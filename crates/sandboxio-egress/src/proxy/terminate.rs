//! Tunnels to a host a secret is bound to: TLS ends at the proxy (a leaf from the
//! sandbox's CA), each HTTP/1.1 request inside is decided on its own (method and path
//! visible), gets its secrets, and goes over a fresh TLS connection to the checked
//! address, the upstream's certificate verified.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::forward::strip_hop_headers;
use super::respond::{self, Body};
use super::scrub;
use super::{http1_client, upstream_unreachable, Proxy, HEADER_TIMEOUT, MAX_HEAD};
use super::{idle, origin};
use crate::edge::Edge;
use crate::error::Refusal;
use crate::target::Target;

impl Proxy {
    /// Serves the tunnel until it ends or has been idle for the proxy's idle time (the
    /// TLS handshake included).
    pub(super) async fn terminate<S>(self: Arc<Self>, client: S, tunnel: Target, edge: Arc<Edge>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client, activity) = idle::watch(client);
        let idle = self.limits.idle;
        let authority = tunnel.authority();
        tokio::select! {
            _ = self.terminated(client, tunnel, edge, activity.clone()) => {}
            _ = activity.idle_for(idle) => {
                tracing::debug!("egress tunnel to {authority} idle: closed");
            }
        }
    }

    async fn terminated<S>(
        self: Arc<Self>,
        client: S,
        tunnel: Target,
        edge: Arc<Edge>,
        activity: Arc<idle::Activity>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let config = match edge.server_config(&tunnel.host) {
            Ok(c) => c,
            Err(e) => {
                // Never a silent passthrough: the tunnel ends here.
                tracing::warn!("egress edge TLS setup for `{}` failed: {e}", tunnel.host);
                return;
            }
        };
        let tls = match tokio_rustls::TlsAcceptor::from(config).accept(client).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!("egress edge TLS handshake failed: {e}");
                return;
            }
        };
        let me = self.clone();
        // Whether a value went up on this tunnel: the upstream may hand it back later.
        let injected = Arc::new(AtomicBool::new(false));
        let service = hyper::service::service_fn(move |req| {
            let (me, tunnel, edge) = (me.clone(), tunnel.clone(), edge.clone());
            let injected = injected.clone();
            // Waiting for the upstream's answer is not idling.
            let busy = activity.busy();
            async move {
                let answer = me.inner(req, &tunnel, &edge, &injected).await;
                drop(busy);
                Ok::<_, Infallible>(answer)
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(tls), service);
        if let Err(e) = conn.await {
            tracing::debug!("egress edge connection ended: {e}");
        }
    }

    /// One request inside a terminated tunnel.
    async fn inner(
        &self,
        req: Request<Incoming>,
        tunnel: &Target,
        edge: &Edge,
        injected: &AtomicBool,
    ) -> Response<Body> {
        // Every request here is parsed: a CONNECT (in any case) ends nothing but itself.
        if req.method().as_str().eq_ignore_ascii_case("CONNECT") {
            let refusal = Refusal::ConnectInConnect {
                target: tunnel.authority(),
            };
            return respond::denied(&self.refuse(tunnel, refusal).await);
        }
        let mut target = Target::inside_tunnel(
            &tunnel.host,
            tunnel.port,
            req.method().as_str(),
            req.uri().path(),
        );
        let (mut parts, body) = req.into_parts();
        // The request names the tunnel's host and nothing else, before a placeholder is
        // replaced anywhere (so a value never lands in another authority or a userinfo).
        if let Err(why) = origin::to_origin_form(&mut parts, tunnel) {
            let refusal = Refusal::NotTheTunnelsHost {
                target: tunnel.authority(),
                why,
            };
            return respond::denied(&self.refuse(&target, refusal).await);
        }
        match edge.inject(&target, &mut parts) {
            Ok(names) => {
                if !names.is_empty() {
                    injected.store(true, Ordering::Relaxed);
                }
                target.secrets = names
            }
            Err(refusal) => return respond::denied(&self.refuse(&target, refusal).await),
        }
        let stream = match self.open(&target).await {
            Ok(s) => s,
            Err(answer) => return answer,
        };
        let Ok(name) = ServerName::try_from(target.host.clone()) else {
            return upstream_unreachable(&target, "not a name TLS can verify".into());
        };
        // The upstream's certificate is verified (system roots and `upstream_ca`).
        let tls = match tokio_rustls::TlsConnector::from(edge.upstream())
            .connect(name, stream)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                return upstream_unreachable(&target, format!("TLS with the upstream failed: {e}"))
            }
        };
        let mut sender = match http1_client(tls).await {
            Ok(s) => s,
            Err(why) => return upstream_unreachable(&target, why),
        };
        strip_hop_headers(&mut parts.headers);
        // A value went up: the upstream may echo it, and byte ranges of that echo come
        // back in slices the scrubber cannot recognise.
        if !target.secrets.is_empty() {
            parts.headers.remove(header::RANGE);
            parts.headers.remove(header::IF_RANGE);
        }
        // The request goes to the host the tunnel was opened for, whatever `Host` said.
        let authority = if tunnel.port == 443 {
            tunnel.host.clone()
        } else {
            tunnel.authority()
        };
        if let Ok(v) = HeaderValue::from_str(&authority) {
            parts.headers.insert(header::HOST, v);
        }
        // The answer is scrubbed as bytes: it must come back as it is, not compressed in
        // an encoding the program asked for (a value echoed gzipped passed the scrubber).
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        // A body that stops coming ends the request after the idle time (it would keep
        // the tunnel busy, so never idle, for as long as the client liked).
        let body = super::stall::Stalling::new(body, self.limits.idle);
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                // What comes back carries placeholders, never values (its length may
                // change, so it goes back chunked).
                let (mut parts, body) = resp.into_parts();
                if let Some(enc) = encoded(&parts.headers) {
                    return upstream_unreachable(
                        &target,
                        format!(
                            "the upstream answered in the `{enc}` encoding, which the proxy \
                             cannot scrub of the secrets it injected (it asked for identity)"
                        ),
                    );
                }
                strip_hop_headers(&mut parts.headers);
                scrub::headers(&mut parts.headers, &edge.pairs());
                scrub::reason(
                    &mut parts.extensions,
                    &edge.pairs(),
                    injected.load(Ordering::Relaxed),
                );
                parts.headers.remove(header::CONTENT_LENGTH);
                Response::from_parts(parts, scrub::Scrub::new(body, edge.pairs()).boxed())
            }
            Err(e) => upstream_unreachable(&target, e.to_string()),
        }
    }
}

/// A `Content-Encoding` other than `identity`, or a transfer-coding other than `chunked`
/// (hyper removes only `chunked`: `gzip, chunked` reaches the scrubber compressed): what
/// the scrubber cannot read through.
fn encoded(h: &hyper::HeaderMap) -> Option<String> {
    let codings = |name: header::HeaderName, plain: &'static str| {
        h.get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|e| e.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .find(move |e| !e.is_empty() && e != plain)
    };
    codings(header::CONTENT_ENCODING, "identity")
        .or_else(|| codings(header::TRANSFER_ENCODING, "chunked"))
}
