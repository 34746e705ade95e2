//! Plain HTTP: each absolute-form request is decided on its host, port, method and path,
//! then sent on its own upstream connection to the checked address.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderName};
use hyper::{Request, Response};

use super::respond::{self, Body};
use super::{bodyless, http1_client, upstream_unreachable, Proxy};
use crate::error::Refusal;
use crate::target::{valid_host, Target};

/// Headers that belong to one hop and are not forwarded.
const HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(super) fn strip_hop_headers(h: &mut hyper::HeaderMap) {
    // Headers named in `Connection` are hop-by-hop too.
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in HOP.iter().chain(named.iter()) {
        h.remove(n);
    }
    h.remove("proxy-connection");
    h.remove("keep-alive");
}

impl Proxy {
    pub(super) async fn forward(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let bad = |why: &str| {
            respond::bad_request(&Refusal::BadRequest {
                why: why.to_string(),
            })
        };
        let uri = req.uri().clone();
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return bad("only `http://` is forwarded; use CONNECT for HTTPS"),
            None => {
                return bad("this is a proxy: send absolute-form requests (`GET http://host/path`)")
            }
        }
        let Some(auth) = uri.authority() else {
            return bad("the request names no host");
        };
        let port = auth.port_u16().unwrap_or(80);
        let target = Target::http(auth.host(), port, req.method().as_str(), uri.path());
        if !valid_host(&target.host) || port == 0 {
            return bad("the request's host is not valid");
        }
        // A secret never goes over cleartext: a placeholder here is refused and recorded.
        let (parts, body) = req.into_parts();
        if let Some(name) = self
            .edge
            .as_ref()
            .and_then(|e| e.placeholder_in_head(&parts))
        {
            let refusal = Refusal::SecretInCleartext {
                name: name.to_string(),
                target: target.authority(),
            };
            let v = self.refuse(&target, refusal).await;
            return respond::denied(&v);
        }
        // A body on GET (and the like) is refused: a lax upstream would run it as a
        // second request that no rule decided.
        if bodyless::unexpected_body(&parts) {
            let refusal = Refusal::BodyNotAllowed {
                method: parts.method.to_string(),
                target: target.authority(),
            };
            return respond::denied(&self.refuse(&target, refusal).await);
        }
        // A body that stops coming gives its slot back after the idle time.
        let req = Request::from_parts(parts, super::stall::Stalling::new(body, self.limits.idle));
        let stream = match self.open(&target).await {
            Ok(s) => s,
            Err(answer) => return answer,
        };
        let mut sender = match http1_client(stream).await {
            Ok(s) => s,
            Err(why) => return upstream_unreachable(&target, why),
        };
        let host_header = auth.as_str().to_string();
        let (mut parts, body) = req.into_parts();
        parts.uri = match uri.path_and_query() {
            Some(pq) => match pq.as_str().parse() {
                Ok(u) => u,
                Err(_) => return bad("the request's path is not valid"),
            },
            None => hyper::Uri::from_static("/"),
        };
        strip_hop_headers(&mut parts.headers);
        if let Ok(v) = header::HeaderValue::from_str(&host_header) {
            parts.headers.insert(header::HOST, v);
        }
        // One request per upstream connection, and the upstream told so: a server that
        // ignores a body would otherwise read it as a second request (never decided).
        parts.headers.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_headers(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(e) => upstream_unreachable(&target, e.to_string()),
        }
    }
}
