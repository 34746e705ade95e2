//! Server errors: each has a stable code (`SBX_E18xx`) and an HTTP status, and becomes an
//! `application/problem+json` answer that never echoes internals.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandboxio_core::ErrorCode;
use sandboxio_gateway::GatewayError;
use thiserror::Error;

use crate::problem::Problem;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("no credential: send `Authorization: Bearer <api key or capability token>`")]
    Unauthenticated,
    #[error("the credential is malformed, unknown, revoked or expired")]
    BadCredential,
    #[error("the credential lacks the `{scope}` scope")]
    MissingScope { scope: &'static str },
    #[error("{what}; use an API key with the `read` scope")]
    TenantWide { what: &'static str },
    #[error("{what} `{id}` not found")]
    NotFound { what: &'static str, id: String },
    #[error("the request body is not valid JSON: {why}")]
    MalformedJson { why: String },
    #[error("the request body does not fit the schema: {why}")]
    InvalidBody { why: String },
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the server is at its limit of {limit} concurrent requests; retry shortly")]
    Busy { limit: usize },
    #[error("the server is at its limit of requests reading a body without a credential in their headers; retry shortly")]
    UnauthenticatedBusy,
    #[error("tenant `{tenant}` already has {limit} {what}{of}; retry shortly")]
    TenantBusy {
        tenant: String,
        what: &'static str,
        limit: usize,
        of: String,
    },
    #[error("the request body was not sent within {secs} s (a request without a credential in its headers must send its body at once)")]
    SlowBody { secs: u64 },
    #[error("the request did not finish within {secs} s")]
    Timeout { secs: u64 },
    #[error("invalid `{field}`: {why}")]
    BadValue { field: &'static str, why: String },
    #[error("tenant `{tenant}` already has {limit} sandboxes (the most it may hold)")]
    Quota { tenant: String, limit: usize },
    #[error("tenant `{tenant}` already runs {limit} background processes (the most it may)")]
    BackgroundQuota { tenant: String, limit: usize },
    #[error("invalid labels: {why}")]
    Labels { why: String },
    #[error("label `{name}` is set by sandboxio itself (the cost report and records read it); choose another name")]
    ReservedLabel { name: String },
    #[error("invalid approval webhook: {why}")]
    Webhook { why: String },
    #[error("sandbox `{id}` is paused: resume it (`POST /v1/sandboxes/{id}/resume`) first")]
    Paused { id: String },
    #[error("sandbox `{id}` was lost when the server restarted: {reason}")]
    Lost { id: String, reason: String },
    #[error("the E2B API's state in `{path}` cannot be used: {why}; restore it from a backup, or move it aside to start afresh (every E2B sandbox's access token then changes)")]
    E2bState { path: String, why: String },
    #[error("internal error while {action}")]
    Internal { action: &'static str },
    #[error("the sandbox's environment values cannot be sealed at rest on this server (its secrets key is missing or unusable; see its log): create it without `env`, or fix the key")]
    EnvNotSealed,
    #[error("cannot listen on `{addr}`")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load the TLS {what} `{path}`: {why}")]
    Tls {
        what: &'static str,
        path: String,
        why: String,
    },
    #[error("no route for `{method} {path}`")]
    NoRoute { method: String, path: String },
    #[error("`{path}` does not answer `{method}`")]
    MethodNotAllowed { method: String, path: String },
    #[error("no dashboard session: sign in with an API key")]
    NoSession,
    #[error("the request lacks this session's CSRF token (`x-csrf-token`)")]
    Csrf,
    #[error("the gateway failed: {0}")]
    Gateway(#[from] GatewayError),
}

impl ErrorCode for ServerError {
    fn code(&self) -> &'static str {
        match self {
            ServerError::Unauthenticated => "SBX_E1801",
            ServerError::BadCredential => "SBX_E1802",
            ServerError::MissingScope { .. } => "SBX_E1803",
            ServerError::TenantWide { .. } => "SBX_E1817",
            ServerError::NotFound { .. } => "SBX_E1804",
            ServerError::MalformedJson { .. } => "SBX_E1805",
            ServerError::InvalidBody { .. } => "SBX_E1806",
            ServerError::TooLarge { .. } => "SBX_E1807",
            ServerError::Busy { .. } => "SBX_E1808",
            ServerError::TenantBusy { .. } => "SBX_E1818",
            ServerError::UnauthenticatedBusy => "SBX_E1808",
            ServerError::SlowBody { .. } => "SBX_E1819",
            ServerError::Timeout { .. } => "SBX_E1809",
            ServerError::BadValue { .. } => "SBX_E1810",
            ServerError::Quota { .. } => "SBX_E1811",
            ServerError::Internal { .. } => "SBX_E1812",
            ServerError::EnvNotSealed => "SBX_E1855",
            ServerError::Listen { .. } => "SBX_E1813",
            ServerError::Tls { .. } => "SBX_E1814",
            ServerError::E2bState { .. } => "SBX_E2513",
            ServerError::NoRoute { .. } => "SBX_E1815",
            ServerError::MethodNotAllowed { .. } => "SBX_E1816",
            ServerError::Paused { .. } => "SBX_E1850",
            ServerError::BackgroundQuota { .. } => "SBX_E1852",
            ServerError::Labels { .. } => "SBX_E1856",
            ServerError::ReservedLabel { .. } => "SBX_E1857",
            ServerError::Webhook { .. } => "SBX_E1853",
            ServerError::Lost { .. } => "SBX_E1851",
            ServerError::NoSession => "SBX_E1840",
            ServerError::Csrf => "SBX_E1841",
            ServerError::Gateway(e) => e.code(),
        }
    }
    fn class(&self) -> sandboxio_core::ErrorClass {
        use sandboxio_core::ErrorClass;
        match self {
            ServerError::Unauthenticated
            | ServerError::BadCredential
            | ServerError::NoSession
            | ServerError::Csrf
            | ServerError::MissingScope { .. }
            | ServerError::TenantWide { .. } => ErrorClass::Denied,
            ServerError::NotFound { .. }
            | ServerError::MalformedJson { .. }
            | ServerError::InvalidBody { .. }
            | ServerError::TooLarge { .. }
            | ServerError::SlowBody { .. }
            | ServerError::BadValue { .. }
            | ServerError::Labels { .. }
            | ServerError::ReservedLabel { .. }
            | ServerError::Quota { .. }
            | ServerError::TenantBusy { .. }
            | ServerError::Paused { .. }
            | ServerError::BackgroundQuota { .. }
            | ServerError::Webhook { .. }
            | ServerError::Lost { .. }
            | ServerError::Listen { .. }
            | ServerError::Tls { .. }
            | ServerError::E2bState { .. }
            | ServerError::NoRoute { .. }
            | ServerError::MethodNotAllowed { .. } => ErrorClass::Usage,
            ServerError::Gateway(e) => e.class(),
            ServerError::Busy { .. }
            | ServerError::UnauthenticatedBusy
            | ServerError::Timeout { .. }
            | ServerError::Internal { .. }
            | ServerError::EnvNotSealed => ErrorClass::Internal,
        }
    }
    fn is_transient(&self) -> bool {
        match self {
            ServerError::Busy { .. }
            | ServerError::UnauthenticatedBusy
            | ServerError::TenantBusy { .. }
            | ServerError::Timeout { .. } => true,
            ServerError::Gateway(e) => e.is_transient(),
            _ => false,
        }
    }
}

impl ServerError {
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Unauthenticated | ServerError::BadCredential | ServerError::NoSession => {
                StatusCode::UNAUTHORIZED
            }
            ServerError::MissingScope { .. }
            | ServerError::TenantWide { .. }
            | ServerError::Csrf => StatusCode::FORBIDDEN,
            ServerError::NotFound { .. } | ServerError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ServerError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ServerError::MalformedJson { .. }
            | ServerError::Labels { .. }
            | ServerError::ReservedLabel { .. } => StatusCode::BAD_REQUEST,
            ServerError::InvalidBody { .. } | ServerError::BadValue { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ServerError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServerError::Busy { .. } | ServerError::UnauthenticatedBusy => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServerError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ServerError::Quota { .. }
            | ServerError::BackgroundQuota { .. }
            | ServerError::TenantBusy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServerError::SlowBody { .. } => StatusCode::REQUEST_TIMEOUT,
            ServerError::Paused { .. } => StatusCode::CONFLICT,
            ServerError::Lost { .. } => StatusCode::GONE,
            ServerError::Gateway(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            ServerError::Gateway(GatewayError::ApprovalNotPending { .. }) => StatusCode::CONFLICT,
            ServerError::Gateway(GatewayError::ApprovalNotFound { .. }) => StatusCode::NOT_FOUND,
            ServerError::Internal { .. }
            | ServerError::EnvNotSealed
            | ServerError::Webhook { .. }
            | ServerError::Listen { .. }
            | ServerError::Tls { .. }
            | ServerError::E2bState { .. }
            | ServerError::Gateway(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ServerError::Unauthenticated | ServerError::BadCredential | ServerError::NoSession => {
                "unauthenticated"
            }
            ServerError::MissingScope { .. }
            | ServerError::TenantWide { .. }
            | ServerError::Csrf => "forbidden",
            ServerError::NotFound { .. } | ServerError::NoRoute { .. } => "not found",
            ServerError::MethodNotAllowed { .. } => "method not allowed",
            ServerError::MalformedJson { .. }
            | ServerError::InvalidBody { .. }
            | ServerError::BadValue { .. }
            | ServerError::Labels { .. }
            | ServerError::ReservedLabel { .. } => "bad request",
            ServerError::TooLarge { .. } => "request too large",
            ServerError::Busy { .. } | ServerError::UnauthenticatedBusy => "server busy",
            ServerError::TenantBusy { .. } => "too many requests",
            ServerError::SlowBody { .. } => "request timeout",
            ServerError::Timeout { .. } => "timed out",
            ServerError::Quota { .. } | ServerError::BackgroundQuota { .. } => "quota reached",
            ServerError::Paused { .. } => "sandbox paused",
            ServerError::Lost { .. } => "sandbox lost",
            ServerError::Gateway(GatewayError::ApprovalNotPending { .. }) => "conflict",
            ServerError::Gateway(GatewayError::ApprovalNotFound { .. }) => "not found",
            _ => "internal error",
        }
    }

    pub fn problem(&self) -> Problem {
        let status = self.status();
        // Gateway internals are logged, not returned: the code says what class it was.
        let detail = match self {
            // An operator action refused: the operator is told why (its record says so too).
            ServerError::Gateway(
                e @ (GatewayError::ApprovalNotPending { .. }
                | GatewayError::ApprovalNotFound { .. }
                | GatewayError::AdminRefused { .. }),
            ) => e.to_string(),
            ServerError::Gateway(e) => {
                tracing::warn!(code = e.code(), "request failed in the gateway: {e}");
                "the gateway could not complete this request; it was not run".to_string()
            }
            ServerError::Internal { action } => {
                tracing::warn!(code = "SBX_E1812", "internal error while {action}");
                self.to_string()
            }
            other => other.to_string(),
        };
        let mut p = Problem::new(status, self.title(), self.code(), detail);
        if self.is_transient() {
            p.retry_after_s = Some(1);
        }
        p
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let unread_body = matches!(
            self,
            ServerError::TooLarge { .. }
                | ServerError::SlowBody { .. }
                | ServerError::UnauthenticatedBusy
        );
        let mut res = self.problem().into_response();
        if unread_body {
            // The rest of the body was not read: this connection cannot carry another request.
            res.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        res
    }
}
