//! Errors of the binary itself (flags, files it reads, its own output). Codes `SBX_E17xx`.

use std::path::PathBuf;

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CliError {
    #[error("`{flag}` expects K=V, got `{shown}`")]
    EnvNotKeyValue { flag: &'static str, shown: String },
    #[error("invalid environment variable name `{name}` given with `{flag}` (empty, or with `=` or a NUL byte)")]
    EnvName { flag: &'static str, name: String },
    #[error("the value of `{name}` given with `{flag}` contains a NUL byte")]
    EnvValue { flag: &'static str, name: String },
    #[error("cannot read `{path}` (given with `{flag}`)")]
    ReadInput {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` (given with `{flag}`) is larger than the {limit}-byte limit")]
    InputTooLarge {
        flag: &'static str,
        path: PathBuf,
        limit: u64,
    },
    #[error("`{flag}` is zero: a limit must be above zero (leave the flag out for the configured `[limits]` value)")]
    ZeroLimit { flag: &'static str },
    #[error("cannot resolve `{path}` against the working directory")]
    Resolve {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`--label` expects k=v, got `{input}`")]
    Label { input: String },
    #[error("`--op` is not a valid operation: {why}")]
    Operation { why: String },
    #[error("cannot write to standard output")]
    Stdout {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("invalid approval timeout `{input}`: {why}")]
    ApprovalTimeout { input: String, why: String },
    #[error("cannot render the answer as JSON")]
    Json {
        #[source]
        source: serde_json::Error,
    },
    #[error("{message}")]
    CommandLine { message: String },
    /// `audit verify`: the store named for the signed heads is not there.
    #[error("{why}")]
    HeadStore { why: String },
    /// `browse --screenshot FILE`: the file could not be written.
    #[error("cannot write the screenshot to `{path}`")]
    WriteScreenshot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The list of trusted configuration files could not be written.
    #[error("cannot record the trusted configuration in `{path}`")]
    Trust {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `sandboxio.toml` found in the working directory whose content was never trusted.
    #[error(
        "`{path}` is not trusted: a configuration found in the working directory is read only \
         once its content is trusted (a sandbox with a writable mount of this directory could \
         have written it). Review it, then run `sandboxio trust`, or name it with `--config`"
    )]
    UntrustedConfig { path: PathBuf },
    /// A reason an operator must give (`kill --reason`) is empty or only white space.
    #[error("`{flag}` is empty: say why (it is shown to operators and kept in the audit trail)")]
    EmptyReason { flag: &'static str },
    /// No state directory was named and none can be chosen safely.
    #[error("no state directory: {why}; name one with `--state-dir` or SBX_STATE_DIR (a directory whose parents only root and you can change)")]
    NoStateDir { why: String },
    #[error("unexpected error (please report it): {message}")]
    Unexpected { message: String },
}

impl ErrorCode for CliError {
    fn code(&self) -> &'static str {
        match self {
            CliError::EnvNotKeyValue { .. } => "SBX_E1701",
            CliError::EnvName { .. } => "SBX_E1702",
            CliError::EnvValue { .. } => "SBX_E1703",
            CliError::ReadInput { .. } => "SBX_E1704",
            CliError::Resolve { .. } => "SBX_E1705",
            CliError::Label { .. } => "SBX_E1706",
            CliError::Operation { .. } => "SBX_E1707",
            CliError::Stdout { .. } => "SBX_E1708",
            CliError::Runtime { .. } => "SBX_E1709",
            CliError::ApprovalTimeout { .. } => "SBX_E1710",
            CliError::Json { .. } => "SBX_E1711",
            CliError::CommandLine { .. } => "SBX_E1712",
            CliError::HeadStore { .. } => "SBX_E1713",
            CliError::WriteScreenshot { .. } => "SBX_E1714",
            CliError::InputTooLarge { .. } => "SBX_E1715",
            CliError::ZeroLimit { .. } => "SBX_E1716",
            CliError::UntrustedConfig { .. } => "SBX_E1717",
            CliError::Trust { .. } => "SBX_E1718",
            CliError::NoStateDir { .. } => "SBX_E1719",
            CliError::EmptyReason { .. } => "SBX_E1720",
            CliError::Unexpected { .. } => "SBX_E1799",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            CliError::Stdout { .. }
            | CliError::Runtime { .. }
            | CliError::Json { .. }
            | CliError::Unexpected { .. } => ErrorClass::Internal,
            _ => ErrorClass::Usage,
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(source: serde_json::Error) -> Self {
        CliError::Json { source }
    }
}
