//! Gateway and store errors.

use sandboxio_core::ErrorCode;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GatewayError {
    #[error("state store error while {action}")]
    Store {
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("state store is busy (another process holds the lock) while {action}")]
    StoreBusy { action: &'static str },
    #[error("cannot open state store `{path}`")]
    StoreOpen {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("state store holds a corrupt value in {table}.{column}: `{value}`")]
    Corrupt {
        table: &'static str,
        column: &'static str,
        value: String,
    },
    #[error("idempotency key `{key}` was used for a different request")]
    IdempotencyConflict { key: String },
    #[error("idempotency key `{key}` is in use by a request that is still running")]
    IdempotencyInProgress { key: String },
    #[error("approval `{id}` not found")]
    ApprovalNotFound { id: String },
    #[error("approval `{id}` is already {state}")]
    ApprovalNotPending { id: String, state: String },
    #[error("cannot create state directory `{path}`")]
    StateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid gateway configuration: {why}")]
    Config { why: String },
    #[error("the operation could not be recorded, so it was not run")]
    Unrecorded,
}

impl ErrorCode for GatewayError {
    fn code(&self) -> &'static str {
        match self {
            GatewayError::Store { .. } => "SBX_E1501",
            GatewayError::StoreBusy { .. } => "SBX_E1502",
            GatewayError::StoreOpen { .. } => "SBX_E1503",
            GatewayError::Corrupt { .. } => "SBX_E1504",
            GatewayError::IdempotencyConflict { .. } => "SBX_E1505",
            GatewayError::IdempotencyInProgress { .. } => "SBX_E1506",
            GatewayError::ApprovalNotFound { .. } => "SBX_E1507",
            GatewayError::ApprovalNotPending { .. } => "SBX_E1508",
            GatewayError::StateDir { .. } => "SBX_E1509",
            GatewayError::Config { .. } => "SBX_E1510",
            GatewayError::Unrecorded => "SBX_E1511",
        }
    }
    fn is_transient(&self) -> bool {
        matches!(
            self,
            GatewayError::StoreBusy { .. } | GatewayError::IdempotencyInProgress { .. }
        )
    }
}

/// Maps a rusqlite error, classing lock contention as transient.
pub(crate) fn db(action: &'static str) -> impl FnOnce(rusqlite::Error) -> GatewayError {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            GatewayError::StoreBusy { action }
        }
        _ => GatewayError::Store { action, source: e },
    }
}
