//! Tunnels to a host a secret is bound to: TLS ends at the proxy (a leaf from the
//! sandbox's CA), each HTTP/1.1 request inside is decided on its own (method and path
//! visible), gets its secrets, and goes over a fresh TLS connection to the checked
//! address, the upstream's certificate verified.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::forward::strip_hop_headers;
use super::respond::{self, Body};
use super::scrub;
use super::{http1_client, upstream_unreachable, Proxy, HEADER_TIMEOUT, MAX_HEAD};
use crate::edge::Edge;
use crate::error::Refusal;
use crate::target::Target;

impl Proxy {
    pub(super) async fn terminate<S>(self: Arc<Self>, client: S, tunnel: Target, edge: Arc<Edge>)
    where
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
        let service = hyper::service::service_fn(move |req| {
            let (me, tunnel, edge) = (me.clone(), tunnel.clone(), edge.clone());
            async move { Ok::<_, Infallible>(me.inner(req, &tunnel, &edge).await) }
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
    async fn inner(&self, req: Request<Incoming>, tunnel: &Target, edge: &Edge) -> Response<Body> {
        if req.method() == Method::CONNECT {
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
        match edge.inject(&target, &mut parts) {
            Ok(names) => target.secrets = names,
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
        // The request goes to the host the tunnel was opened for, whatever `Host` said.
        let authority = if tunnel.port == 443 {
            tunnel.host.clone()
        } else {
            tunnel.authority()
        };
        if let Ok(v) = HeaderValue::from_str(&authority) {
            parts.headers.insert(header::HOST, v);
        }
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                // What comes back carries placeholders, never values (its length may
                // change, so it goes back chunked).
                let (mut parts, body) = resp.into_parts();
                strip_hop_headers(&mut parts.headers);
                let pairs = edge.pairs();
                for (_, v) in parts.headers.iter_mut() {
                    let (out, _) = scrub::scrub(v.as_bytes(), &pairs, true);
                    if out != v.as_bytes() {
                        if let Ok(new) = HeaderValue::from_bytes(&out) {
                            *v = new;
                        }
                    }
                }
                parts.headers.remove(header::CONTENT_LENGTH);
                Response::from_parts(parts, scrub::Scrub::new(body, pairs).boxed())
            }
            Err(e) => upstream_unreachable(&target, e.to_string()),
        }
    }
}
