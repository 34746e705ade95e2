//! Errors of the core vocabulary, and the trait every crate's error implements.
//!
//! Every error variant across the workspace carries a stable code `SBX_Ennnn`. The full
//! table lives in `docs/ERRORS.md`; a workspace test keeps the table and the code in sync.

use thiserror::Error;

/// What kind of failure an error is; front ends map it to an exit status or an HTTP status
/// (the CLI's table is in the repository README), never the code's digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The request, a flag, a file or the configuration is wrong; fix the input and retry.
    Usage,
    /// A layer of the chain refused the operation (policy, kill switch, rate limit, budget,
    /// approval, idempotency).
    Denied,
    /// A previous attempt was interrupted; the outcome is unknown and it is not run again.
    Interrupted,
    /// Something the command checks is not as it must be (a trail that does not verify).
    Integrity,
    /// The runtime could not do its job (sandbox setup, state store, audit sink); the
    /// operation was denied (fail closed).
    Internal,
}

impl ErrorClass {
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::Usage => "usage",
            ErrorClass::Denied => "denied",
            ErrorClass::Interrupted => "interrupted",
            ErrorClass::Integrity => "integrity",
            ErrorClass::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stable, documented error code such as `SBX_E1001`.
pub trait ErrorCode {
    /// The stable code of this error.
    fn code(&self) -> &'static str;
    /// What kind of failure this is. Errors the runtime cannot attribute to the caller are
    /// internal, which is the default; input errors say so.
    fn class(&self) -> ErrorClass {
        ErrorClass::Internal
    }
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
    #[error("invalid mount `{input}`: {why}")]
    InvalidMount { input: String, why: &'static str },
    #[error("invalid working directory `{input}`: {why}")]
    InvalidWorkdir { input: String, why: &'static str },
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
            CoreError::InvalidMount { .. } => "SBX_E1020",
            CoreError::InvalidWorkdir { .. } => "SBX_E1021",
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            CoreError::MoneyOverflow => ErrorClass::Internal,
            _ => ErrorClass::Usage,
        }
    }
}
