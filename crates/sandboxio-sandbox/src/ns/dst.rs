//! The destination side of a tree copy, walked by descriptor. The copy's root directory is
//! opened once with no symlink anywhere in its path (callers name it by a canonical path
//! taken before the sandbox ran), and every name below it is created, opened and removed
//! relative to a directory opened from that root with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`. A directory swapped for a symlink (by the program through a
//! writable mount, or by another sandbox) cannot send the copy anywhere else: the open
//! fails with `ELOOP` instead.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::tree_root::{cstr, err, TreeRoot, BENEATH, DIR_FLAGS};
use crate::sys;

/// The root directory of a copy's destination.
pub(super) struct Dst {
    root: TreeRoot,
}

impl Dst {
    /// Opens `path`, refusing a symlink in any of its components (`ELOOP`).
    pub(super) fn open(path: &Path) -> io::Result<Dst> {
        let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        TreeRoot::open(path, DIR_FLAGS, resolve).map(|root| Dst { root })
    }

    /// Opens `path` following symlinks: for a destination no sandbox can reach (the
    /// helper's own staging directory).
    pub(super) fn open_private(path: &Path) -> io::Result<Dst> {
        TreeRoot::open(path, DIR_FLAGS & !(libc::O_NOFOLLOW as u64), 0).map(|root| Dst { root })
    }

    /// The host path of `rel` (for messages only: nothing is opened by it).
    pub(super) fn path_of(&self, rel: &Path) -> PathBuf {
        self.root.path_of(rel)
    }

    /// The directory `rel` below the root (the root itself for an empty `rel`).
    pub(super) fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.root.dir(rel)
    }

    /// Makes directory `name` in `dir` and opens it.
    pub(super) fn mkdir(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
        let n = cstr(name)?;
        sys::fs::mkdirat(dir, &n, mode).map_err(err)?;
        sys::fs::openat2(dir, &n, DIR_FLAGS, 0, BENEATH).map_err(err)
    }

    /// Creates the new file `name` in `dir` (never an existing one, never through a link).
    pub(super) fn create(
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
    ) -> io::Result<std::fs::File> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        sys::fs::openat2(dir, &cstr(name)?, flags as u64, u64::from(mode), BENEATH)
            .map(std::fs::File::from)
            .map_err(err)
    }

    /// A new name `name` in `dir` for the file at `first` (relative to the root).
    pub(super) fn link(&self, first: &Path, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
        let flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        let f = sys::fs::openat2(
            self.root.fd.as_fd(),
            &cstr(first.as_os_str())?,
            flags,
            0,
            BENEATH,
        )
        .map_err(err)?;
        let old = cstr(OsStr::new(&format!("/proc/self/fd/{}", f.as_raw_fd())))?;
        sys::fs::link_into(&old, dir, &cstr(name)?).map_err(err)
    }

    /// Removes `rel` (a directory when `is_dir`), found from the root without following
    /// any link.
    pub(super) fn remove(&self, rel: &Path, is_dir: bool) -> io::Result<()> {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(err(libc::EINVAL));
        };
        let d = self.dir(parent)?;
        let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
        sys::fs::unlinkat(d.as_fd(), &cstr(name)?, flags).map_err(err)
    }
}
