//! Errors of the E2B-compatible API (`SBX_E25xx`) and how every refusal reaches an E2B
//! SDK: the lifecycle REST API answers E2B's `{"code": <status>, "message"}`, envd's Connect
//! services a Connect error (`{"code": "permission_denied", "message"}`; in a stream, the
//! end-of-stream message), envd's HTTP routes and the code interpreter a status with a JSON
//! body. The message always carries the sandboxio code, and for a stopped operation the
//! layer, the reason and, for an ask, the approval id and where to wait for it.

use axum::http::StatusCode;
use sandboxio_core::ErrorCode;
use serde_json::{json, Value};
use thiserror::Error;

use crate::error::ServerError;
use crate::problem::Problem;

#[derive(Debug, Error)]
pub enum E2bError {
    #[error("no valid envd access token for sandbox `{sandbox}`: send the `X-Access-Token` the create answer gave")]
    AccessToken { sandbox: String },
    #[error("template `{name}` not found: configure it as `[e2b.templates.{name}]`")]
    UnknownTemplate { name: String },
    #[error("`{what}` is not supported by sandboxio: {why}")]
    Unsupported { what: String, why: &'static str },
    #[error("`{method}` is not implemented by sandboxio's E2B API")]
    NotImplemented { method: String },
    #[error("path `{path}` is outside `/home/user`, the sandbox's workspace")]
    OutsideHome { path: String },
    #[error("the request does not fit the E2B API: {why}")]
    BadRequest { why: String },
    #[error("no process with {selector} in this sandbox")]
    NoProcess { selector: String },
    #[error("invalid timeout `{secs}` s: must be more than 0 and at most {max} s")]
    BadTimeout { secs: i64, max: u64 },
    #[error("sandbox `{id}` was not found")]
    NoSandbox { id: String },
    #[error("E2B-Sandbox-Port `{port}` is not served (envd is 49983, the code interpreter 49999)")]
    BadPort { port: String },
    #[error("`{path}` exists already")]
    Exists { path: String },
    #[error("the E2B facts of sandbox `{id}` at {} are damaged ({why}); the file was left as it is: restore it from a backup, or remove it to forget the sandbox's E2B facts (the sandbox stays reachable over the native API)", path.display())]
    DamagedFacts {
        id: String,
        path: std::path::PathBuf,
        why: String,
    },
    #[error("{0}")]
    Server(#[from] ServerError),
    /// What the chain (or a native handler) answered: a denial, an ask, a failure.
    #[error("{}", .0.detail)]
    Stopped(Box<Problem>),
}

impl ErrorCode for E2bError {
    fn code(&self) -> &'static str {
        match self {
            E2bError::AccessToken { .. } => "SBX_E2501",
            E2bError::UnknownTemplate { .. } => "SBX_E2502",
            E2bError::Unsupported { .. } => "SBX_E2503",
            E2bError::NotImplemented { .. } => "SBX_E2504",
            E2bError::OutsideHome { .. } => "SBX_E2505",
            E2bError::BadRequest { .. } => "SBX_E2506",
            E2bError::NoProcess { .. } => "SBX_E2507",
            E2bError::BadTimeout { .. } => "SBX_E2508",
            E2bError::NoSandbox { .. } => "SBX_E2509",
            E2bError::BadPort { .. } => "SBX_E2510",
            E2bError::Exists { .. } => "SBX_E2512",
            E2bError::DamagedFacts { .. } => "SBX_E2514",
            E2bError::Server(e) => e.code(),
            // The problem's code is one of the documented ones; this enum cannot name it
            // statically, so the answer carries it (see `message`).
            E2bError::Stopped(_) => "SBX_E2511",
        }
    }
}

impl E2bError {
    /// The HTTP status of the REST and plain answers.
    pub fn status(&self) -> StatusCode {
        match self {
            E2bError::AccessToken { .. } => StatusCode::UNAUTHORIZED,
            E2bError::UnknownTemplate { .. }
            | E2bError::Unsupported { .. }
            | E2bError::OutsideHome { .. }
            | E2bError::BadRequest { .. }
            | E2bError::BadTimeout { .. }
            | E2bError::BadPort { .. } => StatusCode::BAD_REQUEST,
            E2bError::NotImplemented { .. } => StatusCode::NOT_IMPLEMENTED,
            E2bError::NoProcess { .. } => StatusCode::NOT_FOUND,
            // Connect `already_exists`, which `files.make_dir` reads as "was there".
            E2bError::Exists { .. } => StatusCode::CONFLICT,
            // The server's own state is damaged: not the caller's fault, not a lost sandbox.
            E2bError::DamagedFacts { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            // What E2B's proxy answers for a sandbox that is gone.
            E2bError::NoSandbox { .. } => StatusCode::BAD_GATEWAY,
            E2bError::Server(e) => e.status(),
            // An ask is not a success: every E2B client reads a 2xx body as the answer (a
            // file's content, a cell's output). It is refused for now, with the approval id.
            E2bError::Stopped(p) if p.status == 202 => StatusCode::FORBIDDEN,
            E2bError::Stopped(p) => {
                StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    /// The sandboxio code the answer names (a stopped operation's own).
    pub fn sbx_code(&self) -> String {
        match self {
            E2bError::Stopped(p) => p.code.clone(),
            other => other.code().to_string(),
        }
    }

    /// One line an agent can act on: `sandboxio[SBX_Ennnn]: ...`.
    pub fn message(&self) -> String {
        match self {
            E2bError::Stopped(p) => {
                let mut m = match &p.layer {
                    Some(layer) if p.status != 202 => {
                        format!("sandboxio[{}]: denied at {layer}: {}", p.code, p.detail)
                    }
                    _ => format!("sandboxio[{}]: {}", p.code, p.detail),
                };
                if let Some(id) = &p.approval_id {
                    m.push_str(&format!(" (approval_id={id}"));
                    if let Some(w) = &p.wait {
                        m.push_str(&format!("; wait at {w}"));
                    }
                    m.push(')');
                }
                if let Some(op) = &p.operation_id {
                    m.push_str(&format!(" [operation {op}]"));
                }
                m
            }
            E2bError::Server(e) => format!("sandboxio[{}]: {}", e.code(), e.problem().detail),
            other => format!("sandboxio[{}]: {other}", other.code()),
        }
    }

    /// The Connect error code for envd's services.
    pub fn connect_code(&self) -> &'static str {
        match self {
            E2bError::NotImplemented { .. } => "unimplemented",
            E2bError::NoSandbox { .. } => "unavailable",
            E2bError::Stopped(p) if p.status == 202 => "permission_denied",
            _ => connect_code_of(self.status()),
        }
    }

    /// E2B's REST error body.
    pub fn rest_body(&self) -> Value {
        let mut v = json!({
            "code": self.status().as_u16(),
            "message": self.message(),
            "sandboxio_code": self.sbx_code(),
        });
        if let E2bError::Stopped(p) = self {
            if let Some(id) = &p.approval_id {
                v["approval_id"] = json!(id);
            }
        }
        v
    }

    /// A Connect error object (`{"code", "message"}`).
    pub fn connect_body(&self) -> Value {
        json!({"code": self.connect_code(), "message": self.message()})
    }
}

/// The Connect code for an HTTP status (Connect's own table, read backwards).
pub fn connect_code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 | 422 => "invalid_argument",
        401 => "unauthenticated",
        // A budget stop is not a rate limit: the SDK would tell the agent to retry.
        402 => "failed_precondition",
        403 | 202 => "permission_denied",
        404 => "not_found",
        409 => "already_exists",
        429 => "resource_exhausted",
        501 => "unimplemented",
        // The kill switch or a busy server; `unavailable` would send the SDK probing health.
        503 => "aborted",
        504 => "deadline_exceeded",
        _ => "internal",
    }
}

/// The HTTP status Connect answers a unary error with.
pub fn connect_status(code: &str) -> StatusCode {
    match code {
        "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "permission_denied" => StatusCode::FORBIDDEN,
        "not_found" | "unimplemented" => StatusCode::NOT_FOUND,
        "already_exists" | "aborted" => StatusCode::CONFLICT,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_names_its_approval_and_where_to_wait() {
        let mut p = Problem::new(
            StatusCode::ACCEPTED,
            "approval required",
            "SBX_E1821",
            "policy asks",
        );
        p.approval_id = Some("ap_1".into());
        p.wait = Some("/v1/approvals/ap_1/outcome?timeout=60".into());
        p.layer = Some("approval".into());
        let e = E2bError::Stopped(Box::new(p));
        let m = e.message();
        assert!(
            m.contains("SBX_E1821") && m.contains("approval_id=ap_1"),
            "{m}"
        );
        assert!(m.contains("/v1/approvals/ap_1/outcome"), "{m}");
        assert_eq!(e.connect_code(), "permission_denied");
        assert_eq!(e.rest_body()["approval_id"], "ap_1");
    }

    #[test]
    fn a_budget_stop_is_not_reported_as_a_rate_limit() {
        assert_eq!(
            connect_code_of(StatusCode::PAYMENT_REQUIRED),
            "failed_precondition"
        );
        assert_eq!(
            connect_code_of(StatusCode::TOO_MANY_REQUESTS),
            "resource_exhausted"
        );
    }

    #[test]
    fn every_code_maps_back_to_a_status() {
        for s in [400u16, 401, 402, 403, 404, 409, 429, 500, 501, 503, 504] {
            let st = StatusCode::from_u16(s).unwrap_or(StatusCode::OK);
            let code = connect_code_of(st);
            assert_ne!(connect_status(code), StatusCode::OK, "{s} -> {code}");
        }
    }
}
