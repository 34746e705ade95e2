//! Signed-in browsers: an API key, checked once, becomes a session cookie (HttpOnly,
//! SameSite=Strict, `Secure` over TLS) and a CSRF token that every state-changing request
//! must carry in `x-csrf-token`. Only the SHA-256 of the cookie is kept; the credential is
//! looked up again on every request, so revoking the key ends its sessions.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::context::random_hex;

/// The session cookie's name.
pub const COOKIE: &str = "sbx_dashboard";
/// How long a sign-in lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// At most this many live sessions (the oldest goes first).
pub const MAX_SESSIONS: usize = 4096;
/// At most this many live sessions of one key (its own oldest goes first): no key signs
/// in often enough to push out everyone else's.
pub const MAX_SESSIONS_PER_KEY: usize = 32;
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";

#[derive(Debug, Clone)]
pub struct SignIn {
    /// The API key's id (never its secret).
    pub credential: String,
    pub csrf: String,
    pub since: Instant,
}

#[derive(Debug, Default)]
pub struct SignIns {
    map: Mutex<HashMap<String, SignIn>>,
}

fn digest(cookie: &str) -> String {
    hex::encode(Sha256::digest(cookie.as_bytes()))
}

impl SignIns {
    /// A new session for `credential`: the cookie value and the CSRF token.
    pub fn create(&self, credential: &str) -> (String, String) {
        let cookie = random_hex(32);
        let csrf = random_hex(32);
        if let Ok(mut m) = self.map.lock() {
            m.retain(|_, s| s.since.elapsed() < SESSION_TTL);
            loop {
                let own = m.values().filter(|s| s.credential == credential).count();
                let over_own = own >= MAX_SESSIONS_PER_KEY;
                if !over_own && m.len() < MAX_SESSIONS {
                    break;
                }
                let oldest = m
                    .iter()
                    .filter(|(_, s)| !over_own || s.credential == credential)
                    .min_by_key(|(_, s)| s.since)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => m.remove(&k),
                    None => break,
                };
            }
            m.insert(
                digest(&cookie),
                SignIn {
                    credential: credential.to_string(),
                    csrf: csrf.clone(),
                    since: Instant::now(),
                },
            );
        }
        (cookie, csrf)
    }

    /// The live session of a cookie value.
    pub fn get(&self, cookie: &str) -> Option<SignIn> {
        let m = self.map.lock().ok()?;
        m.get(&digest(cookie))
            .filter(|s| s.since.elapsed() < SESSION_TTL)
            .cloned()
    }

    pub fn remove(&self, cookie: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(&digest(cookie));
        }
    }
}

/// The session cookie's value from the `Cookie` headers.
pub fn cookie_of(h: &HeaderMap) -> Option<String> {
    h.get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// The `Set-Cookie` value for a new session (or, with `None`, one that ends it).
pub fn set_cookie(value: Option<&str>, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    match value {
        Some(v) => format!(
            "{COOKIE}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            SESSION_TTL.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_key_signing_in_again_and_again_pushes_out_only_its_own_sessions() {
        let s = SignIns::default();
        let (other, _) = s.create("k1");
        let mine: Vec<String> = (0..MAX_SESSIONS_PER_KEY + 8)
            .map(|_| s.create("k2").0)
            .collect();
        assert!(
            s.get(&other).is_some(),
            "another key's session was pushed out"
        );
        let live = mine.iter().filter(|c| s.get(c).is_some()).count();
        assert_eq!(live, MAX_SESSIONS_PER_KEY);
        assert!(s.get(mine.last().unwrap()).is_some(), "the newest is kept");
        assert!(s.get(&mine[0]).is_none(), "the oldest goes first");
    }

    #[test]
    fn a_session_is_found_by_its_cookie_only() {
        let s = SignIns::default();
        let (cookie, csrf) = s.create("k1");
        let got = s.get(&cookie).unwrap();
        assert_eq!(got.credential, "k1");
        assert_eq!(got.csrf, csrf);
        assert!(s.get(&csrf).is_none());
        s.remove(&cookie);
        assert!(s.get(&cookie).is_none());
    }

    #[test]
    fn the_cookie_is_read_among_others_and_set_strictly() {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            format!("a=b; {COOKIE}=abc; c=d").parse().unwrap(),
        );
        assert_eq!(cookie_of(&h).as_deref(), Some("abc"));
        let c = set_cookie(Some("abc"), true);
        for part in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
            assert!(c.contains(part), "{c}");
        }
        assert!(!set_cookie(Some("abc"), false).contains("Secure"));
    }
}
