//! Redaction of a byte stream that arrives in chunks (a program's live output).
//!
//! A secret can be split across two chunks (`...sk-ab` then `cd...`): redacting each chunk
//! alone would let both halves through. [`StreamRedactor`] keeps a small carry-over: the
//! tail of what it has seen that could still be the start of a secret (at most
//! [`StreamRedactor::window`] bytes, more only while a match in progress crosses the cut).
//! The carry is emitted with the next chunk, or on [`StreamRedactor::flush`] (end of the
//! stream, the other stream speaking, or the stream idle for a moment).

use crate::redact::Redactor;

/// Smallest carry-over window: longer than every credential shape's usual length.
pub const MIN_WINDOW: usize = 512;
/// A carry-over never grows past this, even inside a long match (a PEM block): it is
/// emitted redacted as it stands.
pub const MAX_CARRY: usize = 64 * 1024;

/// Redacts one stream chunk by chunk; see the module docs.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    carry: Vec<u8>,
}

impl StreamRedactor {
    pub fn new() -> Self {
        Self::default()
    }

    /// The carry-over window for `r`: the longest literal pattern or [`MIN_WINDOW`].
    pub fn window(r: &Redactor) -> usize {
        r.longest_literal().max(MIN_WINDOW)
    }

    /// Bytes held back, waiting for the next chunk.
    pub fn pending(&self) -> usize {
        self.carry.len()
    }

    /// Takes a chunk; returns the redacted bytes that are safe to emit now (may be empty).
    pub fn push(&mut self, r: &Redactor, chunk: &[u8]) -> Vec<u8> {
        self.carry.extend_from_slice(chunk);
        let window = Self::window(r);
        if self.carry.len() <= window {
            return Vec::new();
        }
        let want = self.carry.len() - window;
        let mut cut = r.safe_cut(&self.carry, want);
        if self.carry.len() - cut > MAX_CARRY {
            cut = want;
        }
        let rest = self.carry.split_off(cut);
        let head = std::mem::replace(&mut self.carry, rest);
        r.redact_bytes(&head).into_owned()
    }

    /// Emits everything held back, redacted.
    pub fn flush(&mut self, r: &Redactor) -> Vec<u8> {
        let all = std::mem::take(&mut self.carry);
        r.redact_bytes(&all).into_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Secret;

    fn redactor() -> Redactor {
        Redactor::builder()
            .secret(&Secret::new("hunter2-correct-horse"))
            .build()
            .unwrap()
    }

    /// Feeds `input` in chunks of `n` bytes and returns everything emitted.
    fn run(r: &Redactor, input: &[u8], n: usize) -> Vec<u8> {
        let mut s = StreamRedactor::new();
        let mut out = Vec::new();
        for c in input.chunks(n) {
            out.extend(s.push(r, c));
        }
        out.extend(s.flush(r));
        out
    }

    #[test]
    fn secret_split_across_chunks_is_redacted() {
        let r = redactor();
        let mut input = vec![b'x'; 1000];
        input.extend_from_slice(b"pw=hunter2-correct-horse done\n");
        input.extend(vec![b'y'; 1000]);
        for n in [1, 3, 7, 64, 1003, 5000] {
            let out = run(&r, &input, n);
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains("hunter2"), "chunk {n}: leaked");
            assert!(text.contains("[REDACTED:"), "chunk {n}: {text}");
            assert!(text.ends_with(&"y".repeat(1000)), "chunk {n}");
        }
    }

    #[test]
    fn binary_without_secrets_passes_byte_exact() {
        let r = redactor();
        let input: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for n in [1, 100, 4096] {
            assert_eq!(run(&r, &input, n), input, "chunk {n}");
        }
    }

    #[test]
    fn short_output_is_held_until_flush() {
        let r = redactor();
        let mut s = StreamRedactor::new();
        assert!(s.push(&r, b">>> ").is_empty());
        assert_eq!(s.pending(), 4);
        assert_eq!(s.flush(&r), b">>> ");
    }
}
