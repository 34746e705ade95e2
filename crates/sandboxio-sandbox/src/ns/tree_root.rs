//! The root directory of one side of a tree copy, held open: every directory below it is
//! reached from its descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, never
//! by a path from the host's root. Shared by the copy's source ([`super::src::Src`]) and
//! destination ([`super::dst::Dst`]).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys;

/// Below the root: no `..` out of it, no symlink, no magic link.
pub(super) const BENEATH: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
/// A directory, never through a symlink as its last component.
pub(super) const DIR_FLAGS: u64 =
    (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;

pub(super) fn err(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

pub(super) fn cstr(p: &OsStr) -> io::Result<CString> {
    CString::new(p.as_bytes()).map_err(|_| err(libc::EINVAL))
}

/// An open root directory and the path it was opened by (for messages).
pub(super) struct TreeRoot {
    pub(super) fd: OwnedFd,
    path: PathBuf,
}

impl TreeRoot {
    /// Opens `path` as a directory with `flags` and openat2's `resolve` bits.
    pub(super) fn open(path: &Path, flags: u64, resolve: u64) -> io::Result<TreeRoot> {
        let fd = sys::fs::openat2_cwd(&cstr(path.as_os_str())?, flags, 0, resolve).map_err(err)?;
        Ok(TreeRoot {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The host path of `rel` (for messages only: nothing is opened by it).
    pub(super) fn path_of(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.path.clone()
        } else {
            self.path.join(rel)
        }
    }

    /// The directory `rel` below the root (the root itself for an empty `rel`), reached
    /// through no symlink.
    pub(super) fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        if rel.as_os_str().is_empty() {
            return self.fd.try_clone();
        }
        sys::fs::openat2(
            self.fd.as_fd(),
            &cstr(rel.as_os_str())?,
            DIR_FLAGS,
            0,
            BENEATH,
        )
        .map_err(err)
    }
}
