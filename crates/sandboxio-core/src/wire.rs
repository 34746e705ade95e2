//! Bytes in JSON: UTF-8 text as it is, anything else as base64 with a flag.
//!
//! A program's output is bytes. On the wire a byte field `x` is a string; when the bytes
//! are not valid UTF-8 the string is standard base64 and a sibling field `x_encoding` says
//! `"base64"`. Absent (or `"utf8"`), the string is the bytes themselves. Both forms decode
//! to exactly the bytes that were encoded.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// How a byte field is written as a JSON string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ByteEncoding {
    /// The string is the bytes (they were valid UTF-8).
    Utf8,
    /// The string is standard base64 (with padding) of the bytes.
    Base64,
}

/// The string for `bytes`, and `Some(Base64)` when they are not valid UTF-8.
pub fn encode(bytes: &[u8]) -> (String, Option<ByteEncoding>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (STANDARD.encode(bytes), Some(ByteEncoding::Base64)),
    }
}

/// The bytes a string of the given encoding stands for.
pub fn decode(text: String, encoding: Option<ByteEncoding>) -> Result<Vec<u8>, String> {
    match encoding {
        None | Some(ByteEncoding::Utf8) => Ok(text.into_bytes()),
        Some(ByteEncoding::Base64) => STANDARD
            .decode(text.as_bytes())
            .map_err(|e| format!("invalid base64 in a byte field: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn utf8_stays_text_and_other_bytes_become_base64() {
        assert_eq!(encode(b"hi\n"), ("hi\n".to_string(), None));
        let raw = [0u8, 0xff, 0xfe, b'a'];
        let (s, e) = encode(&raw);
        assert_eq!(e, Some(ByteEncoding::Base64));
        assert_eq!(decode(s, e).unwrap(), raw);
    }

    #[test]
    fn bad_base64_is_an_error() {
        assert!(decode("!!".into(), Some(ByteEncoding::Base64)).is_err());
    }
}
