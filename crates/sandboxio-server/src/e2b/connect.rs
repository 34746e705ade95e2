//! The Connect protocol as E2B's SDKs speak it to envd: JSON codec, no compression.
//!
//! - **unary**: `POST /<service>/<Method>`, `Content-Type: application/json`, the message as
//!   JSON; answered 200 with the response message, or an error status with
//!   `{"code": "<connect code>", "message"}`;
//! - **server streaming**: `Content-Type: application/connect+json`, the request as one
//!   envelope (a flags byte, a big-endian `u32` length, the JSON); answered 200 with one
//!   envelope per message and a last one flagged end-of-stream (`0x02`) holding `{}` or
//!   `{"error": {...}}`.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::{connect_status, E2bError};

pub const UNARY_JSON: &str = "application/json";
pub const STREAM_JSON: &str = "application/connect+json";
/// Flag of an envelope holding compressed data (refused: the SDKs never compress).
const COMPRESSED: u8 = 0x01;
/// Flag of the last envelope of a stream.
const END_STREAM: u8 = 0x02;

fn bad(why: impl Into<String>) -> E2bError {
    E2bError::BadRequest { why: why.into() }
}

fn parse<T: DeserializeOwned>(json: &[u8]) -> Result<T, E2bError> {
    let json = if json.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        json
    };
    serde_json::from_slice(json).map_err(|e| bad(format!("the message is not valid: {e}")))
}

/// A unary request's message.
pub fn unary_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, E2bError> {
    parse(body)
}

/// A server-streaming request's one message, out of its envelope.
pub fn stream_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, E2bError> {
    if body.len() < 5 {
        return Err(bad("the stream request has no complete envelope"));
    }
    let flags = body[0];
    if flags & COMPRESSED != 0 {
        return Err(bad("compressed envelopes are not accepted"));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let rest = &body[5..];
    if rest.len() != len {
        return Err(bad(format!(
            "the envelope says {len} bytes but {} follow",
            rest.len()
        )));
    }
    parse(rest)
}

/// One envelope.
pub fn envelope(flags: u8, msg: &Value) -> Bytes {
    let data = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut b = Vec::with_capacity(5 + data.len());
    b.push(flags);
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(&data);
    Bytes::from(b)
}

pub fn message(msg: &Value) -> Bytes {
    envelope(0, msg)
}

/// The end of a stream that went well.
pub fn end_ok() -> Bytes {
    envelope(END_STREAM, &json!({}))
}

/// The end of a stream that failed.
pub fn end_err(e: &E2bError) -> Bytes {
    envelope(END_STREAM, &json!({"error": e.connect_body()}))
}

fn with_type(mut res: Response, ct: &'static str) -> Response {
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    res
}

/// A unary answer.
pub fn unary_ok(msg: &Value) -> Response {
    let body = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    with_type((StatusCode::OK, body).into_response(), UNARY_JSON)
}

/// A unary error.
pub fn unary_err(e: &E2bError) -> Response {
    let body = serde_json::to_vec(&e.connect_body()).unwrap_or_default();
    let status = connect_status(e.connect_code());
    with_type((status, body).into_response(), UNARY_JSON)
}

/// A streamed answer: the caller sends envelopes into the sender; the body ends when it is
/// dropped. A client that goes away makes sending fail.
pub fn stream_response() -> (mpsc::Sender<Bytes>, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    let res = with_type(
        (StatusCode::OK, Body::from_stream(body)).into_response(),
        STREAM_JSON,
    );
    (tx, res)
}

/// A stream that is only its error.
pub fn stream_err(e: &E2bError) -> Response {
    let res = (StatusCode::OK, end_err(e)).into_response();
    with_type(res, STREAM_JSON)
}

/// Protobuf `bytes` in JSON: standard base64 (URL-safe accepted too).
pub fn decode_bytes(s: &str) -> Result<Vec<u8>, E2bError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
        .map_err(|_| bad("a bytes field is not base64"))
}

pub fn encode_bytes(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct M {
        path: String,
    }

    #[test]
    fn an_envelope_round_trips_and_a_short_one_is_refused() {
        let b = message(&json!({"path": "/home/user"}));
        let m: M = stream_request(&b).unwrap();
        assert_eq!(m.path, "/home/user");
        assert!(stream_request::<M>(&b[..b.len() - 1]).is_err());
        assert!(stream_request::<M>(&b[..3]).is_err());
        let mut c = b.to_vec();
        c[0] = COMPRESSED;
        assert!(stream_request::<M>(&c).is_err());
    }

    #[test]
    fn the_end_of_a_stream_is_flagged_and_carries_the_error() {
        let e = E2bError::NotImplemented {
            method: "filesystem.Filesystem/WatchDir".into(),
        };
        let b = end_err(&e);
        assert_eq!(b[0], END_STREAM);
        let v: Value = serde_json::from_slice(&b[5..]).unwrap();
        assert_eq!(v["error"]["code"], "unimplemented");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SBX_E2504"));
    }
}
