//! Egress rules: which hosts, ports, schemes, methods and paths a sandbox may reach.
//!
//! Compiled from the request's network mode (`allowlist` patterns, or `full`) and the
//! configuration's `[[network.rule]]`s. Pure: no I/O. The SSRF guard and the policy decide
//! after these rules (see `guard`).

use sandboxio_config::{EgressRuleSection, NetworkSection};
use sandboxio_core::NetworkMode;

use crate::cidr::Cidr;
use crate::error::EgressError;
use crate::target::{normalize_host, valid_host, Scheme, Target};

/// A host glob: `*` (any), `*.example.com` (its subdomains, not itself), or one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostGlob {
    Any,
    Subdomains(String),
    Exact(String),
}

impl HostGlob {
    pub fn parse(input: &str) -> Result<HostGlob, EgressError> {
        let bad = |why| EgressError::InvalidPattern {
            input: input.to_string(),
            why,
        };
        let h = normalize_host(input);
        if h == "*" {
            return Ok(HostGlob::Any);
        }
        if let Some(rest) = h.strip_prefix("*.") {
            if !valid_host(rest) || rest.contains('*') {
                return Err(bad("a host glob is `*`, `*.example.com` or a name"));
            }
            return Ok(HostGlob::Subdomains(rest.to_string()));
        }
        if !valid_host(&h) {
            return Err(bad("not a host name or IP address"));
        }
        Ok(HostGlob::Exact(h))
    }

    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostGlob::Any => true,
            HostGlob::Exact(h) => h == host,
            HostGlob::Subdomains(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// The IP address this glob names, if it is an IP literal.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        match self {
            HostGlob::Exact(h) => h.parse().ok(),
            _ => None,
        }
    }
}

/// Ports a rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    Any,
    List(Vec<(u16, u16)>),
}

impl Ports {
    /// Ports 80 and 443: what a host named without a port may use.
    pub fn web() -> Ports {
        Ports::List(vec![(80, 80), (443, 443)])
    }

    fn matches(&self, port: u16) -> bool {
        match self {
            Ports::Any => true,
            Ports::List(l) => l.iter().any(|(a, b)| (*a..=*b).contains(&port)),
        }
    }
}

/// One compiled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub hosts: Vec<HostGlob>,
    pub ports: Ports,
    /// Empty: both.
    pub schemes: Vec<Scheme>,
    /// Empty: any (plain HTTP only when not empty).
    pub methods: Vec<String>,
    /// Empty: any (plain HTTP only when not empty).
    pub paths: Vec<String>,
    /// Tenant globs; empty: every tenant.
    pub tenants: Vec<String>,
}

impl Rule {
    /// `host`, `host:port`, `host:*`, `host:8000-8100`, `[v6]:port`, optionally prefixed by
    /// `http://` or `https://` to restrict the scheme.
    pub fn parse_pattern(input: &str) -> Result<Rule, EgressError> {
        let bad = |why| EgressError::InvalidPattern {
            input: input.to_string(),
            why,
        };
        let (schemes, rest) = if let Some(r) = input.strip_prefix("https://") {
            (vec![Scheme::Tunnel], r)
        } else if let Some(r) = input.strip_prefix("http://") {
            (vec![Scheme::Http], r)
        } else if input.contains("://") {
            return Err(bad("the only schemes are `http://` and `https://`"));
        } else {
            (Vec::new(), input)
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = split_host_port(rest).ok_or_else(|| bad("expected `host:port`"))?;
        let ports = match port {
            None => Ports::web(),
            Some("*") => Ports::Any,
            Some(p) => Ports::List(vec![parse_port_range(p).ok_or_else(|| {
                bad("a port is a number from 1 to 65535, a range `a-b`, or `*`")
            })?]),
        };
        Ok(Rule {
            hosts: vec![HostGlob::parse(host)?],
            ports,
            schemes,
            methods: Vec::new(),
            paths: Vec::new(),
            tenants: Vec::new(),
        })
    }

    pub fn from_section(index: usize, s: &EgressRuleSection) -> Result<Rule, EgressError> {
        let bad = |why: String| EgressError::InvalidRule { index, why };
        if s.host.is_empty() {
            return Err(bad("`host` lists no host".into()));
        }
        let hosts = s
            .host
            .iter()
            .map(|h| HostGlob::parse(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if s.ports.contains(&0) {
            return Err(bad("port 0 is not a port".into()));
        }
        let ports = if s.ports.is_empty() {
            Ports::web()
        } else {
            Ports::List(s.ports.iter().map(|p| (*p, *p)).collect())
        };
        let schemes = s
            .schemes
            .iter()
            .map(|x| match x.as_str() {
                "http" => Ok(Scheme::Http),
                "https" => Ok(Scheme::Tunnel),
                other => Err(bad(format!(
                    "unknown scheme `{other}` (expected `http` or `https`)"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        for m in &s.methods {
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err(bad(format!("`{m}` is not an HTTP method")));
            }
        }
        for p in &s.paths {
            if !p.starts_with('/') {
                return Err(bad(format!("path prefix `{p}` does not start with `/`")));
            }
        }
        Ok(Rule {
            hosts,
            ports,
            schemes,
            methods: s.methods.iter().map(|m| m.to_ascii_uppercase()).collect(),
            paths: s.paths.clone(),
            tenants: s.tenants.clone(),
        })
    }

    pub fn matches(&self, t: &Target, tenant: &str) -> bool {
        if !self.tenants.is_empty() && !self.tenants.iter().any(|g| tenant_glob(g, tenant)) {
            return false;
        }
        if !self.hosts.iter().any(|h| h.matches(&t.host)) || !self.ports.matches(t.port) {
            return false;
        }
        if !self.schemes.is_empty() && !self.schemes.contains(&t.scheme) {
            return false;
        }
        // Methods and paths are visible on plain HTTP and inside tunnels the proxy
        // terminates (secrets at the edge): a rule naming them never matches an opaque
        // tunnel (fail closed).
        if !self.methods.is_empty() {
            match &t.method {
                Some(m) if self.methods.contains(m) => {}
                _ => return false,
            }
        }
        if !self.paths.is_empty() {
            // Matched as the upstream will read it: `/simple/../admin` and
            // `/simple/%2e%2e/admin` are `/admin`; a path that cannot be read one way only
            // (an encoded slash or backslash, a `..` above the root) matches nothing.
            match t.path.as_deref().and_then(canonical_path) {
                Some(p) if self.paths.iter().any(|x| p.starts_with(x.as_str())) => {}
                _ => return false,
            }
        }
        true
    }
}

/// `raw` (a request target's path, with or without its query) with `%2e` decoded and its
/// dot segments removed (RFC 3986, section 5.2.4). `None` for a path servers read in
/// different ways: an encoded `/` or `\\`, a raw `\\`, a NUL, an empty segment, `..` past
/// the root, or
/// anything [`ambiguous`].
pub fn canonical_path(raw: &str) -> Option<String> {
    let path = raw.split(['?', '#']).next().unwrap_or("");
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") || lower.contains("%00") {
        return None;
    }
    // An empty segment (`//`) anywhere: nginx and Apache merge slashes before removing
    // dot segments (`/simple//../admin` is `/admin` there, `/simple/admin` here).
    if path.contains('\\') || path.contains('\0') || path.contains("//") || ambiguous(path) {
        return None;
    }
    let decoded = path.replace("%2e", ".").replace("%2E", ".");
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                // The root's empty first segment stays: `..` past it is refused.
                if out.len() <= 1 {
                    return None;
                }
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    Some(out.join("/"))
}

/// Whether servers may read `path` (without its query) in different ways, beyond dot
/// segments: a `;` (raw or `%3b`: Tomcat, Jetty and Spring drop `;params` from each
/// segment, so `/simple/..;/admin` is `/admin` there), an encoded `%` followed by a hex
/// digit (double encoding: `%252e` is `.` to a server that decodes twice), a `%` that does
/// not start two hex digits, an encoded control byte, or encoded bytes that are not UTF-8
/// (overlong forms such as `%c0%ae`, which lax decoders read as `.`).
fn ambiguous(path: &str) -> bool {
    if path.contains(';') {
        return true;
    }
    let b = path.as_bytes();
    let mut decoded = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            decoded.push(b[i]);
            i += 1;
            continue;
        }
        let hex = |c: u8| char::from(c).to_digit(16);
        let (Some(hi), Some(lo)) = (
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) else {
            return true;
        };
        let byte = u8::try_from(hi * 16 + lo).unwrap_or(0);
        let next_is_hex = b.get(i + 3).copied().and_then(hex).is_some();
        if byte == b';' || (byte == b'%' && next_is_hex) || byte < 0x20 || byte == 0x7f {
            return true;
        }
        decoded.push(byte);
        i += 3;
    }
    std::str::from_utf8(&decoded).is_err()
}

fn tenant_glob(glob: &str, tenant: &str) -> bool {
    match glob.strip_suffix('*') {
        Some(prefix) => tenant.starts_with(prefix),
        None => glob == tenant,
    }
}

fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            p => Some((host, Some(p.strip_prefix(':')?))),
        };
    }
    match s.rsplit_once(':') {
        // A bare IPv6 address without brackets has several colons: no port.
        Some((h, _)) if h.contains(':') => Some((s, None)),
        Some((h, p)) => Some((h, Some(p))),
        None => Some((s, None)),
    }
}

fn parse_port_range(p: &str) -> Option<(u16, u16)> {
    let (a, b) = match p.split_once('-') {
        Some((a, b)) => (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?),
        None => {
            let x = p.parse::<u16>().ok()?;
            (x, x)
        }
    };
    (a >= 1 && a <= b).then_some((a, b))
}

/// The compiled egress rules of one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// `full`: every host and port (the SSRF guard still applies).
    pub full: bool,
    pub rules: Vec<Rule>,
    /// Addresses the SSRF guard lets through for every target: `[network] allow_private`.
    /// (An IP literal named by a rule is let through only for what that rule allows: see
    /// `Rules::exempts`.)
    pub allow_private: Vec<Cidr>,
}

/// What the configuration contributes to every sandbox's rules, compiled once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressConfig {
    pub rules: Vec<Rule>,
    pub allow_private: Vec<Cidr>,
    pub resolver: Vec<std::net::SocketAddr>,
}

impl EgressConfig {
    /// Compiles `[network]` (its `allow` patterns are compiled again per request, since a
    /// request carries its own allowlist).
    pub fn from_section(s: &NetworkSection) -> Result<EgressConfig, EgressError> {
        for p in &s.allow {
            Rule::parse_pattern(p)?;
        }
        let rules = s
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::from_section(i + 1, r))
            .collect::<Result<Vec<_>, _>>()?;
        let allow_private = s
            .allow_private
            .iter()
            .map(|c| Cidr::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let resolver = s
            .resolver
            .iter()
            .map(|r| {
                r.parse().map_err(|_| EgressError::InvalidResolver {
                    input: r.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EgressConfig {
            rules,
            allow_private,
            resolver,
        })
    }

    /// The rules of one sandbox: its network mode's patterns plus the configured rules.
    /// `None` for network `none` (no proxy at all).
    pub fn rules_for(&self, mode: &NetworkMode) -> Result<Option<Rules>, EgressError> {
        let (full, patterns) = match mode {
            NetworkMode::None => return Ok(None),
            NetworkMode::Full => (true, &[][..]),
            NetworkMode::Allowlist { allow } => (false, allow.as_slice()),
        };
        let mut rules = patterns
            .iter()
            .map(|p| Rule::parse_pattern(p))
            .collect::<Result<Vec<_>, _>>()?;
        rules.extend(self.rules.iter().cloned());
        let allow_private = self.allow_private.clone();
        Ok(Some(Rules {
            full,
            rules,
            allow_private,
        }))
    }
}

impl Rules {
    /// Whether the rules let `t` through (before the SSRF guard and the policy).
    pub fn allows(&self, t: &Target, tenant: &str) -> bool {
        self.full || self.rules.iter().any(|r| r.matches(t, tenant))
    }

    /// Whether the SSRF guard lets `ip` through for the target `t` of `tenant`: it is in
    /// `[network] allow_private`, or a rule that allows this very target (its host, port,
    /// scheme, tenants) names `ip` as an IP literal. A rule naming an internal address
    /// opens that address for what the rule allows, not for every rule, port or tenant (a
    /// name of another rule resolving there stays refused).
    pub fn exempts(&self, ip: std::net::IpAddr, t: &Target, tenant: &str) -> bool {
        self.allow_private.iter().any(|c| c.contains(ip))
            || self
                .rules
                .iter()
                .any(|r| r.hosts.iter().any(|h| h.ip() == Some(ip)) && r.matches(t, tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[&str]) -> Rules {
        EgressConfig::default()
            .rules_for(&NetworkMode::Allowlist {
                allow: patterns.iter().map(|s| s.to_string()).collect(),
            })
            .unwrap()
            .unwrap()
    }

    #[test]
    fn patterns_match_host_and_port() {
        let r = rules(&["pypi.org:443", "*.npmjs.org", "internal.example:8000-8100"]);
        assert!(r.allows(&Target::tunnel("pypi.org", 443), "t"));
        assert!(!r.allows(&Target::tunnel("pypi.org", 80), "t"));
        assert!(!r.allows(&Target::tunnel("evil-pypi.org", 443), "t"));
        assert!(!r.allows(&Target::tunnel("pypi.org.evil.com", 443), "t"));
        assert!(r.allows(&Target::tunnel("registry.npmjs.org", 443), "t"));
        assert!(r.allows(&Target::tunnel("registry.npmjs.org", 80), "t"));
        assert!(!r.allows(&Target::tunnel("npmjs.org", 443), "t"));
        assert!(!r.allows(&Target::tunnel("xnpmjs.org", 443), "t"));
        assert!(r.allows(&Target::tunnel("internal.example", 8050), "t"));
        assert!(!r.allows(&Target::tunnel("internal.example", 8101), "t"));
    }

    #[test]
    fn schemes_restrict() {
        let r = rules(&["https://api.example.com"]);
        assert!(r.allows(&Target::tunnel("api.example.com", 443), "t"));
        assert!(!r.allows(&Target::http("api.example.com", 80, "GET", "/"), "t"));
    }

    #[test]
    fn methods_and_paths_match_plain_http_only() {
        let section = EgressRuleSection {
            host: vec!["index.example".into()],
            ports: vec![80, 443],
            methods: vec!["get".into()],
            paths: vec!["/simple/".into()],
            ..Default::default()
        };
        let r = Rules {
            full: false,
            rules: vec![Rule::from_section(1, &section).unwrap()],
            allow_private: vec![],
        };
        assert!(r.allows(
            &Target::http("index.example", 80, "GET", "/simple/numpy/"),
            "t"
        ));
        assert!(!r.allows(
            &Target::http("index.example", 80, "POST", "/simple/numpy/"),
            "t"
        ));
        assert!(!r.allows(&Target::http("index.example", 80, "GET", "/admin"), "t"));
        assert!(!r.allows(&Target::tunnel("index.example", 443), "t"));
    }

    #[test]
    fn paths_match_as_the_upstream_reads_them() {
        let section = EgressRuleSection {
            host: vec!["index.example".into()],
            ports: vec![80],
            paths: vec!["/simple/".into()],
            ..Default::default()
        };
        let r = Rules {
            full: false,
            rules: vec![Rule::from_section(1, &section).unwrap()],
            allow_private: vec![],
        };
        let get = |p: &str| r.allows(&Target::http("index.example", 80, "GET", p), "t");
        assert!(get("/simple/numpy/"));
        assert!(get("/simple/./numpy/?q=1"));
        assert!(get("/admin/../simple/numpy/"));
        for bypass in [
            "/simple/../admin/secret.txt",
            "/simple/%2e%2e/admin/secret.txt",
            "/simple/%2E%2e/admin/secret.txt",
            "/simple/.%2e/admin/secret.txt",
            "/simple/..",
            "/simple/%2fadmin",
            "/simple/..%5cadmin",
            "/simple\\..\\admin",
            "/../simple/x",
            // Path parameters, double encoding, overlong UTF-8, broken escapes.
            "/simple/..;/admin",
            "/simple/.%2e;x=1/admin",
            "/simple/..%3b/admin",
            "/simple/..%3B/admin",
            "/simple/x;jsessionid=1",
            "/simple/%252e%252e/admin",
            "/simple/%252E%252E/admin",
            "/simple/%c0%ae%c0%ae/admin",
            "/simple/%e0%80%ae%e0%80%ae/admin",
            "/simple/%ff/x",
            "/simple/%2",
            "/simple/%zz/x",
            "/simple/%0a/x",
        ] {
            assert!(!get(bypass), "{bypass} matched /simple/");
        }
        // Encodings that read one way only still match.
        assert!(get("/simple/caf%C3%A9/"));
        assert!(get("/simple/a%20b/?q=%25;x"));
        assert!(get("/simple/100%25/"));
        assert_eq!(canonical_path("/a/b/../c/./d").as_deref(), Some("/a/c/d"));
        assert_eq!(canonical_path("/a/b/..").as_deref(), Some("/a/"));
        assert_eq!(canonical_path("/.."), None);
    }

    #[test]
    fn tenants_restrict_rules() {
        let section = EgressRuleSection {
            host: vec!["api.internal".into()],
            tenants: vec!["acme-*".into()],
            ..Default::default()
        };
        let rule = Rule::from_section(1, &section).unwrap();
        assert!(rule.matches(&Target::tunnel("api.internal", 443), "acme-ml"));
        assert!(!rule.matches(&Target::tunnel("api.internal", 443), "globex"));
    }

    #[test]
    fn ip_literals_in_rules_are_named_for_the_guard_only_for_what_the_rule_allows() {
        let r = rules(&["10.1.2.3:5432", "[::1]:8080", "db.example:5432"]);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(r.exempts(ip("10.1.2.3"), &Target::tunnel("10.1.2.3", 5432), "t"));
        assert!(r.exempts(ip("::1"), &Target::tunnel("::1", 8080), "t"));
        assert!(!r.exempts(ip("10.1.2.4"), &Target::tunnel("10.1.2.4", 5432), "t"));
        // Another port of the address, or another rule's name resolving to it: not exempt.
        assert!(!r.exempts(ip("10.1.2.3"), &Target::tunnel("10.1.2.3", 22), "t"));
        assert!(!r.exempts(ip("::1"), &Target::tunnel("::1", 5432), "t"));
        assert!(!r.exempts(ip("10.1.2.3"), &Target::tunnel("db.example", 5432), "t"));
        assert!(r.allows(&Target::tunnel("::1", 8080), "t"));
    }

    #[test]
    fn full_allows_any_host_but_none_has_no_rules() {
        let c = EgressConfig::default();
        let full = c.rules_for(&NetworkMode::Full).unwrap().unwrap();
        assert!(full.allows(&Target::tunnel("anything.example", 22), "t"));
        assert!(c.rules_for(&NetworkMode::None).unwrap().is_none());
    }

    #[test]
    fn bad_patterns_are_errors() {
        for bad in [
            "",
            "host:0",
            "host:70000",
            "host:9-1",
            "ftp://host",
            "*.*.x",
            "a b:80",
            "x*y.com",
            "[::1",
        ] {
            assert!(Rule::parse_pattern(bad).is_err(), "{bad}");
        }
    }
}
