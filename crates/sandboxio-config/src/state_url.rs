//! `[state] url`: where a shared state store lives (PostgreSQL), checked when the file is
//! read. The password never reaches `Debug` or `Display`.

use serde::{Deserialize, Serialize};

/// The longest URL accepted.
pub const MAX_STATE_URL_LEN: usize = 4096;

/// A `postgres://` (or `postgresql://`) URL naming the shared state database. Valid by
/// construction: the scheme is known, it names a host (or a socket directory with
/// `?host=/dir`), and holds no whitespace or control characters.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StateUrl(String);

/// Why a state URL was refused (reported as an invalid value of `[state] url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateUrlError(pub String);

impl std::fmt::Display for StateUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StateUrlError {}

const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

impl StateUrl {
    pub fn parse(s: &str) -> Result<StateUrl, StateUrlError> {
        let err = |why: &str| {
            StateUrlError(format!("state url {why} (expected postgres://user@host:port/database or postgres:///database?host=/socket/dir)"))
        };
        if s.len() > MAX_STATE_URL_LEN {
            return Err(err(&format!("is longer than {MAX_STATE_URL_LEN} bytes")));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err("holds whitespace or a control character"));
        }
        let Some(rest) = SCHEMES.iter().find_map(|p| s.strip_prefix(p)) else {
            let scheme = s.split("://").next().unwrap_or("");
            return Err(err(&format!("has scheme `{scheme}`, not postgres")));
        };
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = before_query.split('/').next().unwrap_or("");
        let host = authority.rsplit_once('@').map(|x| x.1).unwrap_or(authority);
        let socket = query
            .split('&')
            .any(|kv| kv.strip_prefix("host=").is_some_and(|h| !h.is_empty()));
        if host.is_empty() && !socket {
            return Err(err("names no host"));
        }
        Ok(StateUrl(s.to_string()))
    }

    /// The URL with its password (if any) for the database client. Never log this.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with any password replaced by `***`, for messages and logs.
    pub fn redacted(&self) -> String {
        let s = &self.0;
        let Some(scheme) = SCHEMES.iter().find(|p| s.starts_with(*p)) else {
            return "***".into();
        };
        let rest = &s[scheme.len()..];
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (before_query, None),
        };
        let authority = match authority.rsplit_once('@') {
            Some((user, host)) => match user.split_once(':') {
                Some((name, _)) => format!("{name}:***@{host}"),
                None => format!("{user}@{host}"),
            },
            None => authority.to_string(),
        };
        let mut out = format!("{scheme}{authority}");
        if let Some(p) = path {
            out.push('/');
            out.push_str(p);
        }
        if let Some(q) = query {
            let q: Vec<String> = q
                .split('&')
                .map(|kv| {
                    if kv.starts_with("password=") {
                        "password=***".to_string()
                    } else {
                        kv.to_string()
                    }
                })
                .collect();
            out.push('?');
            out.push_str(&q.join("&"));
        }
        out
    }
}

impl TryFrom<String> for StateUrl {
    type Error = StateUrlError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        StateUrl::parse(&s)
    }
}

impl From<StateUrl> for String {
    fn from(u: StateUrl) -> String {
        u.0
    }
}

impl std::fmt::Debug for StateUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateUrl({})", self.redacted())
    }
}

impl std::fmt::Display for StateUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `[state] pool`: connections one process keeps to the shared store (1 to 256).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct PoolSize(u32);

/// Connections per process when `[state] pool` is not set.
pub const DEFAULT_POOL_SIZE: u32 = 8;

impl PoolSize {
    pub fn get(&self) -> u32 {
        self.0
    }
}

impl Default for PoolSize {
    fn default() -> Self {
        PoolSize(DEFAULT_POOL_SIZE)
    }
}

impl TryFrom<u64> for PoolSize {
    type Error = StateUrlError;
    fn try_from(n: u64) -> Result<Self, Self::Error> {
        match u32::try_from(n) {
            Ok(v @ 1..=256) => Ok(PoolSize(v)),
            _ => Err(StateUrlError(format!(
                "state pool size `{n}` is out of range (1 to 256)"
            ))),
        }
    }
}

impl From<PoolSize> for u64 {
    fn from(p: PoolSize) -> u64 {
        u64::from(p.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_host_and_socket_forms() {
        for ok in [
            "postgres://sbx:pw@db.internal:5432/sandboxio",
            "postgresql://db/sandboxio",
            "postgres:///sandboxio?host=/run/postgresql&user=sbx",
        ] {
            assert!(StateUrl::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_other_schemes_missing_hosts_and_whitespace() {
        for (bad, why) in [
            ("mysql://db/x", "scheme `mysql`"),
            ("postgres:///x", "names no host"),
            ("postgres://db/x y", "whitespace"),
            ("db/x", "scheme `db/x`"),
        ] {
            let e = StateUrl::parse(bad).unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_password_never_shows() {
        let u = StateUrl::parse("postgres://sbx:s3cret@db:5432/x?password=s3cret&sslmode=disable")
            .unwrap();
        let shown = format!("{u} {u:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("sbx:***@db:5432/x"), "{shown}");
        assert_eq!(
            u.expose(),
            "postgres://sbx:s3cret@db:5432/x?password=s3cret&sslmode=disable"
        );
    }

    #[test]
    fn pool_size_is_bounded() {
        assert!(PoolSize::try_from(0).is_err());
        assert!(PoolSize::try_from(257).is_err());
        assert_eq!(PoolSize::try_from(16).unwrap().get(), 16);
    }
}
