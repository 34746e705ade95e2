//! File operations confined to a directory: every path is resolved by the kernel with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so `..`, absolute paths and symlinks
//! (including ones swapped in after a check) cannot reach outside the root.
//!
//! Used by the gateway for `file_read`, `file_write`, `file_delete` and listing, on a
//! session's workspace. Pure path checks come first and give clear errors; the kernel's
//! resolution is what enforces.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use sandboxio_core::{ErrorClass, ErrorCode};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::sys;

#[derive(Debug, Error)]
pub enum FileError {
    #[error("path `{path}` is not a relative path inside the workspace ({why})")]
    BadPath { path: String, why: &'static str },
    #[error("path `{path}` resolves outside the workspace")]
    Escapes { path: String },
    #[error("`{path}` does not exist")]
    NotFound { path: String },
    #[error("`{path}` is larger than the {limit}-byte read cap")]
    TooLarge { path: String, limit: u64 },
    #[error("`{path}`: {what} failed")]
    Io {
        path: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is a directory")]
    IsDirectory { path: String },
}

impl ErrorCode for FileError {
    fn code(&self) -> &'static str {
        match self {
            FileError::BadPath { .. } => "SBX_E1480",
            FileError::Escapes { .. } => "SBX_E1481",
            FileError::NotFound { .. } => "SBX_E1482",
            FileError::TooLarge { .. } => "SBX_E1483",
            FileError::Io { .. } => "SBX_E1484",
            FileError::IsDirectory { .. } => "SBX_E1485",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            FileError::Io { .. } => ErrorClass::Internal,
            _ => ErrorClass::Usage,
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub is_dir: bool,
    pub size: u64,
}

/// Lexical checks: relative, no NUL, no `..`, at most 4096 bytes. Returns the cleaned path.
pub fn check_relative(path: &str) -> Result<PathBuf, FileError> {
    let bad = |why| FileError::BadPath {
        path: path.to_string(),
        why,
    };
    if path.is_empty() || path.len() > 4096 {
        return Err(bad("empty or longer than 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err(bad("`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad("absolute paths are not allowed"))
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(bad("names no file"));
    }
    Ok(out)
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.display().to_string();
    move |source| match source.raw_os_error() {
        Some(libc::EXDEV) | Some(libc::ELOOP) => FileError::Escapes { path },
        Some(libc::ENOENT) => FileError::NotFound { path },
        Some(libc::EISDIR) => FileError::IsDirectory { path },
        _ => FileError::Io { path, what, source },
    }
}

/// `openat2(dirfd, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
fn open_beneath(
    dir: &File,
    rel: &Path,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<OwnedFd> {
    let c = CString::new(rel.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    sys::fs::openat2(
        dir.as_fd(),
        &c,
        u64::try_from(flags | libc::O_CLOEXEC).unwrap_or(0),
        u64::from(mode),
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    )
    .map_err(std::io::Error::from_raw_os_error)
}

/// The directory file operations are confined to, opened once: every path is resolved
/// beneath it by the kernel.
#[derive(Debug)]
pub struct Root {
    dir: File,
}

impl Root {
    /// The directory `root` (a session's workspace).
    pub fn open(root: &Path) -> Result<Root, FileError> {
        let dir = File::open(root).map_err(io(root, "opening the workspace"))?;
        Ok(Root { dir })
    }

    /// The directory `within` beneath `root` (a caller confined to one directory of a
    /// workspace): resolved beneath `root` with no symlink on the way
    /// (`RESOLVE_NO_SYMLINKS`), so neither a link inside it nor one standing in for it
    /// reaches elsewhere in the workspace. With `create`, a missing `within` is made first
    /// (`mkdir -p`, beneath `root`).
    pub fn within(root: &Path, within: &str, create: bool) -> Result<Root, FileError> {
        let base = Root::open(root)?;
        let rel = check_relative(within)?;
        let open = || {
            let c = CString::new(rel.as_os_str().as_encoded_bytes())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
            sys::fs::openat2(
                base.dir.as_fd(),
                &c,
                u64::try_from(libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC).unwrap_or(0),
                0,
                libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
            )
            .map_err(std::io::Error::from_raw_os_error)
        };
        let fd = match open() {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                make_dirs(&base.dir, &rel, within)?;
                open()
            }
            other => other,
        }
        .map_err(io(&rel, "open directory"))?;
        Ok(Root {
            dir: File::from(fd),
        })
    }
}

/// Opens a regular file beneath `root` for reading, with its size; the caller reads it at
/// its own pace (a large download is streamed, never held whole).
pub fn open_read(root: &Path, path: &str) -> Result<(File, u64), FileError> {
    open_read_in(&Root::open(root)?, path)
}

/// [`open_read`] beneath an opened [`Root`].
pub fn open_read_in(root: &Root, path: &str) -> Result<(File, u64), FileError> {
    let rel = check_relative(path)?;
    let dir = &root.dir;
    let fd =
        open_beneath(dir, &rel, libc::O_RDONLY | libc::O_NOFOLLOW, 0).map_err(io(&rel, "open"))?;
    let f = File::from(fd);
    let meta = f.metadata().map_err(io(&rel, "stat"))?;
    if meta.is_dir() {
        return Err(FileError::IsDirectory {
            path: path.to_string(),
        });
    }
    Ok((f, meta.len()))
}

/// Reads a file beneath `root`, at most `cap` bytes.
pub fn read(root: &Path, path: &str, cap: u64) -> Result<Vec<u8>, FileError> {
    read_in(&Root::open(root)?, path, cap)
}

/// [`read`] beneath an opened [`Root`].
pub fn read_in(root: &Root, path: &str, cap: u64) -> Result<Vec<u8>, FileError> {
    let rel = check_relative(path)?;
    let (mut f, len) = open_read_in(root, path)?;
    if len > cap {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            limit: cap,
        });
    }
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&mut f)
        .take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(io(&rel, "read"))?;
    if buf.len() as u64 > cap {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            limit: cap,
        });
    }
    Ok(buf)
}

/// Creates the directories of `dirs` (each level, like `mkdir -p`) beneath `dir`, each
/// with `mkdirat` on a beneath-resolved parent; an existing directory is fine. True when
/// the last level was created here (false: it was there already).
fn make_dirs(dir: &File, dirs: &Path, path: &str) -> Result<bool, FileError> {
    let mut so_far = PathBuf::new();
    let mut created = false;
    for c in dirs.components() {
        so_far.push(c);
        let parent_fd = match so_far.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => Some(
                open_beneath(dir, p, libc::O_PATH | libc::O_DIRECTORY, 0)
                    .map_err(io(p, "open directory"))?,
            ),
            None => None,
        };
        let name = CString::new(
            so_far
                .file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        )
        .map_err(|_| FileError::BadPath {
            path: path.to_string(),
            why: "contains a NUL byte",
        })?;
        let at = parent_fd.as_ref().map(|f| f.as_fd()).unwrap_or(dir.as_fd());
        // mkdirat does not follow a symlink in the last component.
        let rc = sys::fs::mkdirat(at, &name, 0o755);
        created = rc.is_ok();
        if let Err(e) = rc {
            if e != libc::EEXIST {
                return Err(io(&so_far, "mkdir")(std::io::Error::from_raw_os_error(e)));
            }
        }
    }
    // Whatever existed must be a directory reached beneath the root (not a file, not a
    // symlink out).
    let d = open_beneath(dir, dirs, libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(io(dirs, "open directory"))?;
    drop(d);
    Ok(created)
}

/// Creates a directory and its parents beneath `root` (`mkdir -p`); false when it existed.
pub fn mkdir(root: &Path, path: &str) -> Result<bool, FileError> {
    mkdir_in(&Root::open(root)?, path)
}

/// [`mkdir`] beneath an opened [`Root`].
pub fn mkdir_in(root: &Root, path: &str) -> Result<bool, FileError> {
    let rel = check_relative(path)?;
    make_dirs(&root.dir, &rel, path)
}

/// Writes (creates or replaces) a file beneath `root`, creating parent directories.
pub fn write(root: &Path, path: &str, content: &[u8]) -> Result<(), FileError> {
    write_in(&Root::open(root)?, path, content)
}

/// [`write`] beneath an opened [`Root`].
pub fn write_in(root: &Root, path: &str, content: &[u8]) -> Result<(), FileError> {
    let rel = check_relative(path)?;
    let dir = &root.dir;
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        make_dirs(dir, parent, path)?;
    }
    let fd = open_beneath(
        dir,
        &rel,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
        0o644,
    )
    .map_err(io(&rel, "open for writing"))?;
    let mut f = File::from(fd);
    f.write_all(content).map_err(io(&rel, "write"))?;
    f.sync_data().map_err(io(&rel, "fsync"))
}

/// Deletes a file (or an empty directory) beneath `root`, without following a final symlink.
pub fn delete(root: &Path, path: &str) -> Result<(), FileError> {
    delete_in(&Root::open(root)?, path)
}

/// [`delete`] beneath an opened [`Root`].
pub fn delete_in(root: &Root, path: &str) -> Result<(), FileError> {
    let rel = check_relative(path)?;
    let dir = &root.dir;
    let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
    let parent_fd = match parent {
        Some(p) => Some(
            open_beneath(dir, p, libc::O_PATH | libc::O_DIRECTORY, 0)
                .map_err(io(p, "open directory"))?,
        ),
        None => None,
    };
    let at = parent_fd.as_ref().map(|f| f.as_fd()).unwrap_or(dir.as_fd());
    let name = CString::new(
        rel.file_name()
            .map(|n| n.as_encoded_bytes())
            .unwrap_or_default(),
    )
    .map_err(|_| FileError::BadPath {
        path: path.to_string(),
        why: "contains a NUL byte",
    })?;
    // unlinkat removes that name in that directory and follows no symlink.
    let Err(e) = sys::fs::unlinkat(at, &name, 0) else {
        return Ok(());
    };
    if e == libc::EISDIR {
        // With AT_REMOVEDIR for an (empty) directory.
        return sys::fs::unlinkat(at, &name, libc::AT_REMOVEDIR)
            .map_err(|e| io(&rel, "rmdir")(std::io::Error::from_raw_os_error(e)));
    }
    Err(io(&rel, "unlink")(std::io::Error::from_raw_os_error(e)))
}

/// Lists a directory beneath `root` (`"."` for the root itself), sorted by name.
pub fn list(root: &Path, path: &str) -> Result<Vec<DirEntry>, FileError> {
    list_in(&Root::open(root)?, path)
}

/// [`list`] beneath an opened [`Root`].
pub fn list_in(root: &Root, path: &str) -> Result<Vec<DirEntry>, FileError> {
    let dir = &root.dir;
    let fd = if path == "." || path.is_empty() {
        None
    } else {
        let rel = check_relative(path)?;
        Some(
            open_beneath(dir, &rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(io(&rel, "open directory"))?,
        )
    };
    let raw = fd
        .as_ref()
        .map(|f| f.as_raw_fd())
        .unwrap_or(dir.as_raw_fd());
    let proc_path = format!("/proc/self/fd/{raw}");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&proc_path).map_err(io(Path::new(path), "list"))? {
        let e = e.map_err(io(Path::new(path), "list"))?;
        let meta = e.metadata().map_err(io(Path::new(path), "stat"))?;
        out.push(DirEntry {
            name: e.file_name().to_string_lossy().into_owned(),
            is_dir: meta.is_dir(),
            size: meta.len(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_checks() {
        assert!(check_relative("a/b.txt").is_ok());
        assert_eq!(check_relative("./a//b").unwrap(), PathBuf::from("a/b"));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a\0b", "."] {
            assert!(check_relative(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn symlinks_out_of_the_root_are_refused_even_when_swapped_in() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"host secret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("link"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("dirlink")).unwrap();
        assert!(matches!(
            read(root.path(), "link", 1024),
            Err(FileError::Escapes { .. })
        ));
        assert!(matches!(
            read(root.path(), "dirlink/secret", 1024),
            Err(FileError::Escapes { .. })
        ));
        assert!(matches!(
            write(root.path(), "dirlink/new", b"x"),
            Err(FileError::Escapes { .. })
        ));
        assert!(!outside.path().join("new").exists());
        // Deleting the link removes the link, never its target.
        delete(root.path(), "link").unwrap();
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"host secret"
        );
    }

    #[test]
    fn a_root_within_a_directory_refuses_links_out_of_it() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "priv/secret", b"private").unwrap();
        mkdir(root.path(), "sub").unwrap();
        std::os::unix::fs::symlink("../priv", root.path().join("sub/lnk")).unwrap();
        std::os::unix::fs::symlink("priv", root.path().join("alias")).unwrap();
        let sub = Root::within(root.path(), "sub", false).unwrap();
        assert!(matches!(
            read_in(&sub, "lnk/secret", 1024),
            Err(FileError::Escapes { .. })
        ));
        assert!(matches!(
            write_in(&sub, "lnk/planted", b"x"),
            Err(FileError::Escapes { .. })
        ));
        assert!(matches!(
            list_in(&sub, "lnk"),
            Err(FileError::Escapes { .. })
        ));
        assert!(!root.path().join("priv/planted").exists());
        // Deleting the link removes the link, never what it leads to.
        assert!(delete_in(&sub, "lnk/secret").is_err());
        assert_eq!(read(root.path(), "priv/secret", 1024).unwrap(), b"private");
        // A link standing in for the directory itself is refused too.
        assert!(matches!(
            Root::within(root.path(), "alias", false),
            Err(FileError::Escapes { .. })
        ));
        // A missing directory is made when asked, beneath the root.
        assert!(matches!(
            Root::within(root.path(), "new/dir", false),
            Err(FileError::NotFound { .. })
        ));
        let made = Root::within(root.path(), "new/dir", true).unwrap();
        write_in(&made, "f", b"1").unwrap();
        assert_eq!(read(root.path(), "new/dir/f", 8).unwrap(), b"1");
    }

    #[test]
    fn write_read_list_delete_round_trip() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "d/e/f.txt", b"hello").unwrap();
        assert_eq!(read(root.path(), "d/e/f.txt", 10).unwrap(), b"hello");
        assert!(matches!(
            read(root.path(), "d/e/f.txt", 2),
            Err(FileError::TooLarge { .. })
        ));
        let l = list(root.path(), "d/e").unwrap();
        assert_eq!(
            l,
            vec![DirEntry {
                name: "f.txt".into(),
                is_dir: false,
                size: 5
            }]
        );
        assert_eq!(list(root.path(), ".").unwrap()[0].name, "d");
        delete(root.path(), "d/e/f.txt").unwrap();
        assert!(matches!(
            read(root.path(), "d/e/f.txt", 10),
            Err(FileError::NotFound { .. })
        ));
        assert_eq!(FileError::NotFound { path: "x".into() }.code(), "SBX_E1482");
    }

    #[test]
    fn mkdir_makes_parents_stays_beneath_and_open_read_streams() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        assert!(mkdir(root.path(), "a/b/c").unwrap());
        assert!(!mkdir(root.path(), "a/b/c").unwrap());
        assert!(!mkdir(root.path(), "a/b").unwrap());
        assert!(root.path().join("a/b/c").is_dir());
        std::os::unix::fs::symlink(outside.path(), root.path().join("out")).unwrap();
        assert!(matches!(
            mkdir(root.path(), "out/x"),
            Err(FileError::Escapes { .. })
        ));
        assert!(!outside.path().join("x").exists());
        write(root.path(), "f", b"12345").unwrap();
        assert!(
            mkdir(root.path(), "f").is_err(),
            "a file is not a directory"
        );
        assert!(matches!(
            mkdir(root.path(), "../up"),
            Err(FileError::BadPath { .. })
        ));
        let (mut f, len) = open_read(root.path(), "f").unwrap();
        let mut got = String::new();
        f.read_to_string(&mut got).unwrap();
        assert_eq!((len, got.as_str()), (5, "12345"));
        assert!(matches!(
            open_read(root.path(), "a"),
            Err(FileError::IsDirectory { .. })
        ));
    }
}
