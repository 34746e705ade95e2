//! Reading the answers of the native handlers the E2B API calls (files, contexts): a
//! success is its body; a problem (a denial, an ask, a missing file, a refused scope) is
//! an [`E2bError::Stopped`] carrying it, so the E2B answer says exactly what the native one
//! would have.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use serde_json::Value;

use super::error::E2bError;
use crate::error::ServerError;
use crate::problem::Problem;

/// The most a native answer read here may hold (a download is bounded by the upload limit).
const MAX: usize = 256 << 20;

/// The body of a successful native answer.
pub async fn body(res: Result<Response, ServerError>) -> Result<Bytes, E2bError> {
    let res = res?;
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), MAX)
        .await
        .map_err(|_| ServerError::Internal {
            action: "reading an answer",
        })?;
    if status.is_success() && status != StatusCode::ACCEPTED {
        return Ok(bytes);
    }
    let p: Problem = serde_json::from_slice(&bytes).map_err(|_| ServerError::Internal {
        action: "reading a problem",
    })?;
    Err(E2bError::Stopped(Box::new(p)))
}

/// A successful native answer as it is (its body streamed on, never held here); a problem
/// as [`body`] reads it.
pub async fn success(res: Result<Response, ServerError>) -> Result<Response, E2bError> {
    let res = res?;
    let status = res.status();
    if status.is_success() && status != StatusCode::ACCEPTED {
        return Ok(res);
    }
    body(Ok(res)).await.map(|_| unreachable_success())
}

/// [`body`] answers an error for every status [`success`] hands it.
fn unreachable_success() -> Response {
    StatusCode::INTERNAL_SERVER_ERROR.into_response()
}

/// The JSON of a successful native answer.
pub async fn json(res: Result<Response, ServerError>) -> Result<Value, E2bError> {
    let b = body(res).await?;
    serde_json::from_slice(&b).map_err(|_| {
        E2bError::Server(ServerError::Internal {
            action: "reading an answer",
        })
    })
}
