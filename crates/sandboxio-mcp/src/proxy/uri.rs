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

/// The upstream's name, its own URI and the canonical namespaced URI (`wrap` of the two)
/// for a namespaced URI in any spelling `unwrap` takes (lower-case escapes, raw
/// characters, escapes of unreserved ones): pins are keyed, and decisions made, on the
/// canonical form only, so another spelling of the same resource cannot dodge its pin.
pub fn canonical(uri: &str) -> Option<(String, String, String)> {
    let (upstream, own) = unwrap(uri)?;
    let wrapped = wrap(upstream, &own);
    Some((upstream.to_string(), own, wrapped))
}

/// Bytes whose escape is kept in a path: decoding them would change what the path
/// means (`%`, `?`, `#`, brackets) or make it unprintable (controls). `/`, `\` and NUL
/// are refused before this.
fn kept_escaped_in_path(b: u8) -> bool {
    b"%?#[]".contains(&b) || b < 0x20 || b == 0x7f
}

/// Bytes whose escape is decoded in an authority: the unreserved ones only (a decoded
/// `@` or `:` would move the userinfo or port).
fn plain_in_authority(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Decodes the escapes in `part` for which `decode` holds; the others are kept,
/// upper-cased. An escaped `/` (it would split or join segments), `\` or NUL, a `%`
/// that starts no escape, and bytes that are not UTF-8 once decoded make the URI
/// ambiguous.
fn decode_part(part: &str, decode: fn(u8) -> bool) -> Result<String, &'static str> {
    let b = part.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let (Some(h), Some(l)) = (
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) else {
            return Err("a `%` that starts no escape");
        };
        let v = h * 16 + l;
        match v {
            b'/' => return Err("an encoded `/`"),
            b'\\' => return Err("an encoded `\\`"),
            0 => return Err("an encoded NUL"),
            _ if decode(v) => out.push(v),
            _ => out.extend_from_slice(format!("%{v:02X}").as_bytes()),
        }
        i += 3;
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded")
}

fn decode_path(path: &str) -> Result<String, &'static str> {
    decode_part(path, |b| !kept_escaped_in_path(b))
}

/// RFC 3986 `remove_dot_segments` of an absolute path, with `//` collapsed too.
fn remove_dots(path: &str) -> String {
    let mut segs: Vec<&str> = Vec::new();
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    let last = parts.len().saturating_sub(1);
    let mut trailing = false;
    for (i, seg) in parts.iter().enumerate() {
        match *seg {
            "." => trailing = i == last,
            ".." => {
                segs.pop();
                trailing = i == last;
            }
            "" => trailing = i == last,
            s => {
                segs.push(s);
                trailing = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if trailing || out.is_empty() {
        out.push('/');
    }
    out
}

/// The normal form of an upstream's URI, which policy decides on and the upstream is
/// sent, so the two agree whatever spelling a client chose: the scheme lower-cased;
/// `file://localhost/p`, `file:/p` and `file:////p` as `file:///p`; in the path, every
/// escape decoded (a space, a non-ASCII letter: `%20` and ` ` are one form, the decoded
/// one) but those of `%`, `?`, `#`, brackets and controls (kept, upper-cased); in the
/// authority, escapes of unreserved characters decoded; dot segments removed and `//`
/// collapsed (hierarchical paths only). Query and fragment are kept. An error (why) when
/// it is ambiguous: no scheme, an encoded `/`, a `\`, a NUL, a bad escape, bytes that are
/// not UTF-8, a `file:` URI with a host, user or port other than `localhost`, or a
/// relative `file:` path.
pub fn normalise(uri: &str) -> Result<String, &'static str> {
    if uri.contains('\\') || uri.contains('\0') {
        return Err("a `\\` or NUL");
    }
    let lower = uri.to_ascii_lowercase();
    if lower.contains("%00") || lower.contains("%5c") {
        return Err("an encoded `\\` or NUL");
    }
    let scheme_end = uri
        .find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .filter(|&i| i > 0 && uri.as_bytes()[i] == b':' && uri.as_bytes()[0].is_ascii_alphabetic());
    let Some(colon) = scheme_end else {
        // Relative or scheme-less: an upstream would resolve it against a base of its
        // choosing.
        return Err("no scheme");
    };
    let scheme = uri[..colon].to_ascii_lowercase();
    let rest = &uri[colon + 1..];
    let tail_at = rest.find(['?', '#']).unwrap_or(rest.len());
    let (hier, tail) = rest.split_at(tail_at);
    let (mut authority, path) = match hier.strip_prefix("//") {
        Some(h) => {
            let end = h.find('/').unwrap_or(h.len());
            (Some(h[..end].to_string()), &h[end..])
        }
        None => (None, hier),
    };
    if let Some(a) = &authority {
        authority = Some(decode_part(a, plain_in_authority)?);
    }
    if scheme == "file" {
        let local = authority
            .as_deref()
            .is_none_or(|a| a.is_empty() || a.eq_ignore_ascii_case("localhost"));
        if !local {
            // Some parsers take the path and drop the host, user or port.
            return Err("a `file:` URI with a host, user or port other than `localhost`");
        }
        if !path.starts_with('/') {
            // `file:data/x`: some parsers make it `/data/x`.
            return Err("a `file:` URI whose path is not absolute");
        }
        authority = Some(String::new());
    }
    let mut path = decode_path(path)?;
    if path.starts_with('/') {
        path = remove_dots(&path);
    }
    let mut out = format!("{scheme}:");
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(&a);
    }
    out.push_str(&path);
    out.push_str(tail);
    Ok(out)
}

/// One part of a URI template: literal text or a `{...}` expression.
enum Part<'a> {
    Literal(&'a str),
    Expression,
}

fn template_parts(template: &str) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        if open > 0 {
            parts.push(Part::Literal(&rest[..open]));
        }
        parts.push(Part::Expression);
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest));
    }
    parts
}

/// Whether `uri` could be an expansion of the RFC 6570 `template` (both the upstream's
/// own). Conservative: every expression (`{var}`, `{+var}`, `{/var}`, `{?q}`, ...)
/// matches any run of characters, `/` included, so a read is taken for an expansion
/// whenever it could be one.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let parts = template_parts(template);
    let s = uri.as_bytes();
    // reach[i]: the first `i` bytes of `uri` are matched by the parts so far.
    let mut reach = vec![false; s.len() + 1];
    reach[0] = true;
    for part in &parts {
        let mut next = vec![false; s.len() + 1];
        match part {
            Part::Literal(lit) => {
                let l = lit.as_bytes();
                for i in 0..=s.len() {
                    if reach[i] && s[i..].starts_with(l) {
                        next[i + l.len()] = true;
                    }
                }
            }
            Part::Expression => {
                let mut any = false;
                for i in 0..=s.len() {
                    any |= reach[i];
                    next[i] = any;
                }
            }
        }
        reach = next;
    }
    reach[s.len()]
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

    #[test]
    fn every_spelling_of_a_namespaced_uri_has_one_canonical_form() {
        let w = wrap("files", "file:///data/public/a");
        for alt in [
            w.clone(),
            w.replace("%3A", "%3a").replace("%2F", "%2f"),
            "sandboxio://files/file:///data/public/a".to_string(),
            "sandboxio://files/file%3A%2F%2F%2Fdata%2Fpublic%2F%61".to_string(),
        ] {
            let (up, own, c) = canonical(&alt).unwrap();
            assert_eq!(
                (up.as_str(), own.as_str()),
                ("files", "file:///data/public/a")
            );
            assert_eq!(c, w, "{alt}");
        }
    }

    #[test]
    fn a_template_matches_its_expansions_and_nothing_else() {
        let t = "file:///data/public/{name}";
        assert!(template_matches(t, "file:///data/public/zzz"));
        assert!(template_matches(t, "file:///data/public/a/b"));
        assert!(template_matches(t, "file:///data/public/"));
        assert!(!template_matches(t, "file:///data/private/zzz"));
        assert!(template_matches("mem://{a}/x/{b}.txt", "mem://q/x/r.txt"));
        assert!(!template_matches("mem://{a}/x/{b}.txt", "mem://q/y/r.txt"));
        assert!(template_matches("mem://note", "mem://note"));
        assert!(!template_matches("mem://note", "mem://notes"));
    }

    #[test]
    fn equivalent_uris_have_one_normal_form_and_ambiguous_ones_are_refused() {
        for u in [
            "file:///data/private/k",
            "file://localhost/data/private/k",
            "file://LocalHost/data/private/k",
            "file:///data/%70rivate/k",
            "FILE:///data/private/k",
            "file:/data/private/k",
            "file:////data/private/k",
            "file:///data//private/k",
            "file:///data/public/../private/k",
            "file:///data/./private/k",
            "file:///data/%2e%2e/data/private/k",
            "file:///%2E/data/private/k",
        ] {
            assert_eq!(normalise(u), Ok("file:///data/private/k".into()), "{u}");
        }
        assert_eq!(normalise("mem://note"), Ok("mem://note".into()));
        assert_eq!(
            normalise("file:///a%20b?q=%2F#f"),
            Ok("file:///a b?q=%2F#f".into())
        );
        assert_eq!(
            normalise("file:///data/geheimnisse-%c3%a4/%3f%25"),
            Ok("file:///data/geheimnisse-ä/%3F%25".into())
        );
        assert_eq!(normalise("MEM://%6Fdd"), Ok("mem://odd".into()));
        for bad in [
            "file://127.0.0.1/data/k",
            "file://localhost:/data/k",
            "file://user@localhost/data/k",
            "file:data/k",
            "/data/k",
            "//localhost/data/k",
            "file:///a%ff",
        ] {
            assert!(normalise(bad).is_err(), "{bad}");
        }
        assert_eq!(normalise("file:///a%2fb/.."), Err("an encoded `/`"));
        assert_eq!(
            normalise("file:///data/secrets/.."),
            Ok("file:///data/".into())
        );
        assert_eq!(
            normalise("file:///data/secrets/."),
            Ok("file:///data/secrets/".into())
        );
        assert_eq!(normalise("file:///../../etc/x"), Ok("file:///etc/x".into()));
        for bad in [
            "file:///a%5cb",
            "file:///a\\b",
            "file:///a%00",
            "file:///a%zz",
            "file:///a%",
        ] {
            assert!(normalise(bad).is_err(), "{bad}");
        }
        assert_eq!(normalise("urn:Isbn:%41"), Ok("urn:Isbn:A".into()));
        assert!(normalise("relative/x").is_err());
    }
}
