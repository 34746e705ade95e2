//! Replacing a small private file whole: the new bytes go to a 0600 file beside it, synced,
//! then renamed over it (and the directory synced), so a reader sees the old file or the
//! new one, never a part; a failed write leaves no temporary file behind.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Writes `bytes` as the new content of `path` (mode 0600). On error, returns the path the
/// failing step worked on with the error.
pub fn write_private_atomic(path: &Path, bytes: &[u8]) -> Result<(), (PathBuf, std::io::Error)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| (tmp.clone(), e))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| (tmp.clone(), e))?;
        std::fs::rename(&tmp, path).map_err(|e| (path.to_path_buf(), e))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn replaces_the_file_whole_and_private_and_leaves_nothing_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"old").unwrap();
        write_private_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        // Into a missing directory: an error, nothing left.
        let e = write_private_atomic(&d.path().join("no/f"), b"x").unwrap_err();
        assert_eq!(e.1.kind(), std::io::ErrorKind::NotFound);
    }
}
