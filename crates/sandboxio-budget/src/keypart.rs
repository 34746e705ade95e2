//! Names (tenants, sessions, agents, actions) written into the keys of budget scopes and
//! rate limits. A name may hold any character but control characters (an e-mail address
//! as a tenant, say), while a key separates its parts with `:`, `/`, `@` and `|`: each name
//! is written with `%`, `@`, `/`, `|` and `*` escaped (`%25`, `%40`, `%2F`, `%7C`, `%2A`),
//! so no name can end a part early, take the place of a window, or equal a wildcard, and two
//! different names never make one key. A name without those characters is written as it is.

use std::borrow::Cow;

const ESCAPES: [(char, &str); 5] = [
    ('%', "%25"),
    ('@', "%40"),
    ('/', "%2F"),
    ('|', "%7C"),
    ('*', "%2A"),
];

/// `name` as a part of a key.
pub fn escape(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '@', '/', '|', '*']) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match ESCAPES.iter().find(|(from, _)| *from == c) {
            Some((_, to)) => out.push_str(to),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The name a key part was written from. Only the escapes above are read back; any other
/// `%` stays as it is (a key written before names were escaped reads back unchanged).
pub fn unescape(part: &str) -> Cow<'_, str> {
    if !part.contains('%') {
        return Cow::Borrowed(part);
    }
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        // Compared as bytes: what follows a `%` may be any character, of any width.
        match ESCAPES.iter().find(|(_, code)| {
            tail.len() >= 3 && tail.as_bytes()[..3].eq_ignore_ascii_case(code.as_bytes())
        }) {
            Some((c, _)) => {
                out.push(*c);
                rest = &tail[3..];
            }
            None => {
                out.push('%');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_plain_names_are_unchanged() {
        for n in [
            "acme",
            "alice@example.com",
            "a/b",
            "x|y",
            "*",
            "50%",
            "%40",
            "bob@day:2026-12-06",
            "ünï",
        ] {
            let e = escape(n);
            assert!(!e.contains(['@', '/', '|', '*']), "{e}");
            assert_eq!(unescape(&e), n, "{e}");
        }
        assert!(matches!(escape("acme"), Cow::Borrowed(_)));
        // A stray `%` (a key from before escaping) reads back as it is, whatever follows.
        assert_eq!(unescape("50%off"), "50%off");
        assert_eq!(unescape("100%"), "100%");
        for odd in ["50%€", "%€x", "a%é", "%4€", "%%", "%"] {
            assert_eq!(unescape(odd), odd);
        }
    }
}
