//! Per-request context: the W3C trace context (the caller's `traceparent`, else a new
//! trace), and the ids every response carries (`sandboxio-operation-id`,
//! `sandboxio-trace-id`).

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

pub const OPERATION_ID_HEADER: &str = "sandboxio-operation-id";
pub const TRACE_ID_HEADER: &str = "sandboxio-trace-id";

/// The trace a request belongs to, and the `traceparent` handed to the gateway (so the
/// record carries the same trace id the response names).
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub trace_id: String,
    pub traceparent: String,
    /// The operation id answered when no gateway operation ran.
    pub request_id: String,
    /// The request's place among those the server works on (set by the admission layer;
    /// none for a request made in-process).
    pub ticket: Option<std::sync::Arc<crate::admission::Ticket>>,
}

/// Set by a handler (in the response's extensions) when a gateway operation ran.
#[derive(Debug, Clone)]
pub struct OperationId(pub String);

pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::Rng::fill(&mut rand::thread_rng(), b.as_mut_slice());
    hex::encode(b)
}

/// Parses `00-<32 hex trace>-<16 hex span>-<2 hex flags>`; all-zero ids are invalid.
pub fn parse_traceparent(v: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = v.trim().split('-').collect();
    if parts.len() != 4 || parts[0] != "00" {
        return None;
    }
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let (trace, span, flags) = (parts[1], parts[2], parts[3]);
    if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if trace.bytes().all(|b| b == b'0') || span.bytes().all(|b| b == b'0') {
        return None;
    }
    Some((trace.to_string(), span.to_string()))
}

impl RequestCtx {
    pub fn from_headers(h: &axum::http::HeaderMap) -> RequestCtx {
        let given = h
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_traceparent(v).map(|ids| (v.trim().to_string(), ids)));
        let (traceparent, trace_id) = match given {
            Some((tp, (trace, _))) => (tp, trace),
            None => {
                let trace = random_hex(16);
                (format!("00-{trace}-{}-01", random_hex(8)), trace)
            }
        };
        RequestCtx {
            trace_id,
            traceparent,
            request_id: random_hex(16),
            ticket: None,
        }
    }
}

/// Middleware: builds the context and stamps the ids on the response.
pub async fn stamp(mut req: Request, next: Next) -> Response {
    let ctx = RequestCtx::from_headers(req.headers());
    req.extensions_mut().insert(ctx.clone());
    let mut res = next.run(req).await;
    let op = res
        .extensions()
        .get::<OperationId>()
        .map(|o| o.0.clone())
        .unwrap_or(ctx.request_id);
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&op) {
        h.insert(OPERATION_ID_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&ctx.trace_id) {
        h.insert(TRACE_ID_HEADER, v);
    }
    res
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn traceparent_is_validated() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(ok).unwrap().0,
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_new_trace_is_started_when_none_is_given() {
        let ctx = RequestCtx::from_headers(&axum::http::HeaderMap::new());
        let (trace, _) = parse_traceparent(&ctx.traceparent).unwrap();
        assert_eq!(trace, ctx.trace_id);
    }
}
