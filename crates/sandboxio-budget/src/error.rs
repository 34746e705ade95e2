//! The one error type of this crate. Budget and rate-limit denials are values
//! ([`crate::BudgetDenial`], [`crate::RateDecision`]), not errors: an error means the
//! caller or the configuration is wrong, and the gateway turns it into a deny.

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BudgetError {
    #[error("invalid budget configuration `{key}`: {why}")]
    InvalidConfig { key: String, why: String },
    #[error("invalid rate limit `{input}`: {why}")]
    InvalidRateLimit { input: String, why: String },
    #[error("unknown reservation `{id}`")]
    UnknownReservation { id: String },
    #[error("reservation `{id}` already exists")]
    DuplicateReservation { id: String },
    #[error("money arithmetic overflowed")]
    Overflow,
    #[error("invalid amount `{amount}`: {why}")]
    InvalidAmount { amount: String, why: &'static str },
    #[error("budget state is inconsistent: {why}")]
    InconsistentState { why: String },
    #[error("invalid latency targets for `{class}`: {why}")]
    InvalidLatencyTargets { class: String, why: String },
}

impl ErrorCode for BudgetError {
    fn code(&self) -> &'static str {
        match self {
            BudgetError::InvalidConfig { .. } => "SBX_E1301",
            BudgetError::InvalidRateLimit { .. } => "SBX_E1302",
            BudgetError::UnknownReservation { .. } => "SBX_E1303",
            BudgetError::DuplicateReservation { .. } => "SBX_E1304",
            BudgetError::Overflow => "SBX_E1305",
            BudgetError::InvalidAmount { .. } => "SBX_E1306",
            BudgetError::InconsistentState { .. } => "SBX_E1307",
            BudgetError::InvalidLatencyTargets { .. } => "SBX_E1308",
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            BudgetError::InvalidConfig { .. }
            | BudgetError::InvalidRateLimit { .. }
            | BudgetError::InvalidAmount { .. }
            | BudgetError::InvalidLatencyTargets { .. } => ErrorClass::Usage,
            BudgetError::UnknownReservation { .. }
            | BudgetError::DuplicateReservation { .. }
            | BudgetError::Overflow
            | BudgetError::InconsistentState { .. } => ErrorClass::Internal,
        }
    }
}

impl From<sandboxio_core::CoreError> for BudgetError {
    fn from(_: sandboxio_core::CoreError) -> Self {
        BudgetError::Overflow
    }
}
