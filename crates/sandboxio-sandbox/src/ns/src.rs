//! The source side of a tree copy, walked by descriptor. The tree being copied can belong
//! to the program that just ran (the landlock tier's output lives in the program's own
//! workspace) or to anyone who can write the caller's input directory: a name in it may be
//! a symlink, and a directory may be swapped for one while the copy runs. So nothing below
//! the copy's root is opened by a path from the host's root: the root is opened once
//! (never through a symlink as its last component), every directory below it is reopened
//! from that root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, every entry is
//! opened from its directory's descriptor with `O_NOFOLLOW`, and what an entry is comes
//! from `fstat` of the descriptor opened, not from a look at the name before.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::tree_root::{cstr, err, TreeRoot, BENEATH, DIR_FLAGS};
use crate::sys;
/// A file to read: never through a symlink, and a FIFO swapped in does not block the open.
const FILE_FLAGS: u64 =
    (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        as u64;
/// `d_type` values of `struct linux_dirent64`.
const DT_UNKNOWN: u8 = 0;
const DT_DIR: u8 = 4;
const DT_REG: u8 = 8;

/// What a directory entry is, as its directory listed it. Only a hint: the entry can change
/// before it is opened, and [`Src::open_dir`] and [`Src::open_file`] check what they open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hint {
    Dir,
    File,
    /// The filesystem did not say: open it and see.
    Unknown,
    /// A symlink, a device, a FIFO, a socket: never copied.
    Other,
}

/// The root directory of a copy's source.
pub(super) struct Src {
    root: TreeRoot,
}

impl Src {
    /// Opens `path`: a symlink as its last component is refused (`ELOOP`); the components
    /// before it are the caller's (a workspace or input directory the host chose).
    pub(super) fn open(path: &Path) -> io::Result<Src> {
        TreeRoot::open(path, DIR_FLAGS, 0).map(|root| Src { root })
    }

    /// The host path of `rel` (for messages only: nothing is opened by it).
    pub(super) fn path_of(&self, rel: &Path) -> PathBuf {
        self.root.path_of(rel)
    }

    /// The directory `rel` below the root (the root itself for an empty `rel`), reached
    /// through no symlink.
    pub(super) fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.root.dir(rel)
    }

    /// The entries of the open directory `dir` (without `.` and `..`), with their hints.
    pub(super) fn entries(dir: BorrowedFd<'_>) -> io::Result<Vec<(OsString, Hint)>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = sys::fd::getdents64(dir, &mut buf).map_err(err)?;
            if n == 0 {
                return Ok(out);
            }
            parse_dirents(&buf[..n], &mut out)?;
        }
    }

    /// Opens the directory `name` of `dir`: `Ok(None)` when it is no longer a directory
    /// (a symlink or a file took its place since it was listed, or it is gone).
    pub(super) fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<OwnedFd>> {
        match sys::fs::openat2(dir, &cstr(name)?, DIR_FLAGS, 0, BENEATH) {
            Ok(fd) => Ok(Some(fd)),
            Err(libc::ELOOP | libc::ENOTDIR | libc::ENOENT) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Opens the regular file `name` of `dir` for reading, with its metadata: `Ok(None)`
    /// when it is not a regular file (a symlink, a FIFO, a device, or gone).
    pub(super) fn open_file(
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> io::Result<Option<(std::fs::File, std::fs::Metadata)>> {
        let fd = match sys::fs::openat2(dir, &cstr(name)?, FILE_FLAGS, 0, BENEATH) {
            Ok(fd) => fd,
            Err(libc::ELOOP | libc::ENOENT | libc::ENXIO | libc::EISDIR) => return Ok(None),
            Err(e) => return Err(err(e)),
        };
        let file = std::fs::File::from(fd);
        let meta = file.metadata()?;
        Ok(meta.file_type().is_file().then_some((file, meta)))
    }

    /// What `name` of `dir` is now (for a listing that gave no type), not following a
    /// symlink: `Hint::Other` when it is gone.
    pub(super) fn look(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Hint> {
        let flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        let fd = match sys::fs::openat2(dir, &cstr(name)?, flags, 0, BENEATH) {
            Ok(fd) => fd,
            Err(libc::ENOENT | libc::ELOOP) => return Ok(Hint::Other),
            Err(e) => return Err(err(e)),
        };
        let ft = std::fs::File::from(fd).metadata()?.file_type();
        Ok(if ft.is_dir() {
            Hint::Dir
        } else if ft.is_file() {
            Hint::File
        } else {
            Hint::Other
        })
    }
}

/// Appends the entries of a `getdents64` buffer (records of `struct linux_dirent64`: inode
/// u64, offset i64, record length u16, type u8, then the NUL-terminated name).
fn parse_dirents(buf: &[u8], out: &mut Vec<(OsString, Hint)>) -> io::Result<()> {
    const NAME_AT: usize = 19;
    let bad = || err(libc::EIO);
    let mut at = 0;
    while at < buf.len() {
        let rec = buf.get(at..).ok_or_else(bad)?;
        let len = rec
            .get(16..18)
            .map(|b| usize::from(u16::from_ne_bytes([b[0], b[1]])))
            .ok_or_else(bad)?;
        if len <= NAME_AT || len > rec.len() {
            return Err(bad());
        }
        let kind = rec[18];
        let name = &rec[NAME_AT..len];
        let name = &name[..name.iter().position(|&b| b == 0).ok_or_else(bad)?];
        if name != b"." && name != b".." {
            let hint = match kind {
                DT_DIR => Hint::Dir,
                DT_REG => Hint::File,
                DT_UNKNOWN => Hint::Unknown,
                _ => Hint::Other,
            };
            out.push((OsStr::from_bytes(name).to_os_string(), hint));
        }
        at += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::os::fd::AsFd;

    fn names(dir: &Path) -> Vec<(String, Hint)> {
        let src = Src::open(dir).unwrap();
        let fd = src.dir(Path::new("")).unwrap();
        let mut v: Vec<_> = Src::entries(fd.as_fd())
            .unwrap()
            .into_iter()
            .map(|(n, h)| (n.to_string_lossy().into_owned(), h))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn lists_every_entry_with_its_kind_across_several_reads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("link")).unwrap();
        // More names than one 32 KiB read holds, some long, one not UTF-8.
        for i in 0..600 {
            std::fs::write(d.path().join(format!("{i:0>200}")), b"x").unwrap();
        }
        std::fs::write(d.path().join(OsStr::from_bytes(b"bad\xff")), b"").unwrap();
        let v = names(d.path());
        assert_eq!(v.len(), 603);
        assert!(v.contains(&("sub".into(), Hint::Dir)));
        assert!(v.contains(&("link".into(), Hint::Other)));
        assert!(v.contains(&(format!("{:0>200}", 7), Hint::File)));
        assert!(v.iter().any(|(n, _)| n.starts_with("bad")));
    }

    #[test]
    fn a_symlink_is_never_opened_as_the_root_a_directory_or_a_file() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("key"), b"k").unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        std::os::unix::fs::symlink(&secret, tree.join("dir")).unwrap();
        std::os::unix::fs::symlink(secret.join("key"), tree.join("file")).unwrap();
        std::os::unix::fs::symlink(&secret, d.path().join("root-link")).unwrap();

        // O_DIRECTORY | O_NOFOLLOW on a symlink: ENOTDIR (ELOOP on some kernels).
        let e = Src::open(&d.path().join("root-link")).err().unwrap();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{e}"
        );
        let src = Src::open(&tree).unwrap();
        let root = src.dir(Path::new("")).unwrap();
        assert!(Src::open_dir(root.as_fd(), OsStr::new("dir"))
            .unwrap()
            .is_none());
        assert!(Src::open_file(root.as_fd(), OsStr::new("file"))
            .unwrap()
            .is_none());
        assert_eq!(
            Src::look(root.as_fd(), OsStr::new("dir")).unwrap(),
            Hint::Other
        );
        // A directory below the root is reached through no symlink either.
        let e = src.dir(Path::new("dir")).err().unwrap();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_is_not_a_file_and_does_not_block() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let src = Src::open(d.path()).unwrap();
        let root = src.dir(Path::new("")).unwrap();
        assert!(Src::open_file(root.as_fd(), OsStr::new("fifo"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_damaged_listing_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        for buf in [&[0u8; 5][..], &[0u8; 24][..], &[0xffu8; 40][..]] {
            assert!(parse_dirents(buf, &mut out).is_err(), "{buf:?}");
        }
        // A record whose name has no terminating NUL.
        let mut rec = vec![0u8; 24];
        rec[16] = 24;
        rec[18] = DT_REG;
        rec[19..24].copy_from_slice(b"abcde");
        assert!(parse_dirents(&rec, &mut out).is_err());
        rec[23] = 0;
        parse_dirents(&rec, &mut out).unwrap();
        assert_eq!(out, vec![(OsString::from("abcd"), Hint::File)]);
    }
}
