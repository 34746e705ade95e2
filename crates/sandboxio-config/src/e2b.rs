//! `[e2b]`: the E2B-compatible API of `sandboxio serve` (off by default) and its templates,
//! each a sandboxio profile (tier and limits) that an E2B `template` name selects.

use std::collections::BTreeMap;

use sandboxio_core::{ByteSize, HumanDuration, IsolationTier};
use serde::{Deserialize, Serialize};

/// The template E2B's `Sandbox.create()` asks for when it names none.
pub const E2B_BASE_TEMPLATE: &str = "base";
/// The template of the code interpreter SDK.
pub const E2B_CODE_INTERPRETER_TEMPLATE: &str = "code-interpreter-v1";

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2bSection {
    /// Serve the E2B API (lifecycle REST, envd, code interpreter) on the same listener.
    #[serde(default)]
    pub enabled: bool,
    /// Templates by name; `base` and `code-interpreter-v1` exist even when not listed
    /// (with the server's defaults), and a listed one replaces the built-in one.
    #[serde(default)]
    pub templates: BTreeMap<String, E2bTemplate>,
}

/// A template: what a sandbox created from it runs under. Unset values take the server's
/// defaults (`[sandbox] tier`, `[limits]`); `[limits.max]` still caps every request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2bTemplate {
    #[serde(default)]
    pub tier: Option<IsolationTier>,
    /// Each command's time limit.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    #[serde(default)]
    pub memory: Option<ByteSize>,
    /// CPU quota in thousandths of a core.
    #[serde(default)]
    pub cpu_millis: Option<u32>,
    #[serde(default)]
    pub pids: Option<u32>,
}

impl E2bSection {
    /// The template named `name`: a configured one, else a built-in one, else `None`.
    pub fn template(&self, name: &str) -> Option<E2bTemplate> {
        if let Some(t) = self.templates.get(name) {
            return Some(t.clone());
        }
        [E2B_BASE_TEMPLATE, E2B_CODE_INTERPRETER_TEMPLATE]
            .contains(&name)
            .then(E2bTemplate::default)
    }
}
