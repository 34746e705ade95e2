//! Methods whose requests carry no body. An upstream that does not read a body on them
//! (as some servers do for GET) would run the body as a second request on the same
//! connection, one the rules never saw: such a request is refused, not forwarded.

use hyper::header;
use hyper::http::request::Parts;

/// Methods without defined body semantics (RFC 9110, section 9.3).
const BODYLESS: [&str; 5] = ["GET", "HEAD", "OPTIONS", "DELETE", "TRACE"];

/// Whether `parts` declares a body on a method that has none: a `Content-Length` other
/// than 0, or any `Transfer-Encoding`.
pub(super) fn unexpected_body(parts: &Parts) -> bool {
    let method = parts.method.as_str();
    if !BODYLESS.iter().any(|m| m.eq_ignore_ascii_case(method)) {
        return false;
    }
    if parts.headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    parts
        .headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .any(|v| v.as_bytes().iter().any(|b| *b != b'0'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    fn parts(method: &str, headers: &[(&str, &str)]) -> hyper::http::request::Parts {
        let mut b = hyper::Request::builder().method(method).uri("/");
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_body_on_a_bodyless_method_is_seen() {
        for m in ["GET", "head", "OPTIONS", "DELETE", "TRACE"] {
            assert!(super::unexpected_body(&parts(
                m,
                &[("content-length", "44")]
            )));
            assert!(super::unexpected_body(&parts(
                m,
                &[("transfer-encoding", "chunked")]
            )));
            assert!(!super::unexpected_body(&parts(m, &[])));
            assert!(!super::unexpected_body(&parts(
                m,
                &[("content-length", "0")]
            )));
        }
        assert!(!super::unexpected_body(&parts(
            "POST",
            &[("content-length", "44")]
        )));
        assert!(!super::unexpected_body(&parts(
            "PUT",
            &[("transfer-encoding", "chunked")]
        )));
    }
}
