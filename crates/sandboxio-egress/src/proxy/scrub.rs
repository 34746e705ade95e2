//! Responses from an upstream a secret was injected for go back to the sandbox with each
//! value replaced by its placeholder (an API that echoes the token it got never hands the
//! value to the program): in the status line's reason, the headers, the body as it
//! streams (a value split across frames is found too; the tail that could start one is
//! held back) and the trailers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};

/// `(value, placeholder)` pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The shortest encoded form looked for (a shorter one would match unrelated text).
const ENCODED_MIN: usize = 8;

/// How an upstream may hand a value back transformed: its hex (lower and upper case) and
/// its base64 (standard and URL-safe alphabets), the latter as the part of the encoding
/// that depends on the value's bytes alone, for each of the three places it can start in
/// a 3-byte group, so it is found inside a longer encoded text too (an API that echoes
/// `base64(user:token)` in a header, say).
pub fn encodings(value: &[u8]) -> Vec<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    let mut out: Vec<Vec<u8>> = Vec::new();
    out.push(hex::encode(value).into_bytes());
    out.push(hex::encode_upper(value).into_bytes());
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for lead in 0..3usize {
            let mut padded = vec![0u8; lead];
            padded.extend_from_slice(value);
            let enc = engine.encode(&padded).into_bytes();
            // Characters that also hold bits of the leading bytes, or of bytes after the
            // value (a partial last group), are not the value's own.
            let start = [0, 2, 3][lead];
            let end = enc.len() - usize::from(padded.len() % 3 != 0);
            if let Some(core) = enc.get(start..end) {
                out.push(core.to_vec());
            }
        }
    }
    out.retain(|e| e.len() >= ENCODED_MIN && e.as_slice() != value);
    out.sort();
    out.dedup();
    out
}

/// Replaces values in `buf` from the start; unless `last`, stops where the rest could be
/// the start of a value. Returns what to send and how much of `buf` it covers.
pub fn scrub(buf: &[u8], pairs: &Pairs, last: bool) -> (Vec<u8>, usize) {
    let keep = if last {
        0
    } else {
        pairs
            .iter()
            .map(|(v, _)| v.len())
            .max()
            .unwrap_or(1)
            .saturating_sub(1)
    };
    let mut out = Vec::with_capacity(buf.len());
    let mut i = 0;
    'bytes: while i < buf.len() {
        for (v, p) in pairs {
            if !v.is_empty() && buf[i..].starts_with(v) {
                out.extend_from_slice(p);
                i += v.len();
                continue 'bytes;
            }
        }
        if buf.len() - i <= keep {
            break;
        }
        out.push(buf[i]);
        i += 1;
    }
    (out, i)
}

/// Every header of an answer with the secrets' values replaced by their placeholders, in
/// values and names; a header that cannot be rewritten (the result is not a valid name or
/// value) is dropped, never passed on with the value in it.
pub fn headers(h: &mut hyper::HeaderMap, pairs: &Pairs) {
    let old = std::mem::take(h);
    // Names arrive lowercased: so are the values looked for in them.
    let lower: Pairs = pairs
        .iter()
        .map(|(v, p)| (v.to_ascii_lowercase(), p.to_ascii_lowercase()))
        .collect();
    let mut name = None;
    for (n, v) in old {
        if let Some(n) = n {
            name = Some(n);
        }
        let Some(n) = name.clone() else { continue };
        let (new_name, _) = scrub(n.as_str().as_bytes(), &lower, true);
        let (new_value, _) = scrub(v.as_bytes(), pairs, true);
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&new_name),
            HeaderValue::from_bytes(&new_value),
        ) else {
            continue;
        };
        h.append(n, v);
    }
}

/// The status line's reason phrase: the upstream's own (hyper keeps a non-canonical one
/// in the extensions and writes it back as received) only while no value went up on this
/// tunnel and none of its forms is in it; otherwise the canonical one for the status.
pub fn reason(ext: &mut hyper::http::Extensions, pairs: &Pairs, injected: bool) {
    let Some(r) = ext.remove::<hyper::ext::ReasonPhrase>() else {
        return;
    };
    if injected {
        return;
    }
    let lower: Pairs = pairs
        .iter()
        .map(|(v, p)| (v.to_ascii_lowercase(), p.to_ascii_lowercase()))
        .collect();
    let folded = r.as_bytes().to_ascii_lowercase();
    if scrub(r.as_bytes(), pairs, true).0 == r.as_bytes()
        && scrub(&folded, &lower, true).0 == folded
    {
        ext.insert(r);
    }
}

/// A response body with the values scrubbed.
pub struct Scrub<B = Incoming> {
    inner: B,
    pairs: Pairs,
    carry: Vec<u8>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl<B> Scrub<B> {
    pub fn new(inner: B, pairs: Pairs) -> Scrub<B> {
        Scrub {
            inner,
            pairs,
            carry: Vec::new(),
            trailers: None,
            done: false,
        }
    }

    fn flush(&mut self) -> Option<Frame<Bytes>> {
        if self.carry.is_empty() {
            return None;
        }
        let (out, _) = scrub(&self.carry, &self.pairs, true);
        self.carry.clear();
        Some(Frame::data(Bytes::from(out)))
    }
}

impl<B> Body for Scrub<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                if let Some(f) = this.flush() {
                    return Poll::Ready(Some(Ok(f)));
                }
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    continue;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(f))) => f,
            };
            match frame.into_data() {
                Ok(data) => {
                    this.carry.extend_from_slice(&data);
                    let (out, used) = scrub(&this.carry, &this.pairs, false);
                    this.carry.drain(..used);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Err(other) => {
                    // Trailers come last: send what is held back first. They are headers
                    // like any others: scrubbed the same way.
                    this.trailers = match other.into_trailers() {
                        Ok(mut t) => {
                            headers(&mut t, &this.pairs);
                            Some(Frame::trailers(t))
                        }
                        Err(_) => None,
                    };
                    this.done = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_encoded_value_is_found_inside_longer_encoded_text() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        use base64::Engine as _;
        let secret = b"sk-live-4f9a2c7e1b";
        let forms = super::encodings(secret);
        let pairs: super::Pairs = std::iter::once(secret.to_vec())
            .chain(forms)
            .map(|f| (f, b"{{SECRET}}".to_vec()))
            .collect();
        for prefix in ["", "u", "us", "user:"] {
            let mut plain = prefix.as_bytes().to_vec();
            plain.extend_from_slice(secret);
            plain.extend_from_slice(b":tail");
            for encoded in [STANDARD.encode(&plain), URL_SAFE.encode(&plain)] {
                let (out, _) = super::scrub(encoded.as_bytes(), &pairs, true);
                assert!(
                    String::from_utf8_lossy(&out).contains("{{SECRET}}"),
                    "{prefix:?}: {encoded}"
                );
            }
        }
        let hex: String = secret.iter().map(|b| format!("{b:02X}")).collect();
        let (out, _) = super::scrub(format!("id={hex}").as_bytes(), &pairs, true);
        assert_eq!(out, b"id={{SECRET}}");
        // Text without the value is left alone.
        let (out, _) = super::scrub(b"nothing secret here", &pairs, true);
        assert_eq!(out, b"nothing secret here");
    }

    use super::*;

    /// A body of given frames.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = hyper::Error;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(Ok))
        }
    }

    #[tokio::test]
    async fn trailers_are_scrubbed_like_headers() {
        use http_body_util::BodyExt;
        let mut t = hyper::HeaderMap::new();
        t.insert("x-echo", HeaderValue::from_static("Bearer VALUE-123"));
        t.insert("x-value-123", HeaderValue::from_static("name"));
        let frames = [
            Frame::data(Bytes::from_static(b"body VALUE-")),
            Frame::trailers(t),
        ];
        let body = Scrub::new(Frames(frames.into_iter().collect()), pairs());
        let got = body.collect().await.unwrap();
        let trailers = got.trailers().cloned().unwrap();
        assert_eq!(trailers["x-echo"], "Bearer sbx-secret-T-00");
        assert!(trailers.contains_key("x-sbx-secret-t-00"), "{trailers:?}");
        assert!(!format!("{trailers:?}")
            .to_ascii_lowercase()
            .contains("value-123"));
        assert_eq!(got.to_bytes(), Bytes::from_static(b"body VALUE-"));
    }

    #[test]
    fn a_reason_phrase_is_kept_only_when_clean_and_nothing_was_injected() {
        let reason = |text: &'static [u8], injected: bool| {
            let mut ext = hyper::http::Extensions::new();
            ext.insert(hyper::ext::ReasonPhrase::from_static(text));
            super::reason(&mut ext, &pairs(), injected);
            ext.get::<hyper::ext::ReasonPhrase>()
                .map(|r| r.as_bytes().to_vec())
        };
        assert_eq!(
            reason(b"All Good", false).as_deref(),
            Some(&b"All Good"[..])
        );
        assert_eq!(reason(b"All Good", true), None);
        assert_eq!(reason(b"Bearer VALUE-123", false), None);
        assert_eq!(reason(b"Bearer value-123", false), None);
    }

    fn pairs() -> Pairs {
        vec![(b"VALUE-123".to_vec(), b"sbx-secret-T-00".to_vec())]
    }

    #[test]
    fn values_are_replaced_even_split_across_frames() {
        let p = pairs();
        let (out, used) = scrub(b"token=VALUE-123 ok", &p, true);
        assert_eq!(out, b"token=sbx-secret-T-00 ok");
        assert_eq!(used, 18);
        // Streamed in pieces that cut the value: the same result.
        let mut carry = Vec::new();
        let mut sent = Vec::new();
        for piece in [&b"token=VAL"[..], b"UE-1", b"23 and VALUE-12", b"3!"] {
            carry.extend_from_slice(piece);
            let (out, used) = scrub(&carry, &p, false);
            carry.drain(..used);
            sent.extend(out);
        }
        sent.extend(scrub(&carry, &p, true).0);
        assert_eq!(sent, b"token=sbx-secret-T-00 and sbx-secret-T-00!");
        assert!(!sent.windows(9).any(|w| w == b"VALUE-123"));
        // A prefix of the value at the very end is sent as it is.
        assert_eq!(scrub(b"x VALUE-1", &p, true).0, b"x VALUE-1");
    }
}
