//! The host environment as text. Variables whose name or value is not UTF-8 are skipped
//! and counted, never a panic (`std::env::vars` panics on them).

use std::ffi::OsString;

/// The UTF-8 variables of the environment, and how many were skipped.
pub fn utf8_vars() -> (Vec<(String, String)>, usize) {
    split(std::env::vars_os())
}

fn split(vars: impl Iterator<Item = (OsString, OsString)>) -> (Vec<(String, String)>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0;
    for (k, v) in vars {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => out.push((k, v)),
            _ => skipped += 1,
        }
    }
    (out, skipped)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::os::unix::ffi::OsStringExt as _;

    use super::*;

    #[test]
    fn non_utf8_names_and_values_are_skipped_and_counted() {
        let bad = || OsString::from_vec(vec![b'x', 0xff]);
        let vars = vec![
            (OsString::from("A"), OsString::from("1")),
            (bad(), OsString::from("2")),
            (OsString::from("B"), bad()),
        ];
        let (ok, skipped) = split(vars.into_iter());
        assert_eq!(ok, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(skipped, 2);
    }
}
