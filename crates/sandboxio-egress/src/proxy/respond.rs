//! Responses the proxy writes itself.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{Response, StatusCode};
use sandboxio_core::ErrorCode;

use crate::decide::Verdict;
use crate::error::Refusal;

pub type Body = BoxBody<Bytes, hyper::Error>;

pub fn body(text: impl Into<Bytes>) -> Body {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed()
}

fn text(status: StatusCode, code: &str, line: String) -> Response<Body> {
    let mut r = Response::new(body(format!("{line}\n")));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(code) {
        h.insert("x-sandboxio-code", v);
    }
    h.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// 403 with the denial line (code, layer, reason) as the body.
pub fn denied(v: &Verdict) -> Response<Body> {
    let code = match v {
        Verdict::Deny { code, .. } => code.as_str(),
        Verdict::Allow(_) => "",
    };
    text(
        StatusCode::FORBIDDEN,
        code,
        v.denial_line().unwrap_or_default(),
    )
}

/// 503 with the denial line: the proxy holds as much as it may for this sandbox.
pub fn busy(v: &Verdict) -> Response<Body> {
    let mut r = denied(v);
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}

/// 400 for a request the proxy cannot serve.
pub fn bad_request(r: &Refusal) -> Response<Body> {
    text(
        StatusCode::BAD_REQUEST,
        r.code(),
        format!("sandboxio[{}]: {r}", r.code()),
    )
}

/// 502 when the allowed upstream cannot be reached.
pub fn unreachable(r: &Refusal) -> Response<Body> {
    text(
        StatusCode::BAD_GATEWAY,
        r.code(),
        format!("sandboxio[{}]: {r}", r.code()),
    )
}
