//! Placeholders: what a sandbox sees instead of a secret's value, and finding and
//! replacing them in request heads (pure).

/// Every placeholder starts with this, so it is unmistakable in logs and requests.
pub const PREFIX: &str = "sbx-secret-";

/// A fresh placeholder for `name`: `sbx-secret-<name>-<32 random hex digits>`.
pub fn new_placeholder(name: &str) -> String {
    let mut r = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut r);
    format!("{PREFIX}{name}-{}", hex::encode(r))
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `hay` with every `needle` replaced by `with`; `None` when there is none.
pub fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let mut at = find(hay, needle)?;
    let mut out = Vec::with_capacity(hay.len() + with.len());
    let mut rest = hay;
    loop {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
        match find(rest, needle) {
            Some(i) => at = i,
            None => break,
        }
    }
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn placeholders_are_unmistakable_and_fresh() {
        let a = new_placeholder("API_TOKEN");
        let b = new_placeholder("API_TOKEN");
        assert!(a.starts_with("sbx-secret-API_TOKEN-"));
        assert_eq!(a.len(), "sbx-secret-API_TOKEN-".len() + 32);
        assert_ne!(a, b);
    }

    #[test]
    fn every_occurrence_is_replaced() {
        let p = b"sbx-secret-T-00";
        assert_eq!(
            replace(b"Bearer sbx-secret-T-00", p, b"v1").unwrap(),
            b"Bearer v1"
        );
        assert_eq!(
            replace(b"sbx-secret-T-00:sbx-secret-T-00!", p, b"xy").unwrap(),
            b"xy:xy!"
        );
        assert!(replace(b"Bearer sbx-secret-T-0", p, b"v").is_none());
        assert!(contains(b"a sbx-secret-T-00", p));
        assert!(!contains(b"", p));
    }
}
