//! The secret store's errors, codes `SBX_E2420`-`SBX_E2429`. None of them carries a value.

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SecretError {
    #[error("invalid secret name `{name}`: {why}")]
    InvalidName { name: String, why: &'static str },
    #[error("invalid secret value: {why}")]
    InvalidValue { why: &'static str },
    #[error("invalid bound host `{host}` for a secret: {why}")]
    InvalidHost { host: String, why: String },
    #[error("secrets key `{source_name}` is not usable: {why}")]
    KeyUnusable { source_name: String, why: String },
    #[error("secrets key `{source_name}` is missing but the store `{store}` holds sealed secrets: supply the key it was sealed with (a new key would orphan them)")]
    KeyMissing { source_name: String, store: String },
    #[error("secrets key file `{path}` is readable by others (mode {mode:o}); make it 0600")]
    KeyExposed { path: String, mode: u32 },
    #[error("secrets key `{source_name}` does not open the store `{store}`: it is not the key the secrets were sealed with")]
    WrongKey { source_name: String, store: String },
    #[error("secret store `{store}` is damaged ({why}); it is kept as it is: restore it from a backup or remove it yourself")]
    Damaged { store: String, why: String },
    #[error("no secret named `{name}` in the store")]
    Unknown { name: String },
    #[error("secret store i/o on `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl SecretError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SecretError + '_ {
        move |source| SecretError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl ErrorCode for SecretError {
    fn code(&self) -> &'static str {
        match self {
            SecretError::InvalidName { .. } => "SBX_E2420",
            SecretError::InvalidValue { .. } => "SBX_E2421",
            SecretError::InvalidHost { .. } => "SBX_E2422",
            SecretError::KeyUnusable { .. } => "SBX_E2423",
            SecretError::KeyMissing { .. } => "SBX_E2424",
            SecretError::KeyExposed { .. } => "SBX_E2425",
            SecretError::WrongKey { .. } => "SBX_E2426",
            SecretError::Damaged { .. } => "SBX_E2427",
            SecretError::Unknown { .. } => "SBX_E2428",
            SecretError::Io { .. } => "SBX_E2429",
        }
    }
    fn class(&self) -> ErrorClass {
        match self {
            SecretError::InvalidName { .. }
            | SecretError::InvalidValue { .. }
            | SecretError::InvalidHost { .. }
            | SecretError::KeyUnusable { .. }
            | SecretError::KeyMissing { .. }
            | SecretError::KeyExposed { .. }
            | SecretError::Unknown { .. } => ErrorClass::Usage,
            SecretError::WrongKey { .. } | SecretError::Damaged { .. } => ErrorClass::Integrity,
            SecretError::Io { .. } => ErrorClass::Internal,
        }
    }
}
