use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

/// Configuration errors. Each names where the problem is.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{origin}:{line}:{column}: syntax error: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}:{line}:{column}: unknown key `{key}`{hint}")]
    UnknownKey {
        origin: String,
        line: usize,
        column: usize,
        key: String,
        hint: String,
    },
    #[error("{origin}:{line}:{column}: invalid value{at}: {message}")]
    InvalidValue {
        origin: String,
        line: usize,
        column: usize,
        at: String,
        message: String,
    },
    #[error("cannot read config `{path}`")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write config `{path}`")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config `{origin}` is larger than {limit} bytes")]
    TooLarge { origin: String, limit: usize },
    #[error("config `{origin}` is not UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { origin: String, offset: usize },
    #[error("config `{path}` already exists; not overwriting it")]
    AlreadyExists { path: String },
}

impl ErrorCode for ConfigError {
    fn code(&self) -> &'static str {
        match self {
            ConfigError::Syntax { .. } => "SBX_E1101",
            ConfigError::UnknownKey { .. } => "SBX_E1102",
            ConfigError::InvalidValue { .. } => "SBX_E1103",
            ConfigError::Read { .. } => "SBX_E1104",
            ConfigError::Write { .. } => "SBX_E1105",
            ConfigError::TooLarge { .. } => "SBX_E1106",
            ConfigError::NotUtf8 { .. } => "SBX_E1107",
            ConfigError::AlreadyExists { .. } => "SBX_E1108",
        }
    }
    /// Every configuration error is about the file the user gave.
    fn class(&self) -> ErrorClass {
        ErrorClass::Usage
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|s| s.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

impl ConfigError {
    pub(crate) fn from_toml(origin: &str, text: &str, e: &toml::de::Error) -> ConfigError {
        let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        let message = e.message().trim().to_string();
        let origin = origin.to_string();
        if let Some(rest) = message.strip_prefix("unknown field `") {
            let key = rest.split('`').next().unwrap_or("").to_string();
            let hint = rest
                .split_once(", expected ")
                .map(|(_, exp)| format!(" (expected {exp})"))
                .unwrap_or_default();
            return ConfigError::UnknownKey {
                origin,
                line,
                column,
                key,
                hint,
            };
        }
        if text.parse::<toml::Table>().is_err() {
            return ConfigError::Syntax {
                origin,
                line,
                column,
                message,
            };
        }
        let at = text_key_at(text, e)
            .map(|k| format!(" for `{k}`"))
            .unwrap_or_default();
        ConfigError::InvalidValue {
            origin,
            line,
            column,
            at,
            message,
        }
    }
}

/// The key on the line where a value error points, if it can be read off the text.
fn text_key_at(text: &str, e: &toml::de::Error) -> Option<String> {
    let span = e.span()?;
    let start = text
        .get(..span.start)?
        .rfind('\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let line = text.get(start..)?.lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty()).then(|| key.to_string())
}
