//! Streamed answers: NDJSON (`application/x-ndjson`, one JSON object a line) or
//! Server-Sent Events (`text/event-stream`, `event: <type>` + `data: <json>`), chosen by
//! the request's `Accept`. Every message is a JSON object with a `type`:
//!
//! - `start`: `process_id`, `sandbox_id` (first);
//! - `stdout` / `stderr`: `data` (UTF-8 text, or base64 with `"encoding": "base64"`),
//!   `elapsed_us`, in the order the server read them;
//! - `exit`: `exit` (`{"code": n}` or `{"signal": n}`), `elapsed_us`;
//! - `result`: the operation's `record` and `result` (output fields left out: they were
//!   streamed) (last, when it ran), or `error`: a problem (last, when it was stopped);
//! - `heartbeat` (NDJSON) or an SSE comment, while nothing else happens, so a client that
//!   went away is noticed and its command cancelled.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub const NDJSON: &str = "application/x-ndjson";
pub const SSE: &str = "text/event-stream";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ndjson,
    Sse,
}

impl Format {
    /// The streamed format the client accepts, if any (`Accept: application/x-ndjson` or
    /// `text/event-stream`); otherwise the answer is one JSON document.
    pub fn negotiate(headers: &HeaderMap) -> Option<Format> {
        let accept = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        for part in accept.split(',') {
            let mime = part.split(';').next().unwrap_or("").trim();
            if mime.eq_ignore_ascii_case(NDJSON) {
                return Some(Format::Ndjson);
            }
            if mime.eq_ignore_ascii_case(SSE) {
                return Some(Format::Sse);
            }
        }
        None
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => NDJSON,
            Format::Sse => SSE,
        }
    }

    /// One message, framed.
    pub fn frame(self, msg: &Value) -> Bytes {
        let text = serde_json::to_string(msg).unwrap_or_else(|_| "{}".into());
        match self {
            Format::Ndjson => Bytes::from(format!("{text}\n")),
            Format::Sse => {
                let kind = msg.get("type").and_then(Value::as_str).unwrap_or("message");
                Bytes::from(format!("event: {kind}\ndata: {text}\n\n"))
            }
        }
    }

    /// What keeps an idle stream alive (and finds a client that went away).
    pub fn heartbeat(self) -> Bytes {
        match self {
            Format::Ndjson => Bytes::from_static(b"{\"type\":\"heartbeat\"}\n"),
            Format::Sse => Bytes::from_static(b": heartbeat\n\n"),
        }
    }
}

/// A live event as a message (`stdout`, `stderr`, `exit`).
pub fn event_message(ev: &sandboxio_core::ExecEvent) -> Value {
    serde_json::to_value(ev).unwrap_or_else(|_| json!({"type": "heartbeat"}))
}

/// The last message of a command that ran: its record and its result, without the output
/// that was already streamed.
pub fn result_message(record: &Value, result: Option<&Value>) -> Value {
    let result = result.map(|r| {
        let mut r = r.clone();
        if let Some(o) = r.as_object_mut() {
            for k in ["stdout", "stderr", "stdout_encoding", "stderr_encoding"] {
                o.remove(k);
            }
        }
        r
    });
    json!({"type": "result", "record": record, "result": result})
}

/// The streamed response whose messages the caller sends into the returned sender. When
/// the client goes away, the body is dropped and sending fails: the caller then stops
/// (and drops what it runs, which cancels it).
pub fn response(
    format: Format,
    extra: &[(&'static str, String)],
) -> (mpsc::Sender<Bytes>, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    let mut res = (StatusCode::OK, Body::from_stream(body)).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for (k, v) in extra {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(*k, v);
        }
    }
    (tx, res)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sandboxio_core::{ExecEvent, OutputStream};

    #[test]
    fn accept_picks_the_format() {
        let mut h = HeaderMap::new();
        assert_eq!(Format::negotiate(&h), None);
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        assert_eq!(Format::negotiate(&h), Some(Format::Sse));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, application/x-ndjson;q=0.9"),
        );
        assert_eq!(Format::negotiate(&h), Some(Format::Ndjson));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert_eq!(Format::negotiate(&h), None);
    }

    #[test]
    fn non_utf8_output_is_base64_in_a_frame_and_sse_names_the_event() {
        let ev = ExecEvent::Output {
            stream: OutputStream::Stdout,
            data: vec![0xff, 0x00, b'a'],
            elapsed_us: 5,
        };
        let m = event_message(&ev);
        assert_eq!(m["type"], "stdout");
        assert_eq!(m["encoding"], "base64");
        let line = Format::Ndjson.frame(&m);
        assert!(line.ends_with(b"\n"));
        let back: ExecEvent = serde_json::from_slice(&line).unwrap();
        assert_eq!(back, ev);
        let sse = String::from_utf8(Format::Sse.frame(&m).to_vec()).unwrap();
        assert!(sse.starts_with("event: stdout\ndata: {"), "{sse}");
        assert!(sse.ends_with("\n\n"));
    }

    #[test]
    fn the_result_message_leaves_out_streamed_output() {
        let m = result_message(
            &json!({"operation_id": "x"}),
            Some(&json!({"stdout": "hi", "stderr": "", "exit": {"code": 0}})),
        );
        assert_eq!(m["type"], "result");
        assert!(m["result"].get("stdout").is_none());
        assert_eq!(m["result"]["exit"]["code"], 0);
    }
}
