//! `sandboxio.toml`: raw TOML in, validated typed configuration out.
//!
//! Parsing is one step: serde with `deny_unknown_fields` into types whose fields are
//! already validated newtypes (sizes, durations, tiers), so a loaded `Config` is valid by
//! construction. Errors carry the key and the line. Nothing here touches the filesystem
//! except [`Config::load`] and [`write_default`].

mod e2b;
mod error;
mod mcp;
mod model;
mod server;
mod state_url;

pub use e2b::{E2bSection, E2bTemplate, E2B_BASE_TEMPLATE, E2B_CODE_INTERPRETER_TEMPLATE};
pub use error::ConfigError;
pub use mcp::{
    check_upstream_name, McpSection, UpstreamSection, UpstreamTransport, DEFAULT_MAX_MESSAGE,
    MAX_UPSTREAMS, MAX_UPSTREAM_NAME,
};
pub use model::{
    check_approval_timeout, ApprovalsSection, AuditSection, Config, EgressRuleSection, FsyncPolicy,
    LimitsMaxSection, LimitsSection, NetworkModeName, NetworkSection, OnSinkFailure, PolicySection,
    SandboxSection, SecretSection, StateSection, TelemetrySection, DEFAULT_APPROVAL_TIMEOUT,
    MAX_APPROVAL_TIMEOUT,
};

pub use server::{QuotaSection, ServerSection, WebhookSection};
pub use state_url::{PoolSize, StateUrl, StateUrlError, DEFAULT_POOL_SIZE, MAX_STATE_URL_LEN};

use std::path::Path;

/// The commented default configuration written by `sandboxio init`.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

/// Largest configuration file accepted.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

impl Config {
    /// Parses configuration text. `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                origin: origin.to_string(),
                limit: MAX_CONFIG_BYTES,
            });
        }
        toml::from_str::<Config>(text).map_err(|e| ConfigError::from_toml(origin, text, &e))
    }

    /// Reads and parses a configuration file: a regular file (a FIFO, a device or a
    /// directory is refused without blocking), never read past the size limit.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_bytes(path).map(|(c, _)| c)
    }

    /// [`Config::load`], with the bytes that were parsed (to check them against a digest
    /// without reading the file twice).
    pub fn load_bytes(path: &Path) -> Result<(Config, Vec<u8>), ConfigError> {
        use sandboxio_core::fileread::{read_regular, ReadLimitError};
        let origin = path.display().to_string();
        let bytes = read_regular(path, MAX_CONFIG_BYTES as u64).map_err(|e| match e {
            ReadLimitError::Io(source) => ConfigError::Read {
                path: origin.clone(),
                source,
            },
            ReadLimitError::TooLarge { .. } => ConfigError::TooLarge {
                origin: origin.clone(),
                limit: MAX_CONFIG_BYTES,
            },
        })?;
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
            origin: origin.clone(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        let config = Config::parse(&text, &origin)?;
        Ok((config, text.into_bytes()))
    }
}

/// Writes the commented default file; refuses to overwrite an existing one.
pub fn write_default(path: &Path) -> Result<(), ConfigError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                ConfigError::AlreadyExists {
                    path: path.display().to_string(),
                }
            } else {
                ConfigError::Write {
                    path: path.display().to_string(),
                    source: e,
                }
            }
        })?;
    f.write_all(DEFAULT_TOML.as_bytes())
        .map_err(|e| ConfigError::Write {
            path: path.display().to_string(),
            source: e,
        })
}

#[cfg(test)]
mod tests;
