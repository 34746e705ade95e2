//! Replacing a small private file whole: the new bytes go to a 0600 file beside it, synced,
//! then renamed over it (and the directory synced), so a reader sees the old file or the
//! new one, never a part; a failed write leaves no temporary file behind. The temporary
//! file is created new (never through a symlink or into a file someone left there), and
//! one left by a writer that was killed is removed by the next write.

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
    let prefix = format!(
        ".{}.",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let tmp = dir.join(format!("{prefix}{}.tmp", std::process::id()));
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
    };
    let result = (|| {
        let mut f = match create() {
            // Left by an earlier writer with this process id (killed, its id reused), or
            // planted: removed (a symlink itself, never what it names), then made anew.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&tmp).map_err(|e| (tmp.clone(), e))?;
                create()
            }
            other => other,
        }
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
    } else {
        remove_dead_writers_files(dir, &prefix);
    }
    result
}

/// Removes `<prefix><pid>.tmp` files in `dir` whose process is gone: what a writer killed
/// between creating its temporary file and renaming it left behind.
fn remove_dead_writers_files(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|n| n.strip_suffix(".tmp"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
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

    #[test]
    fn a_planted_temporary_name_is_not_followed_and_a_dead_writers_file_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        // The name this process would use, made a symlink to another file.
        let mine = d.path().join(format!(".f.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &mine).unwrap();
        // A file left by a writer that no longer runs (no process has this id), and one
        // whose process is alive (this one's parent stands in for another writer).
        let dead = d.path().join(".f.4194305.tmp");
        std::fs::write(&dead, b"stale").unwrap();
        let live = d
            .path()
            .join(format!(".f.{}.tmp", std::os::unix::process::parent_id()));
        std::fs::write(&live, b"busy").unwrap();
        write_private_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"keep",
            "the symlink was followed"
        );
        assert!(!p.is_symlink());
        assert!(!mine.exists() && !mine.is_symlink());
        assert!(!dead.exists(), "a dead writer's file is left");
        assert_eq!(std::fs::read(&live).unwrap(), b"busy");
    }
}
