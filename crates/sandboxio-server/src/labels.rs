//! A sandbox's labels (native `labels`, E2B `metadata`): copied into every record, ledger
//! row and listing of the sandbox, so they are bounded, and the names the system sets
//! itself (which the cost report and records are read by) are not a client's to set.
//! Checked before anything is created.

use std::collections::BTreeMap;

use crate::error::ServerError;

/// The most labels a sandbox may have.
pub const MAX_COUNT: usize = 64;
/// The longest label name, in bytes.
pub const MAX_KEY: usize = 128;
/// The longest label value, in bytes.
pub const MAX_VALUE: usize = 1024;
/// The most bytes of all names and values together.
pub const MAX_TOTAL: usize = 16 << 10;

/// Label names the system sets: the cost report's columns (`tenant_id`, `category`), the
/// server's own (`sandbox_session`, `e2b_template`, `e2b_pid`, `code_context`, `refusals`).
pub const RESERVED: &[&str] = &[
    "tenant_id",
    "category",
    "sandbox_session",
    "e2b_template",
    "e2b_pid",
    "code_context",
    "refusals",
];

/// Prefixes of label names the system sets (the egress proxy's `egress.*`, and any
/// `sandboxio*` name kept for later use).
pub const RESERVED_PREFIXES: &[&str] = &["egress.", "sandboxio"];

/// Whether `name` is one the system sets.
pub fn reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED.contains(&lower.as_str()) || RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p))
}

fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

/// Refuses labels over the bounds (`SBX_E1856`) or with a reserved name (`SBX_E1857`).
pub fn check(labels: &BTreeMap<String, String>) -> Result<(), ServerError> {
    let over = |why: String| Err(ServerError::Labels { why });
    if labels.len() > MAX_COUNT {
        return over(format!(
            "{} labels; at most {MAX_COUNT} are allowed",
            labels.len()
        ));
    }
    let mut total = 0usize;
    for (k, v) in labels {
        if k.is_empty() {
            return over("a label name is empty".into());
        }
        if k.len() > MAX_KEY {
            return over(format!(
                "label name {:?} is {} bytes; at most {MAX_KEY}",
                shown(k),
                k.len()
            ));
        }
        if k.chars().any(char::is_control) {
            return over(format!(
                "label name {:?} holds a control character",
                shown(k)
            ));
        }
        if v.len() > MAX_VALUE {
            return over(format!(
                "the value of label {:?} is {} bytes; at most {MAX_VALUE}",
                shown(k),
                v.len()
            ));
        }
        total += k.len() + v.len();
    }
    if total > MAX_TOTAL {
        return over(format!(
            "the labels hold {total} bytes; at most {MAX_TOTAL} together"
        ));
    }
    if let Some(k) = labels.keys().find(|k| reserved(k)) {
        return Err(ServerError::ReservedLabel { name: shown(k) });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sandboxio_core::ErrorCode;

    fn of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn bounds_and_reserved_names_have_their_codes() {
        assert!(check(&of(&[("team", "data"), ("env", "prod")])).is_ok());
        let code = |l: &BTreeMap<String, String>| check(l).unwrap_err().code();
        assert_eq!(code(&of(&[("", "x")])), "SBX_E1856");
        assert_eq!(code(&of(&[(&"k".repeat(MAX_KEY + 1), "x")])), "SBX_E1856");
        assert_eq!(code(&of(&[("k", &"v".repeat(MAX_VALUE + 1))])), "SBX_E1856");
        assert_eq!(code(&of(&[("a\nb", "x")])), "SBX_E1856");
        let many: BTreeMap<String, String> = (0..=MAX_COUNT)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert_eq!(code(&many), "SBX_E1856");
        let big: BTreeMap<String, String> = (0..20)
            .map(|i| (format!("k{i}"), "v".repeat(MAX_VALUE)))
            .collect();
        assert_eq!(code(&big), "SBX_E1856");
        for name in [
            "tenant_id",
            "Category",
            "e2b_pid",
            "egress.path",
            "sandboxio.x",
        ] {
            assert_eq!(code(&of(&[(name, "x")])), "SBX_E1857", "{name}");
        }
    }
}
