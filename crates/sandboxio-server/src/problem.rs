//! `application/problem+json` (RFC 9457) with the sandboxio code and, for a denial, what an
//! agent needs to act: the layer, the rules, the reason, the approval to wait for.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error or a denial. `code` is stable (see docs/ERRORS.md); `layer`, `rules`, `reason`
/// and `approval_id` are set when the gateway's chain stopped the operation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `urn:sandboxio:error:<code>`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The layer of the chain that stopped the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// The policy rules that decided, as `file:rule`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Where to wait for the approval or the operation's outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// The operation record (redacted), when one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub record: Option<serde_json::Value>,
}

impl Problem {
    pub fn new(status: StatusCode, title: &str, code: &str, detail: impl Into<String>) -> Problem {
        Problem {
            type_: format!("urn:sandboxio:error:{code}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            code: code.to_string(),
            operation_id: None,
            trace_id: None,
            layer: None,
            rules: Vec::new(),
            approval_id: None,
            wait: None,
            retry_after_s: None,
            record: None,
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.retry_after_s;
        let op = self.operation_id.clone();
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut res = (status, body).into_response();
        let h = res.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(s) = retry.and_then(|s| HeaderValue::from_str(&s.to_string()).ok()) {
            h.insert(header::RETRY_AFTER, s);
        }
        if let Some(op) = op {
            res.extensions_mut().insert(crate::context::OperationId(op));
        }
        res
    }
}
