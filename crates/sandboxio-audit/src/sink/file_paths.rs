//! Names of rotated trail files: `<base>.000001`, `<base>.000002`, …

use std::path::{Path, PathBuf};

pub(crate) fn rotated_name(base: &Path, n: u64) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(format!(".{n:06}"));
    PathBuf::from(s)
}

pub(crate) fn rotation_index_of(base: &Path, p: &Path) -> Option<u64> {
    let b = base.file_name()?.to_str()?;
    let n = p.file_name()?.to_str()?;
    let rest = n.strip_prefix(b)?.strip_prefix('.')?;
    if rest.len() >= 6 && rest.bytes().all(|c| c.is_ascii_digit()) {
        rest.parse().ok()
    } else {
        None
    }
}
