//! A secret's value (never shown), and the checks on names and bound hosts.

use zeroize::Zeroizing;

use super::SecretError;
use crate::rules::HostGlob;

/// The largest value kept (it must fit an HTTP header).
pub const MAX_VALUE: usize = 16 * 1024;

/// A secret value: wiped on drop, never printed (`Debug` shows its length only), not
/// serialisable.
pub struct SecretValue(Zeroizing<Vec<u8>>);

impl SecretValue {
    /// Checks `bytes` (non-empty, at most 16 KiB, no control bytes: it must fit a header).
    pub fn new(bytes: Vec<u8>) -> Result<SecretValue, SecretError> {
        let bytes = Zeroizing::new(bytes);
        if bytes.is_empty() {
            return Err(SecretError::InvalidValue { why: "it is empty" });
        }
        if bytes.len() > MAX_VALUE {
            return Err(SecretError::InvalidValue {
                why: "it is longer than 16 KiB",
            });
        }
        if bytes.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(SecretError::InvalidValue {
                why: "it holds control bytes (a value must fit an HTTP header)",
            });
        }
        Ok(SecretValue(bytes))
    }

    /// Reads a value as given on standard input: one trailing newline (`\n` or `\r\n`) is
    /// not part of it.
    pub fn from_input(mut bytes: Vec<u8>) -> Result<SecretValue, SecretError> {
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        SecretValue::new(bytes)
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<secret value, {} bytes>", self.0.len())
    }
}

/// A secret's name is an environment variable name: `[A-Za-z_][A-Za-z0-9_]*`, 1 to 128.
pub fn validate_name(name: &str) -> Result<(), SecretError> {
    let bad = |why| {
        Err(SecretError::InvalidName {
            name: name.chars().take(140).collect(),
            why,
        })
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return bad("it is empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return bad("it must start with a letter or `_`")
        }
        Some(_) => {}
    }
    if name.len() > 128 {
        return bad("it is longer than 128 characters");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return bad("only letters, digits and `_` are allowed");
    }
    Ok(())
}

/// A secret is bound to at least one host glob (`api.example.com`, `*.example.com`); a
/// bare `*` binds it to nothing in particular and is refused.
pub fn validate_hosts(hosts: &[String]) -> Result<(), SecretError> {
    if hosts.is_empty() {
        return Err(SecretError::InvalidHost {
            host: String::new(),
            why: "a secret needs at least one bound host".into(),
        });
    }
    for h in hosts {
        match HostGlob::parse(h) {
            Ok(HostGlob::Any) => {
                return Err(SecretError::InvalidHost {
                    host: h.clone(),
                    why: "a secret bound to every host is not bound; name its hosts".into(),
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(SecretError::InvalidHost {
                    host: h.clone(),
                    why: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_core::ErrorCode;

    #[test]
    fn values_are_checked_and_never_shown() {
        let v = SecretValue::from_input(b"tok-123\r\n".to_vec()).unwrap();
        assert_eq!(v.expose(), b"tok-123");
        assert!(!format!("{v:?}").contains("tok-123"));
        for bad in [&b""[..], b"\n", b"a\nb", b"a\0b", b"a\x7fb"] {
            let e = SecretValue::from_input(bad.to_vec()).unwrap_err();
            assert_eq!(e.code(), "SBX_E2421", "{bad:?}");
        }
        assert!(SecretValue::new(vec![b'a'; MAX_VALUE + 1]).is_err());
    }

    #[test]
    fn names_are_environment_variable_names() {
        for ok in ["API_TOKEN", "_x", "a1"] {
            validate_name(ok).unwrap();
        }
        for bad in ["", "1a", "A-B", "A B", "é", &"A".repeat(129)] {
            assert_eq!(validate_name(bad).unwrap_err().code(), "SBX_E2420", "{bad}");
        }
    }

    #[test]
    fn hosts_must_be_named() {
        validate_hosts(&["api.example.com".into(), "*.example.org".into()]).unwrap();
        for bad in [vec![], vec!["*".to_string()], vec!["a b".to_string()]] {
            assert_eq!(validate_hosts(&bad).unwrap_err().code(), "SBX_E2422");
        }
    }
}
