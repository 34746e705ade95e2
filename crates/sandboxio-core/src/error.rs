//! Errors of the core vocabulary, and the trait every crate's error implements.
//!
//! Every error variant across the workspace carries a stable code `SBX_Ennnn`. The full
//! table lives in `docs/ERRORS.md`; a workspace test keeps the table and the code in sync.

use thiserror::Error;

/// A stable, documented error code such as `SBX_E1001`.
pub trait ErrorCode {
    /// The stable code of this error.
    fn code(&self) -> &'static str;
    /// Whether retrying the same request later may succeed (timeouts, busy stores).
    /// Defaults to false: only errors that say so are retried.
    fn is_transient(&self) -> bool {
        false
    }
}

/// Errors produced while parsing or validating core values.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreError {
    #[error("invalid size `{input}`: {why}")]
    InvalidSize { input: String, why: &'static str },
    #[error("invalid duration `{input}`: {why}")]
    InvalidDuration { input: String, why: &'static str },
    #[error("invalid money amount `{input}`: {why}")]
    InvalidMoney { input: String, why: &'static str },
    #[error("money arithmetic overflowed")]
    MoneyOverflow,
    #[error("invalid operation: {why}")]
    InvalidOperation { why: String },
    #[error("invalid identifier `{input}`: {why}")]
    InvalidIdentifier { input: String, why: &'static str },
    #[error("unknown isolation tier `{input}` (expected process, namespace, landlock, microvm or remote)")]
    UnknownTier { input: String },
    #[error("unknown language `{input}` (expected python, node or bash)")]
    UnknownLanguage { input: String },
}

impl ErrorCode for CoreError {
    fn code(&self) -> &'static str {
        match self {
            CoreError::InvalidSize { .. } => "SBX_E1001",
            CoreError::InvalidDuration { .. } => "SBX_E1002",
            CoreError::InvalidMoney { .. } => "SBX_E1003",
            CoreError::MoneyOverflow => "SBX_E1004",
            CoreError::InvalidOperation { .. } => "SBX_E1005",
            CoreError::InvalidIdentifier { .. } => "SBX_E1006",
            CoreError::UnknownTier { .. } => "SBX_E1007",
            CoreError::UnknownLanguage { .. } => "SBX_E1008",
        }
    }
}
