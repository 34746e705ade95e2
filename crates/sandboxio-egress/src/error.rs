//! This crate's one error type, codes `SBX_E24xx` (table in `docs/ERRORS.md`).
//!
//! Two kinds: configuration that cannot be compiled into rules (usage errors), and the
//! reasons a connection is refused (`Refusal`), which are denials carried in records and
//! answered to the sandboxed program as an HTTP 403.

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

/// Egress settings that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EgressError {
    #[error("invalid egress pattern `{input}`: {why}")]
    InvalidPattern { input: String, why: &'static str },
    #[error("invalid address or CIDR block `{input}` in `allow_private`: {why}")]
    InvalidCidr { input: String, why: &'static str },
    #[error("invalid name server `{input}` in `[network] resolver` (expected `ip:port`)")]
    InvalidResolver { input: String },
    #[error("invalid `[[network.rule]]` {index}: {why}")]
    InvalidRule { index: usize, why: String },
    #[error("invalid `[[secrets]]` {index}: {why}")]
    InvalidSecret { index: usize, why: String },
    #[error("`[network] upstream_ca` `{path}` is not usable: {why}")]
    UpstreamCa { path: String, why: String },
    #[error("the edge TLS setup for secrets failed: {why}")]
    EdgeSetup { why: String },
    #[error("secret `{name}` is not available: {why}")]
    SecretUnavailable { name: String, why: String },
}

impl ErrorCode for EgressError {
    fn code(&self) -> &'static str {
        match self {
            EgressError::InvalidPattern { .. } => "SBX_E2401",
            EgressError::InvalidCidr { .. } => "SBX_E2402",
            EgressError::InvalidResolver { .. } => "SBX_E2403",
            EgressError::InvalidRule { .. } => "SBX_E2404",
            EgressError::InvalidSecret { .. } => "SBX_E2405",
            EgressError::UpstreamCa { .. } => "SBX_E2406",
            EgressError::EdgeSetup { .. } => "SBX_E2407",
            EgressError::SecretUnavailable { .. } => "SBX_E2408",
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            EgressError::EdgeSetup { .. } => ErrorClass::Internal,
            _ => ErrorClass::Usage,
        }
    }
}

/// Why the egress guard refused a connection. A value, not a failure: it becomes a denial.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Refusal {
    #[error("`{target}` is not allowed by this sandbox's egress rules")]
    NotAllowed { target: String },
    #[error("`{host}` resolves to {addr}, a {class} address, which the SSRF guard refuses")]
    ForbiddenAddress {
        host: String,
        addr: std::net::IpAddr,
        class: &'static str,
    },
    #[error("`{host}` did not resolve: {why}")]
    Unresolved { host: String, why: String },
    #[error("a CONNECT request inside a CONNECT tunnel to `{target}` is refused")]
    ConnectInConnect { target: String },
    #[error("the proxy cannot serve this request: {why}")]
    BadRequest { why: String },
    #[error("`{target}` could not be reached: {why}")]
    Unreachable { target: String, why: String },
    #[error("the placeholder of secret `{name}` is in a plain HTTP request to `{target}`; a secret is only injected over TLS")]
    SecretInCleartext { name: String, target: String },
    #[error("the placeholder of secret `{name}` is in a request to `{target}`, a host it is not bound to")]
    SecretNotBound { name: String, target: String },
    #[error("the secret `{name}` cannot be put into the request to `{target}`: {why}")]
    SecretNotInjectable {
        name: String,
        target: String,
        why: &'static str,
    },
    #[error("a request inside the tunnel to `{target}` is refused: {why}; only an origin-form target (`/path`) for the tunnel's own host goes there")]
    NotTheTunnelsHost { target: String, why: String },
    #[error("the sandbox holds {limit} tunnels, the most it may at once; the CONNECT to `{target}` is refused (close one and retry)")]
    TooManyTunnels { target: String, limit: usize },
    #[error("the supervisor's proxies hold {limit} connections, the most this process may at once across all sandboxes; the connection is refused (close one and retry)")]
    ProcessFull { limit: usize },
    #[error("the `{method}` request to `{target}` carries a body; a GET, HEAD, OPTIONS, DELETE or TRACE is forwarded without one only")]
    BodyNotAllowed { method: String, target: String },
}

impl ErrorCode for Refusal {
    fn code(&self) -> &'static str {
        match self {
            Refusal::NotAllowed { .. } => "SBX_E2410",
            Refusal::ForbiddenAddress { .. } => "SBX_E2411",
            Refusal::Unresolved { .. } => "SBX_E2412",
            Refusal::ConnectInConnect { .. } => "SBX_E2413",
            Refusal::BadRequest { .. } => "SBX_E2414",
            Refusal::Unreachable { .. } => "SBX_E2415",
            Refusal::SecretInCleartext { .. } => "SBX_E2416",
            Refusal::SecretNotBound { .. } => "SBX_E2417",
            Refusal::SecretNotInjectable { .. } => "SBX_E2418",
            Refusal::NotTheTunnelsHost { .. } => "SBX_E2419",
            Refusal::TooManyTunnels { .. } => "SBX_E2430",
            Refusal::ProcessFull { .. } => "SBX_E2432",
            Refusal::BodyNotAllowed { .. } => "SBX_E2431",
        }
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Denied
    }
}

/// Every code of this crate with its meaning, for `docs/ERRORS.md` (kept in sync by test).
pub const CODES: &[(&str, &str)] = &[
    ("SBX_E2401", "invalid egress pattern in `[network] allow` or a request's allowlist"),
    ("SBX_E2402", "invalid address or CIDR block in `[network] allow_private`"),
    ("SBX_E2403", "invalid name server in `[network] resolver`"),
    ("SBX_E2404", "invalid `[[network.rule]]`"),
    ("SBX_E2405", "invalid `[[secrets]]` entry (name, exactly one source, bound hosts, duplicate)"),
    ("SBX_E2406", "`[network] upstream_ca` not readable or holding no certificate"),
    ("SBX_E2407", "the per-sandbox CA or the edge TLS setup failed; the sandbox does not start"),
    ("SBX_E2408", "a `[[secrets]]` value is not available (variable unset, file unreadable, not stored); the sandbox does not start"),
    ("SBX_E2410", "egress refused: the host, port or request is not allowed by the egress rules"),
    ("SBX_E2411", "egress refused by the SSRF guard: private, loopback, link-local, CGNAT or metadata address"),
    ("SBX_E2412", "egress refused: the name did not resolve"),
    ("SBX_E2413", "egress refused: CONNECT inside a CONNECT tunnel"),
    ("SBX_E2414", "egress refused: a request the proxy cannot serve (not absolute-form, bad authority)"),
    ("SBX_E2415", "egress failed: the allowed upstream could not be reached"),
    ("SBX_E2416", "egress refused: a secret's placeholder in a plain HTTP request (secrets go over TLS only)"),
    ("SBX_E2417", "egress refused: a secret's placeholder headed to a host the secret is not bound to"),
    ("SBX_E2418", "egress refused: a secret's value cannot be put where its placeholder is (the request line would not be valid)"),
    ("SBX_E2419", "egress refused: a request inside a terminated tunnel names another host than the tunnel's (absolute-form target for another authority, userinfo, `Host`), or its target is not origin-form"),
    ("SBX_E2420", "invalid secret name (an environment variable name, 1 to 128 characters)"),
    ("SBX_E2421", "invalid secret value (empty, over 16 KiB, or holding control bytes)"),
    ("SBX_E2422", "invalid bound host for a secret (none, `*`, or not a host glob)"),
    ("SBX_E2423", "secrets key not usable (not 64 hex digits, or its file inside the state directory)"),
    ("SBX_E2424", "secrets key missing while the store holds sealed secrets"),
    ("SBX_E2425", "secrets key file readable by group or others"),
    ("SBX_E2426", "secrets key does not open the store (not the key it was sealed with)"),
    ("SBX_E2427", "secret store damaged (kept as it is, never reset)"),
    ("SBX_E2428", "no secret of that name in the store"),
    ("SBX_E2429", "secret store or key file i/o error"),
    ("SBX_E2430", "egress refused: the sandbox holds as many tunnels as it may at once (503; close one and retry)"),
    ("SBX_E2431", "egress refused: a plain HTTP GET, HEAD, OPTIONS, DELETE or TRACE with a body (`Content-Length` above 0 or `Transfer-Encoding`)"),
    ("SBX_E2432", "egress refused: the supervisor's proxies hold as many connections as the process may at once, across all sandboxes (503; close one and retry)"),
];
