//! Namespaced resource URIs: an upstream's resource `file:///a b` is offered as
//! `sandboxio://<upstream>/file%3A%2F%2F%2Fa%20b`. The upstream's URI is percent-encoded
//! whole (everything but ASCII letters, digits, `-`, `_`, `~`), so no client's URL
//! normalisation (`..`, `//`, case) can change which resource is read, two upstreams can
//! offer the same URI, and the way back is exact. A URI template keeps its `{...}`
//! expressions unencoded so a client can still expand them; decoding takes raw characters
//! as they are, so expansions with or without reserved characters map back.

/// The scheme of every namespaced resource URI.
pub const SCHEME: &str = "sandboxio://";

fn keep(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'~'
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if keep(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The URI a client sees for `upstream`'s resource `uri`.
pub fn wrap(upstream: &str, uri: &str) -> String {
    let mut out = format!("{SCHEME}{upstream}/");
    encode_into(&mut out, uri);
    out
}

/// The URI template a client sees for `upstream`'s template: the literal parts encoded,
/// the `{...}` expressions kept.
pub fn wrap_template(upstream: &str, template: &str) -> String {
    let mut out = format!("{SCHEME}{upstream}/");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        encode_into(&mut out, &rest[..open]);
        out.push_str(&rest[open..open + close + 1]);
        rest = &rest[open + close + 1..];
    }
    encode_into(&mut out, rest);
    out
}

/// The upstream's name and its own URI, for a namespaced URI; `None` when `uri` is not
/// one (another scheme, no upstream, a bad escape, not UTF-8).
pub fn unwrap(uri: &str) -> Option<(&str, String)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (upstream, encoded) = rest.split_once('/')?;
    if upstream.is_empty() || encoded.is_empty() {
        return None;
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some((upstream, String::from_utf8(out).ok()?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_uri_round_trips_and_keeps_nothing_a_client_could_normalise() {
        for uri in [
            "file:///data/../etc/passwd",
            "file:///a b/ü.txt",
            "note://x//y?q=1#f",
            "%2e%2e",
        ] {
            let w = wrap("files", uri);
            assert!(w.starts_with("sandboxio://files/"), "{w}");
            let path = &w["sandboxio://files/".len()..];
            assert!(!path.contains('/') && !path.contains('.'), "{w}");
            assert_eq!(unwrap(&w), Some(("files", uri.to_string())));
        }
    }

    #[test]
    fn an_expanded_template_maps_back_to_the_upstreams_uri() {
        let t = wrap_template("files", "file:///data/{name}.txt");
        assert_eq!(t, "sandboxio://files/file%3A%2F%2F%2Fdata%2F{name}%2Etxt");
        // A client expands {name} (simple expansion percent-encodes reserved characters).
        let expanded = t.replace("{name}", "a%2Fb");
        assert_eq!(
            unwrap(&expanded),
            Some(("files", "file:///data/a/b.txt".to_string()))
        );
        // Reserved expansion leaves them raw; still the same resource.
        let raw = t.replace("{name}", "a/b");
        assert_eq!(
            unwrap(&raw),
            Some(("files", "file:///data/a/b.txt".to_string()))
        );
    }

    #[test]
    fn other_uris_are_not_namespaced() {
        for uri in [
            "file:///etc/passwd",
            "sandboxio://",
            "sandboxio://files",
            "sandboxio:///x",
            "sandboxio://files/",
            "sandboxio://files/%zz",
            "sandboxio://files/%c3",
        ] {
            assert_eq!(unwrap(uri), None, "{uri}");
        }
    }
}
