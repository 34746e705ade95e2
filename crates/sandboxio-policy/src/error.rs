//! The one error type of this crate. Parsing and validation fail with a `PolicyError`;
//! evaluation never does (it turns any problem into a deny).

use sandboxio_core::{ErrorClass, ErrorCode, Verdict};
use thiserror::Error;

/// Where in a policy file something is: file name, 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

impl Location {
    /// The location of byte `offset` in `text` (clamped to the text).
    /// One location only; many of one file: [`LineIndex`].
    pub fn at(file: &str, text: &str, offset: usize) -> Location {
        LineIndex::new(file, text).at(offset)
    }
}

/// The line starts of one file's text: many [`Location`]s of one file without scanning the
/// text from its start for each (a policy load asks for dozens).
pub(crate) struct LineIndex<'a> {
    file: &'a str,
    text: &'a str,
    /// Byte offset of each line's first byte; the first is 0.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> LineIndex<'a> {
        let mut starts = vec![0];
        starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { file, text, starts }
    }

    /// The location of byte `offset` (clamped to the text, and back to a character's
    /// first byte): 1-based line, and column in characters.
    pub(crate) fn at(&self, offset: usize) -> Location {
        let offset = floor_char_boundary(self.text, offset.min(self.text.len()));
        let line = self.starts.partition_point(|s| *s <= offset);
        let line_start = self.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let column = self
            .text
            .get(line_start..offset)
            .map_or(0, |l| l.chars().count())
            + 1;
        Location {
            file: self.file.to_string(),
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

/// At most 200 bytes of a value quoted in a message (a refused glob may be 1 MiB long),
/// with how long it was when cut.
fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return std::borrow::Cow::Borrowed(s);
    }
    let cut = floor_char_boundary(s, MAX);
    std::borrow::Cow::Owned(format!("{}... ({} bytes)", &s[..cut], s.len()))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Errors found while reading, parsing or validating policy files.
#[derive(Debug, Error)]
pub enum PolicyError {
    #[error("{at}: policy syntax error: {message}")]
    Syntax { at: Location, message: String },
    #[error("{at}: unknown key `{key}` in policy file")]
    UnknownKey { at: Location, key: String },
    #[error("{at}: rule `{rule}`: invalid glob `{}`: {why}", clip(pattern))]
    InvalidGlob {
        at: Location,
        rule: String,
        pattern: String,
        why: String,
    },
    #[error("{at}: rule `{rule}`: invalid money amount `{input}`: {why}")]
    InvalidMoney {
        at: Location,
        rule: String,
        input: String,
        why: String,
    },
    #[error("{at}: rule `{rule}`: invalid time window `{input}`: {why}")]
    InvalidTimeWindow {
        at: Location,
        rule: String,
        input: String,
        why: String,
    },
    #[error("{at}: rule `{rule}`: invalid value for `{key}`: {why}")]
    InvalidValue {
        at: Location,
        rule: String,
        key: String,
        why: String,
    },
    #[error("{at}: rule `{rule}`: unknown effect `{effect}` (expected allow, ask or deny)")]
    UnknownEffect {
        at: Location,
        rule: String,
        effect: String,
    },
    #[error("{at}: duplicate rule id `{rule}` (first defined at {first})")]
    DuplicateRuleId {
        at: Location,
        rule: String,
        first: Location,
    },
    #[error("{at}: rule `{rule}` has the same conditions as rule `{other}` ({other_at}) but effect `{effect}` instead of `{other_effect}`; one of them never decides anything")]
    ContradictoryRules {
        at: Location,
        rule: String,
        effect: Verdict,
        other: String,
        other_at: Box<Location>,
        other_effect: Verdict,
    },
    #[error("{at}: rule `{rule}` is suspicious: {why}")]
    Suspicious {
        at: Location,
        rule: String,
        why: String,
    },
    #[error("{at}: rule `{rule}` does not match its example {index}")]
    ExampleNotMatched {
        at: Location,
        rule: String,
        index: usize,
    },
    #[error("{at}: rule `{rule}` matches its counterexample {index}")]
    CounterexampleMatched {
        at: Location,
        rule: String,
        index: usize,
    },
    #[error("{at}: rule `{rule}`: example {index} is not a valid operation: {why}")]
    InvalidExample {
        at: Location,
        rule: String,
        index: usize,
        why: String,
    },
    #[error("{at}: rule `{rule}`: `{key}` cannot match operations of kind `{kind}`")]
    InapplicableMatcher {
        at: Location,
        rule: String,
        key: String,
        kind: String,
    },
    #[error("policy file `{file}` is larger than the {limit}-byte limit")]
    FileTooLarge { file: String, limit: u64 },
    #[error("{at}: policy file is not valid UTF-8")]
    NotUtf8 { at: Location },
    #[error("cannot read policy file `{file}`")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no policy files given")]
    NoFiles,
}

impl ErrorCode for PolicyError {
    fn code(&self) -> &'static str {
        match self {
            PolicyError::Syntax { .. } => "SBX_E1201",
            PolicyError::UnknownKey { .. } => "SBX_E1202",
            PolicyError::InvalidGlob { .. } => "SBX_E1203",
            PolicyError::InvalidMoney { .. } => "SBX_E1204",
            PolicyError::InvalidTimeWindow { .. } => "SBX_E1205",
            PolicyError::InvalidValue { .. } => "SBX_E1206",
            PolicyError::UnknownEffect { .. } => "SBX_E1207",
            PolicyError::DuplicateRuleId { .. } => "SBX_E1208",
            PolicyError::ContradictoryRules { .. } => "SBX_E1209",
            PolicyError::Suspicious { .. } => "SBX_E1210",
            PolicyError::ExampleNotMatched { .. } => "SBX_E1211",
            PolicyError::CounterexampleMatched { .. } => "SBX_E1212",
            PolicyError::InvalidExample { .. } => "SBX_E1213",
            PolicyError::InapplicableMatcher { .. } => "SBX_E1214",
            PolicyError::FileTooLarge { .. } => "SBX_E1215",
            PolicyError::NotUtf8 { .. } => "SBX_E1216",
            PolicyError::Read { .. } => "SBX_E1217",
            PolicyError::NoFiles => "SBX_E1218",
        }
    }
    /// Every policy error is about the policy files the user gave.
    fn class(&self) -> ErrorClass {
        ErrorClass::Usage
    }
}

impl PolicyError {
    /// Where the error is, when it is in a file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            PolicyError::Syntax { at, .. }
            | PolicyError::UnknownKey { at, .. }
            | PolicyError::InvalidGlob { at, .. }
            | PolicyError::InvalidMoney { at, .. }
            | PolicyError::InvalidTimeWindow { at, .. }
            | PolicyError::InvalidValue { at, .. }
            | PolicyError::UnknownEffect { at, .. }
            | PolicyError::DuplicateRuleId { at, .. }
            | PolicyError::ContradictoryRules { at, .. }
            | PolicyError::Suspicious { at, .. }
            | PolicyError::ExampleNotMatched { at, .. }
            | PolicyError::CounterexampleMatched { at, .. }
            | PolicyError::InvalidExample { at, .. }
            | PolicyError::InapplicableMatcher { at, .. }
            | PolicyError::NotUtf8 { at } => Some(at),
            PolicyError::FileTooLarge { .. } | PolicyError::Read { .. } | PolicyError::NoFiles => {
                None
            }
        }
    }
}

/// Something worth a look that does not stop the policy from loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyWarning {
    pub at: Location,
    pub rule: Option<String>,
    pub message: String,
}

impl std::fmt::Display for PolicyWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.rule {
            Some(r) => write!(f, "{}: rule `{}`: {}", self.at, r, self.message),
            None => write!(f, "{}: {}", self.at, self.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_refused_glob_is_quoted_cut_in_its_message() {
        let e = PolicyError::InvalidGlob {
            at: Location::default(),
            rule: "r".into(),
            pattern: "é".repeat(100_000),
            why: "too long".into(),
        };
        let m = e.to_string();
        assert!(m.len() < 400, "{} bytes", m.len());
        assert!(m.contains("... (200000 bytes)"), "{m}");
        let short = PolicyError::InvalidGlob {
            at: Location::default(),
            rule: "r".into(),
            pattern: "/a/[".into(),
            why: "unclosed".into(),
        };
        assert!(short.to_string().contains("invalid glob `/a/[`: unclosed"));
    }

    /// A scan of the text before `offset` (what every location cost before the index).
    fn scanned(text: &str, offset: usize) -> (u32, u32) {
        let offset = floor_char_boundary(text, offset.min(text.len()));
        let before = &text[..offset];
        let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let column = before[line_start..].chars().count() + 1;
        (line as u32, column as u32)
    }

    #[test]
    fn the_line_index_places_every_offset_where_a_scan_from_the_start_does() {
        for text in [
            "",
            "\n",
            "a = 1\n[[rule]]\nid = \"é→x\"\r\n\n  reason = \"ü\"",
            "no newline at all, but ✓ wide chars",
            "\n\n\nthree blank lines first\n",
        ] {
            let lines = LineIndex::new("f.toml", text);
            // Past the end and inside a multi-byte character too.
            for offset in 0..=text.len() + 2 {
                let at = lines.at(offset);
                assert_eq!(
                    (at.line, at.column),
                    scanned(text, offset),
                    "{text:?} at {offset}"
                );
                assert_eq!(at, Location::at("f.toml", text, offset));
            }
        }
    }
}
