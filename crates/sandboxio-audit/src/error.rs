//! The one error type of this crate. Every variant has a stable `SBX_E16xx` code.
//!
//! Messages never contain secret values: sink errors carry the sink's name and a reason
//! rendered from an already-redacted event, paths are trail paths chosen by the operator.

use std::path::PathBuf;

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

/// Everything that can go wrong while redacting, recording or verifying audit data.
#[derive(Debug, Error)]
pub enum AuditError {
    /// A sink failed or timed out and `on_sink_failure` is `Fail`.
    #[error("audit sink `{sink}` failed: {why}")]
    SinkFailed {
        sink: String,
        why: String,
        timed_out: bool,
    },
    #[error("audit i/o error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An existing trail could not be continued (its last records do not chain).
    #[error("audit chain broken in `{path}` at line {line}: {why}")]
    ChainBroken {
        path: PathBuf,
        line: u64,
        why: String,
    },
    #[error("audit checkpoint signature does not verify in `{path}` at line {line}")]
    BadCheckpointSignature { path: PathBuf, line: u64 },
    #[error("bad audit key `{path}`: {why}")]
    BadKey { path: PathBuf, why: String },
    #[error("cannot parse audit trail `{path}` at line {line}: {why}")]
    Parse {
        path: PathBuf,
        line: u64,
        why: String,
    },
    /// Literal secrets shorter than the minimum would redact ordinary text.
    #[error("secret is too short to redact safely (minimum {min} characters)")]
    SecretTooShort { min: usize },
    #[error("invalid audit timeout `{input}`: {why}")]
    InvalidTimeout { input: String, why: String },
    #[error("cannot render audit event: {why}")]
    Render { why: String },
    /// `emit` was called on a sink that was closed.
    #[error("audit sink `{sink}` is closed")]
    SinkClosed { sink: String },
    /// The signing key is gone but the trail it signed is not: a new key is never made
    /// silently, because the trail could then no longer be continued or verified.
    #[error("audit signing key `{key}` is missing but the trail `{trail}` already holds records; run `sandboxio audit rotate-key` to start a new key (the rotation is recorded in the trail and the old public key is kept)")]
    KeyLost { key: PathBuf, trail: PathBuf },
}

impl ErrorCode for AuditError {
    fn code(&self) -> &'static str {
        match self {
            AuditError::SinkFailed { .. } => "SBX_E1601",
            AuditError::Io { .. } => "SBX_E1602",
            AuditError::ChainBroken { .. } => "SBX_E1603",
            AuditError::BadCheckpointSignature { .. } => "SBX_E1604",
            AuditError::BadKey { .. } => "SBX_E1605",
            AuditError::Parse { .. } => "SBX_E1606",
            AuditError::SecretTooShort { .. } => "SBX_E1607",
            AuditError::InvalidTimeout { .. } => "SBX_E1608",
            AuditError::Render { .. } => "SBX_E1609",
            AuditError::SinkClosed { .. } => "SBX_E1610",
            AuditError::KeyLost { .. } => "SBX_E1620",
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            AuditError::ChainBroken { .. }
            | AuditError::BadCheckpointSignature { .. }
            | AuditError::Parse { .. }
            | AuditError::KeyLost { .. } => ErrorClass::Integrity,
            AuditError::BadKey { .. }
            | AuditError::SecretTooShort { .. }
            | AuditError::InvalidTimeout { .. } => ErrorClass::Usage,
            AuditError::SinkFailed { .. }
            | AuditError::Io { .. }
            | AuditError::Render { .. }
            | AuditError::SinkClosed { .. } => ErrorClass::Internal,
        }
    }

    fn is_transient(&self) -> bool {
        matches!(
            self,
            AuditError::SinkFailed {
                timed_out: true,
                ..
            } | AuditError::Io { .. }
        )
    }
}

impl AuditError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AuditError::Io {
            path: path.into(),
            source,
        }
    }
}
