//! Argument matchers: conditions on a `tool_call`'s JSON arguments.
//!
//! ```toml
//! args = [
//!   { pointer = "/path", glob = "/data/**" },     # a string matching a glob
//!   { pointer = "/mode", equals = "read" },       # equal to a value (any TOML value)
//!   { pointer = "/url", regex = "^https://" },    # a string the regex finds a match in
//!   { pointer = "/count", min = 1, max = 100 },   # a number in an inclusive range
//!   { pointer = "/force", present = false },      # the value is absent (or present)
//! ]
//! ```
//!
//! `pointer` is a JSON pointer (RFC 6901; `""` is the whole arguments object). Every
//! condition of a rule must hold. Each condition names one test (`min` and `max` together
//! are one). An absent value fails every test but `present = false`. A value of the wrong
//! type (a number where a glob expects a string) cannot be judged: like every unknown fact,
//! it counts as a match for `ask` and `deny` rules and not for `allow` rules, so an agent
//! cannot dodge a deny by sending `["/etc/passwd"]` where `"/etc/passwd"` was expected.

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;

/// Longest regex source accepted, and the compiled size limit (a policy is trusted input,
/// but a typo must not cost memory without bound).
const REGEX_MAX_SOURCE: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// One condition as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ArgCondRaw {
    pub pointer: String,
    #[serde(default)]
    pub equals: Option<toml::Value>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub regex: Option<String>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    #[serde(default)]
    pub present: Option<bool>,
}

#[derive(Debug, Clone)]
enum Test {
    Equals(serde_json::Value),
    Glob(GlobMatcher),
    Regex(regex::Regex),
    Range { min: Option<f64>, max: Option<f64> },
    Present(bool),
}

/// One compiled condition.
#[derive(Debug, Clone)]
pub(crate) struct ArgCond {
    pointer: String,
    test: Test,
}

/// What a test says of one value.
enum Judged {
    Yes,
    No,
    /// The value has the wrong type for the test.
    Unknown,
}

impl ArgCond {
    pub fn compile(raw: &ArgCondRaw) -> Result<ArgCond, String> {
        let p = &raw.pointer;
        if !(p.is_empty() || p.starts_with('/')) {
            return Err(format!(
                "pointer `{p}` is not a JSON pointer; write `/name` (or `\"\"` for the whole arguments)"
            ));
        }
        let tests = [
            raw.equals.is_some(),
            raw.glob.is_some(),
            raw.regex.is_some(),
            raw.min.is_some() || raw.max.is_some(),
            raw.present.is_some(),
        ];
        match tests.iter().filter(|t| **t).count() {
            1 => {}
            0 => {
                return Err(format!(
                    "the condition on `{p}` names no test; use one of `equals`, `glob`, `regex`, `min`/`max`, `present`"
                ))
            }
            _ => {
                return Err(format!(
                    "the condition on `{p}` names more than one test; write one condition per test"
                ))
            }
        }
        let test = if let Some(v) = &raw.equals {
            Test::Equals(serde_json::to_value(v).map_err(|e| format!("`equals`: {e}"))?)
        } else if let Some(g) = &raw.glob {
            crate::rule::glob_size(g).map_err(|why| format!("the glob on `{p}`: {why}"))?;
            let glob = GlobBuilder::new(g)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("glob `{g}`: {e}"))?;
            Test::Glob(glob.compile_matcher())
        } else if let Some(r) = &raw.regex {
            if r.len() > REGEX_MAX_SOURCE {
                return Err(format!(
                    "the regex on `{p}` is longer than {REGEX_MAX_SOURCE} bytes"
                ));
            }
            let re = regex::RegexBuilder::new(r)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("regex `{r}`: {e}"))?;
            Test::Regex(re)
        } else if let Some(present) = raw.present {
            Test::Present(present)
        } else {
            let (min, max) = (raw.min, raw.max);
            for v in [min, max].into_iter().flatten() {
                if !v.is_finite() {
                    return Err(format!("the range on `{p}` has a bound that is not finite"));
                }
            }
            if let (Some(a), Some(b)) = (min, max) {
                if a > b {
                    return Err(format!(
                        "the range on `{p}` is empty (`min` {a} > `max` {b})"
                    ));
                }
            }
            Test::Range { min, max }
        };
        Ok(ArgCond {
            pointer: p.clone(),
            test,
        })
    }

    /// Whether the condition holds for `arguments`; `strict` (ask and deny rules) counts a
    /// value of the wrong type as a match.
    pub fn holds(&self, arguments: &serde_json::Value, strict: bool) -> bool {
        let value = arguments.pointer(&self.pointer);
        let judged = match (&self.test, value) {
            (Test::Present(want), v) => {
                if v.is_some() == *want {
                    Judged::Yes
                } else {
                    Judged::No
                }
            }
            (_, None) => Judged::No,
            (Test::Equals(want), Some(v)) => {
                if equal(want, v) {
                    Judged::Yes
                } else {
                    Judged::No
                }
            }
            (Test::Glob(g), Some(v)) => match v.as_str() {
                // A path with `.`, `..` or `//` in it names what its normal form names
                // for a reader that resolves it, and itself for one that does not: a
                // deny or ask rule holds when either form matches, an allow rule only
                // when both do (`/data/./private/x` dodged a deny of `/data/private/**`).
                Some(s) => {
                    let plain = g.is_match(s);
                    let normal = lexical_normal(s).map_or(plain, |n| g.is_match(&n));
                    let hit = if strict {
                        plain || normal
                    } else {
                        plain && normal
                    };
                    if hit {
                        Judged::Yes
                    } else {
                        Judged::No
                    }
                }
                None => Judged::Unknown,
            },
            (Test::Regex(re), Some(v)) => match v.as_str() {
                Some(s) if re.is_match(s) => Judged::Yes,
                Some(_) => Judged::No,
                None => Judged::Unknown,
            },
            (Test::Range { min, max }, Some(v)) => match v.as_f64() {
                Some(n) => {
                    let above = min.is_none_or(|m| n >= m);
                    let below = max.is_none_or(|m| n <= m);
                    if above && below {
                        Judged::Yes
                    } else {
                        Judged::No
                    }
                }
                None => Judged::Unknown,
            },
        };
        match judged {
            Judged::Yes => true,
            Judged::No => false,
            Judged::Unknown => strict,
        }
    }
}

/// `s` with `//` collapsed and `.` and `..` segments resolved (`..` at the root stays at
/// the root, as the filesystem does), when that changes it. In a URI (`file:///data/x`,
/// `https://host/a/../b`) only the path after the authority is resolved.
fn lexical_normal(s: &str) -> Option<String> {
    if let Some(i) = s.find("://") {
        let (head, rest) = s.split_at(i + 3);
        let j = rest.find('/')?;
        let (authority, path) = rest.split_at(j);
        let n = lexical_normal(path)?;
        return Some(format!("{head}{authority}{n}"));
    }
    if !s.contains('/') {
        return None;
    }
    let absolute = s.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in s.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|l| *l != "..") {
                    out.pop();
                } else if !absolute {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    let mut n = out.join("/");
    if absolute {
        n.insert(0, '/');
    }
    if s.ends_with('/') && !n.ends_with('/') {
        n.push('/');
    }
    (n != s).then_some(n)
}

/// JSON equality where numbers compare by value (`1` equals `1.0`).
fn equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn cond(toml_text: &str) -> Result<ArgCond, String> {
        let raw: ArgCondRaw = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        ArgCond::compile(&raw)
    }

    #[test]
    fn glob_matches_strings_and_keeps_star_in_one_component() {
        let c = cond("pointer = \"/path\"\nglob = \"/data/*\"").unwrap();
        assert!(c.holds(&json!({"path": "/data/a"}), false));
        assert!(!c.holds(&json!({"path": "/data/a/b"}), false));
        assert!(!c.holds(&json!({"path": "/etc/passwd"}), true));
        assert!(!c.holds(&json!({}), true), "absent never matches a glob");
    }

    #[test]
    fn a_path_matches_in_both_its_spellings_for_deny_and_in_both_for_allow() {
        let c = cond("pointer = \"/path\"\nglob = \"/data/private/**\"").unwrap();
        for sneaky in [
            "/data/./private/secret.txt",
            "/data/public/../private/secret.txt",
            "/data//private/secret.txt",
            "/../data/private/secret.txt",
        ] {
            assert!(
                c.holds(&json!({ "path": sneaky }), true),
                "{sneaky} dodged a deny"
            );
        }
        let allow = cond("pointer = \"/path\"\nglob = \"/data/public/**\"").unwrap();
        assert!(allow.holds(&json!({"path": "/data/public/a.txt"}), false));
        assert!(!allow.holds(&json!({"path": "/data/public/../private/a.txt"}), false));
        assert!(!allow.holds(&json!({"path": "/data/public/../../etc/passwd"}), false));
        assert_eq!(lexical_normal("a/../../b").as_deref(), Some("../b"));
        assert_eq!(lexical_normal("/a/b/"), None);
        assert_eq!(lexical_normal("plain"), None);
        assert_eq!(lexical_normal("file:///data/x"), None);
        assert_eq!(
            lexical_normal("file:///data/./private/x").as_deref(),
            Some("file:///data/private/x")
        );
        let uri = cond("pointer = \"/uri\"\nglob = \"file:///data/private/**\"").unwrap();
        assert!(uri.holds(&json!({"uri": "file:///data/pub/../private/k"}), true));
    }

    #[test]
    fn a_value_of_the_wrong_type_matches_deny_rules_only() {
        let c = cond("pointer = \"/path\"\nglob = \"/etc/**\"").unwrap();
        let sneaky = json!({"path": ["/etc/passwd"]});
        assert!(c.holds(&sneaky, true));
        assert!(!c.holds(&sneaky, false));
    }

    #[test]
    fn equals_regex_range_and_present() {
        let eq = cond("pointer = \"/mode\"\nequals = \"read\"").unwrap();
        assert!(eq.holds(&json!({"mode": "read"}), false));
        assert!(!eq.holds(&json!({"mode": "write"}), false));
        let n = cond("pointer = \"/n\"\nequals = 1").unwrap();
        assert!(n.holds(&json!({"n": 1.0}), false));
        let re = cond("pointer = \"/url\"\nregex = \"^https://\"").unwrap();
        assert!(re.holds(&json!({"url": "https://x"}), false));
        assert!(!re.holds(&json!({"url": "http://x"}), false));
        let r = cond("pointer = \"/a/0\"\nmin = 1\nmax = 10").unwrap();
        assert!(r.holds(&json!({"a": [10]}), false));
        assert!(!r.holds(&json!({"a": [11]}), false));
        assert!(!r.holds(&json!({"a": [0.5]}), false));
        let absent = cond("pointer = \"/force\"\npresent = false").unwrap();
        assert!(absent.holds(&json!({}), false));
        assert!(!absent.holds(&json!({"force": false}), false));
    }

    #[test]
    fn bad_conditions_are_refused_with_a_reason() {
        for (text, needle) in [
            ("pointer = \"path\"\nglob = \"*\"", "JSON pointer"),
            ("pointer = \"/p\"", "no test"),
            (
                "pointer = \"/p\"\nglob = \"*\"\nequals = 1",
                "more than one",
            ),
            ("pointer = \"/p\"\nregex = \"(\"", "regex"),
            ("pointer = \"/p\"\nmin = 5\nmax = 1", "empty"),
            ("pointer = \"/p\"\nglob = \"a[\"", "glob"),
            ("pointer = \"/p\"\nbogus = 1", "unknown field"),
        ] {
            let e = cond(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
