//! Gateway and store errors.

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GatewayError {
    #[error("state store error while {action}")]
    Store {
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the state store call was lost while {action}: {why}")]
    StoreTask { action: &'static str, why: String },
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
    #[error("API key `{id}` not found")]
    KeyNotFound { id: String },
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
    /// An operator action was refused (an unknown or already decided approval, a store
    /// error); its record in the trail says why.
    #[error("operator action `{action}` was refused: {reason}")]
    AdminRefused {
        action: &'static str,
        reason: String,
    },
    #[error("state directory `{path}` is not private: {why}")]
    StateDirInsecure { path: String, why: String },
    #[error("cannot secure state file `{path}`")]
    StateFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The database is gone while the trail shows there was state: never a fresh start.
    #[error("state database `{db}` is {why} but the audit trail `{trail}` holds records: the kill switch, spend, approvals and idempotency keys it held are not known, so nothing runs; an operator recovers with `sandboxio state recover --from-trail` (the kill switch stays engaged until `sandboxio resume`)")]
    StateLost {
        db: String,
        trail: String,
        why: String,
    },
    /// The database and the trail's records are both gone, but the audit key (written after
    /// the database) shows there was state: never a fresh start, and nothing to recover from.
    #[error("state database `{db}` is {why} and the audit trail `{trail}` holds no records, but `{evidence}` shows that this directory held a state: the kill switch, spend, approvals and idempotency keys it held are not known, so nothing runs; restore the database and the trail from a backup, or start afresh on purpose by removing the whole state directory")]
    StateGone {
        db: String,
        trail: String,
        why: String,
        evidence: String,
    },
    #[error("state database `{db}` is damaged ({why}): nothing runs until an operator recovers with `sandboxio state recover --from-trail` (the damaged file is kept; the kill switch stays engaged until `sandboxio resume`)")]
    StateCorrupt { db: String, why: String },
    #[error("state recovery refused: {why}")]
    RecoverRefused { why: String },
    /// A trail that no longer holds the signed head kept for it (reported, never returned
    /// as an error by the chain: the code marks the record and the log line).
    #[error("audit trail `{trail}` does not hold its signed head: {why}")]
    AnchorBroken { trail: String, why: String },
    #[error("shared state store (PostgreSQL) error while {action}")]
    Postgres {
        action: &'static str,
        #[source]
        source: postgres::Error,
    },
    #[error("shared state store `{url}` is unavailable: {why}")]
    PostgresUnavailable { url: String, why: String },
    /// Another replica found this one's lease expired and took over its work.
    #[error("replica `{replica}` lost its lease on the shared state store (its running work was handed to other replicas), so it admits nothing more; restart it")]
    LeaseLost { replica: String },
    #[error("state url `{url}` is not usable: {why}")]
    StateUrl { url: String, why: String },
    #[error(transparent)]
    Secret(#[from] sandboxio_egress::secrets::SecretError),
}

impl ErrorCode for GatewayError {
    fn code(&self) -> &'static str {
        match self {
            GatewayError::Store { .. } => "SBX_E1501",
            GatewayError::StoreBusy { .. } => "SBX_E1502",
            GatewayError::StoreTask { .. } => "SBX_E1519",
            GatewayError::StoreOpen { .. } => "SBX_E1503",
            GatewayError::Corrupt { .. } => "SBX_E1504",
            GatewayError::IdempotencyConflict { .. } => "SBX_E1505",
            GatewayError::IdempotencyInProgress { .. } => "SBX_E1506",
            GatewayError::ApprovalNotFound { .. } => "SBX_E1507",
            GatewayError::ApprovalNotPending { .. } => "SBX_E1508",
            GatewayError::StateDir { .. } => "SBX_E1509",
            GatewayError::Config { .. } => "SBX_E1510",
            GatewayError::Unrecorded => "SBX_E1511",
            GatewayError::AdminRefused { .. } => "SBX_E1521",
            GatewayError::KeyNotFound { .. } => "SBX_E1522",
            GatewayError::StateDirInsecure { .. } => "SBX_E1530",
            GatewayError::StateFile { .. } => "SBX_E1531",
            GatewayError::StateLost { .. } | GatewayError::StateGone { .. } => "SBX_E1532",
            GatewayError::StateCorrupt { .. } => "SBX_E1533",
            GatewayError::RecoverRefused { .. } => "SBX_E1534",
            GatewayError::AnchorBroken { .. } => "SBX_E1535",
            GatewayError::Postgres { .. } => "SBX_E1540",
            GatewayError::PostgresUnavailable { .. } => "SBX_E1541",
            GatewayError::LeaseLost { .. } => "SBX_E1542",
            GatewayError::StateUrl { .. } => "SBX_E1543",
            GatewayError::Secret(e) => e.code(),
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            GatewayError::Secret(e) => e.class(),
            GatewayError::IdempotencyConflict { .. }
            | GatewayError::IdempotencyInProgress { .. } => ErrorClass::Denied,
            GatewayError::ApprovalNotFound { .. }
            | GatewayError::ApprovalNotPending { .. }
            | GatewayError::Config { .. }
            | GatewayError::StateDir { .. }
            | GatewayError::StateDirInsecure { .. }
            | GatewayError::RecoverRefused { .. }
            | GatewayError::AdminRefused { .. }
            | GatewayError::KeyNotFound { .. }
            | GatewayError::StateUrl { .. } => ErrorClass::Usage,
            // State that does not add up: refused until an operator recovers it.
            GatewayError::StateLost { .. }
            | GatewayError::StateGone { .. }
            | GatewayError::StateCorrupt { .. }
            | GatewayError::AnchorBroken { .. } => ErrorClass::Integrity,
            _ => ErrorClass::Internal,
        }
    }
    fn is_transient(&self) -> bool {
        matches!(
            self,
            GatewayError::StoreBusy { .. }
                | GatewayError::IdempotencyInProgress { .. }
                | GatewayError::PostgresUnavailable { .. }
        ) || crate::store::pg_transient(self)
    }
}

/// Maps a rusqlite error, classing lock contention as transient.
pub(crate) fn db(action: &'static str) -> impl FnOnce(rusqlite::Error) -> GatewayError {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            GatewayError::StoreBusy { action }
        }
        _ if crate::store::guard::is_damage(&e) => GatewayError::StateCorrupt {
            db: "state.db".into(),
            why: format!("{e} while {action}"),
        },
        _ => GatewayError::Store { action, source: e },
    }
}
