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

/// An exclusive lock on `<path>.lock` (a 0600 file beside `path`), held until it drops:
/// taken around a read, change and replace of `path`, so that two processes changing it at
/// once both keep their change (without it, the second replace loses the first's).
pub struct Locked(std::fs::File);

/// Takes the lock for changing `path` (waits while another process holds it).
pub fn lock_beside(path: &Path) -> Result<Locked, (PathBuf, std::io::Error)> {
    let mut name = path.as_os_str().to_os_string();
    name.push(".lock");
    let lock = PathBuf::from(name);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(|e| (lock.clone(), e))?;
    f.lock().map_err(|e| (lock, e))?;
    Ok(Locked(f))
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
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
    fn changes_made_under_the_lock_at_once_are_all_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("list");
        std::fs::write(&p, b"").unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let _l = lock_beside(&p).unwrap();
                    let mut text = std::fs::read_to_string(&p).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    text.push_str(&format!("{i}\n"));
                    write_private_atomic(&p, text.as_bytes()).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 8);
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
