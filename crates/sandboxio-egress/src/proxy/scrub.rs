//! Responses from an upstream a secret was injected for go back to the sandbox with each
//! value replaced by its placeholder (an API that echoes the token it got never hands the
//! value to the program): in the headers, and in the body as it streams (a value split
//! across frames is found too; the tail that could start one is held back).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming};

/// `(value, placeholder)` pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

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

/// A response body with the values scrubbed.
pub struct Scrub {
    inner: Incoming,
    pairs: Pairs,
    carry: Vec<u8>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl Scrub {
    pub fn new(inner: Incoming, pairs: Pairs) -> Scrub {
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

impl Body for Scrub {
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
                    // Trailers come last: send what is held back first.
                    this.trailers = Some(other);
                    this.done = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
