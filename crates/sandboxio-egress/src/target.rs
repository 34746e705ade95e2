//! What a sandboxed program asks the proxy to reach.

use std::fmt;

/// How the program reaches the host: a plain HTTP request the proxy forwards (method and
/// path visible), or a CONNECT tunnel (HTTPS or anything else; only host and port visible).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Tunnel,
}

impl Scheme {
    /// The name rules use: `http` for forwarded requests, `https` for tunnels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Tunnel => "https",
        }
    }
}

/// One connection (tunnel) or request (plain HTTP) to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    /// Lowercase, without a trailing dot; IPv6 literals without brackets.
    pub host: String,
    pub port: u16,
    /// Plain HTTP only.
    pub method: Option<String>,
    /// Plain HTTP, or a request inside a tunnel the proxy terminates: the path without
    /// the query.
    pub path: Option<String>,
    /// Secrets whose values the proxy puts into this request (names only).
    pub secrets: Vec<String>,
}

impl Target {
    pub fn tunnel(host: &str, port: u16) -> Target {
        Target {
            scheme: Scheme::Tunnel,
            host: normalize_host(host),
            port,
            method: None,
            path: None,
            secrets: Vec::new(),
        }
    }

    /// A request inside a tunnel the proxy terminates (TLS): method and path visible.
    pub fn inside_tunnel(host: &str, port: u16, method: &str, path: &str) -> Target {
        let mut t = Target::http(host, port, method, path);
        t.scheme = Scheme::Tunnel;
        t
    }

    pub fn http(host: &str, port: u16, method: &str, path: &str) -> Target {
        Target {
            scheme: Scheme::Http,
            host: normalize_host(host),
            port,
            method: Some(method.to_ascii_uppercase()),
            path: Some(path.to_string()),
            secrets: Vec::new(),
        }
    }

    /// `host:port` (IPv6 in brackets), as shown in records and denials.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.method, &self.path) {
            (Some(m), Some(p)) => match self.scheme {
                Scheme::Http => write!(f, "{m} http://{}{p}", self.authority()),
                Scheme::Tunnel => write!(f, "{m} https://{}{p}", self.authority()),
            },
            _ => write!(f, "{}", self.authority()),
        }
    }
}

/// Lowercase, brackets and one trailing dot removed.
pub fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase()
}

/// Whether `host` is a syntactically valid DNS name or IP literal (no spaces, no control
/// characters, labels of 1 to 63 letters, digits, `-` or `_`, at most 253 characters).
pub fn valid_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalized() {
        assert_eq!(normalize_host("PyPI.org."), "pypi.org");
        assert_eq!(normalize_host("[::1]"), "::1");
        assert_eq!(Target::tunnel("::1", 443).authority(), "[::1]:443");
    }

    #[test]
    fn odd_hosts_are_invalid() {
        assert!(valid_host("files.pythonhosted.org"));
        assert!(valid_host("10.0.0.1"));
        assert!(!valid_host("a b"));
        assert!(!valid_host("x..y"));
        assert!(!valid_host(&"a".repeat(64)));
        assert!(!valid_host("evil\r\nhost"));
    }
}
