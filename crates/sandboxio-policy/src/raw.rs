//! The file format as written: serde structs that deny unknown keys. Values stay as text
//! (with their spans) until `compile` validates them, so every error can point at its line.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRaw {
    #[serde(default)]
    #[allow(dead_code)]
    pub settings: Option<SettingsRaw>,
    #[serde(default)]
    pub rule: Vec<Spanned<RuleRaw>>,
}

/// Per-file settings. Purely descriptive for now.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct SettingsRaw {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleRaw {
    pub id: Spanned<String>,
    pub effect: Spanned<String>,
    pub reason: Spanned<String>,
    #[serde(default)]
    pub kind: Option<Spanned<StrList>>,
    #[serde(default)]
    pub tool: Option<Spanned<StrList>>,
    #[serde(default)]
    pub tenant: Option<Spanned<StrList>>,
    #[serde(default)]
    pub agent: Option<Spanned<StrList>>,
    #[serde(default)]
    pub argv_exact: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub argv_prefix: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub argv_glob: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub language: Option<Spanned<StrList>>,
    #[serde(default)]
    pub path: Option<Spanned<StrList>>,
    #[serde(default)]
    pub path_not: Option<Spanned<StrList>>,
    #[serde(default)]
    pub in_workspace: Option<Spanned<bool>>,
    #[serde(default)]
    pub host: Option<Spanned<StrList>>,
    #[serde(default)]
    pub port: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub tier: Option<Spanned<StrList>>,
    #[serde(default)]
    pub network: Option<Spanned<StrList>>,
    /// Resource matchers: the request's resolved limits and environment.
    #[serde(default)]
    pub memory_above: Option<Spanned<String>>,
    #[serde(default)]
    pub timeout_above: Option<Spanned<String>>,
    #[serde(default)]
    pub pids_above: Option<Spanned<u32>>,
    #[serde(default)]
    pub cpu_millis_above: Option<Spanned<u32>>,
    /// Environment variable names (globs) the request sets; matches when any does.
    #[serde(default)]
    pub env: Option<Spanned<StrList>>,
    /// Host paths (globs) the request mounts into the sandbox; matches when any mount's
    /// host path does (`mount_rw`: any read-write mount's).
    #[serde(default)]
    pub mount: Option<Spanned<StrList>>,
    #[serde(default)]
    pub mount_rw: Option<Spanned<StrList>>,
    /// Conditions on a `tool_call`'s JSON arguments (`args.rs`).
    #[serde(default)]
    pub args: Option<Spanned<Vec<crate::args::ArgCondRaw>>>,
    #[serde(default)]
    pub cost_above: Option<Spanned<String>>,
    #[serde(default)]
    pub cost_at_most: Option<Spanned<String>>,
    #[serde(default)]
    pub time: Option<Spanned<String>>,
    #[serde(default)]
    pub weekdays: Option<Spanned<StrList>>,
    #[serde(default)]
    pub examples: Vec<Spanned<toml::Value>>,
    #[serde(default)]
    pub counterexamples: Vec<Spanned<toml::Value>>,
}

/// A string or a list of strings (`kind = "exec"` or `kind = ["exec", "run_code"]`).
#[derive(Debug, Clone)]
pub(crate) struct StrList(pub Vec<String>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrList;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrList, E> {
                Ok(StrList(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrList, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(StrList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// An example or counterexample: an operation table, or `{ op = {...}, at = "...", ... }`
/// when the example needs a time, a resolved path or a network mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExampleWrapper {
    pub op: toml::Value,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub resolved_path: Option<String>,
    #[serde(default)]
    pub workspace_root: Option<String>,
    #[serde(default)]
    pub network: Option<String>,
    #[serde(default)]
    pub tier_default: Option<String>,
}
