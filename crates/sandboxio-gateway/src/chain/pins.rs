//! Pins: what the host directories a program sees read-only (its input directory and its
//! read-only mounts) hold, bound to the request.
//!
//! Those directories are bound live into the sandbox, so their names alone do not say what
//! the program will read: an approval given for `cat /input/payload` would otherwise hold
//! for whatever the file says when the run starts, and a replay under an idempotency key
//! would answer a request whose input differs. Each is pinned at admission to a digest of
//! its tree (`ExecRequest::pinned`, part of the fingerprint and of what approvers see), and
//! checked again after an approval, once the copy the program will read is made.
//!
//! The digest covers every entry's relative path, type, mode, owner, size, inode, device,
//! link target, and modification and change times, never its contents: a write changes
//! the change time, which no user can set back (only a changed system clock could), so any
//! change to a file shows, at the cost of one `lstat` per entry. Symlinks are not followed.
//! Pins are taken only where something binds the request (an idempotency key, an
//! approval). An input directory the run writes into (it holds the output directory, as a
//! sandbox session's workspace does) is the run's own state, like a read-write mount, and
//! is not pinned. A tree that cannot be known (more than [`MAX_ENTRIES`] entries, deeper
//! than the walk goes, a directory this user cannot list) is named `unpinned: ...`, and
//! the request is refused (`SBX_E1566`): no approval and no key could say what it reads.
//!
//! After an approval, the program does not read the input directory itself but a copy
//! taken then (`snapshot`: directories and regular files, at most
//! [`SNAPSHOT_MAX_BYTES`]), checked against the pins after it is made: a writer racing the
//! start changes nothing it reads. Read-only mounts stay live: a writer who races the
//! sandbox's start after the last walk, or writes while the program runs, is not stopped
//! there; bind only directories nobody else writes to. Read-write mounts are not pinned:
//! their contents are the run's own state (a replay after the first run changed them must
//! still replay).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use sandboxio_core::{ExecRequest, MountMode};
use sha2::{Digest as _, Sha256};

/// Entries walked at most per pinned directory.
pub(crate) const MAX_ENTRIES: usize = 50_000;
/// An approved run's input is copied, at most this many bytes, into a private directory
/// (`snapshot`), and the program reads the copy.
pub(crate) const SNAPSHOT_MAX_BYTES: u64 = 512 * 1024 * 1024;
/// The name of the copy inside its private directory.
pub(crate) const SNAPSHOT_INPUT: &str = "input";

/// The prefix of a pin that holds a digest (anything else says why there is none).
pub(crate) const TREE_PREFIX: &str = "tree-v1:";
/// Directory depth walked at most.
const MAX_DEPTH: usize = 64;

/// Pins every read-only host directory of `req` (a caller's `pinned` is replaced).
#[cfg(test)]
pub(crate) fn pin(req: &mut ExecRequest) {
    req.pinned = of(&dirs(req));
}

/// A copy of `req`'s input directory in a private directory under `work_root`, checked
/// after it is made: every read-only directory must still be what `req` pinned, so the
/// copy holds what was approved (a write during the copy changes a change time, which
/// the walk after it sees). `Ok(None)`: no input directory. `Err`: what went wrong, for
/// a refusal (the directory named in `Changed`).
pub(crate) fn snapshot(
    req: &ExecRequest,
    work_root: &Path,
) -> Result<Option<tempfile::TempDir>, SnapshotError> {
    let Some(input) = pinned_input(req) else {
        return match changed(req) {
            Some(dir) => Err(SnapshotError::Changed(dir)),
            None => Ok(None),
        };
    };
    let copy = || -> std::io::Result<tempfile::TempDir> {
        use std::os::unix::fs::PermissionsExt as _;
        let prefix = format!(
            "{}input-",
            sandboxio_sandbox::sweep::owned_prefix(sandboxio_sandbox::sweep::PREFIX)
        );
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(work_root)?;
        // The program may run as another user than this process (the namespace tier's
        // mapped user): it reads the copy as it would read the original.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let into = dir.path().join(SNAPSHOT_INPUT);
        std::fs::create_dir(&into)?;
        let mode = std::fs::metadata(input)?.permissions().mode() & 0o755;
        std::fs::set_permissions(&into, std::fs::Permissions::from_mode(mode))?;
        sandboxio_sandbox::ns::copy_snapshot(input, &into, SNAPSHOT_MAX_BYTES, MAX_ENTRIES as u64)
            .map_err(std::io::Error::other)?;
        Ok(dir)
    };
    let dir = copy().map_err(SnapshotError::Copy)?;
    match changed(req) {
        Some(dir) => Err(SnapshotError::Changed(dir)),
        None => Ok(Some(dir)),
    }
}

/// Why an approved run's input could not be given to it as approved.
pub(crate) enum SnapshotError {
    /// This read-only directory is not what was pinned.
    Changed(String),
    /// The copy failed (too large, unreadable, no space).
    Copy(std::io::Error),
}

/// The first read-only directory whose tree is not what `req` pinned, if any.
pub(crate) fn changed(req: &ExecRequest) -> Option<String> {
    let now = of(&dirs(req));
    if now == req.pinned {
        return None;
    }
    now.keys()
        .chain(req.pinned.keys())
        .find(|p| now.get(*p) != req.pinned.get(*p))
        .cloned()
}

/// `req`'s input directory, unless the run writes into it (it holds the output directory,
/// as a sandbox session's workspace does): then it is the run's own state, like a
/// read-write mount, and neither pinned nor copied.
fn pinned_input(req: &ExecRequest) -> Option<&PathBuf> {
    let input = req.input_dir.as_ref()?;
    match &req.output_dir {
        Some(out) if out.starts_with(input) => None,
        _ => Some(input),
    }
}

/// The host directories `req` binds read-only: its input directory (see
/// [`pinned_input`]) and read-only mounts.
pub(crate) fn dirs(req: &ExecRequest) -> Vec<PathBuf> {
    pinned_input(req)
        .into_iter()
        .chain(
            req.mounts
                .iter()
                .filter(|m| m.mode == MountMode::Ro)
                .map(|m| &m.host),
        )
        .cloned()
        .collect()
}

/// The pins of read-only directories: host path -> its tree's digest, or why there is
/// none (a path that is not UTF-8 is not pinned: pins are named by their path).
pub(crate) fn of(dirs: &[PathBuf]) -> BTreeMap<String, String> {
    dirs.iter()
        .map(|d| {
            let pin = if d.to_str().is_none() {
                "unpinned: the path is not UTF-8".to_string()
            } else {
                tree_digest(d)
            };
            (d.display().to_string(), pin)
        })
        .collect()
}

/// `dirs`, none of them pinned (the walk could not run).
pub(crate) fn not_walked(dirs: &[PathBuf]) -> BTreeMap<String, String> {
    dirs.iter()
        .map(|d| (d.display().to_string(), "unpinned: not walked".to_string()))
        .collect()
}

/// `tree-v1:<sha256>` of `root`'s tree, or `unpinned: <why>`.
pub(crate) fn tree_digest(root: &Path) -> String {
    let mut h = Sha256::new();
    let mut entries = 0usize;
    match walk(root, Path::new(""), 0, &mut h, &mut entries) {
        Ok(()) => format!("{TREE_PREFIX}{}", hex::encode(h.finalize())),
        Err(why) => format!("unpinned: {why}"),
    }
}

fn walk(
    host: &Path,
    rel: &Path,
    depth: usize,
    h: &mut Sha256,
    entries: &mut usize,
) -> Result<(), String> {
    *entries += 1;
    if *entries > MAX_ENTRIES {
        return Err(format!("more than {MAX_ENTRIES} entries"));
    }
    if depth > MAX_DEPTH {
        return Err(format!("deeper than {MAX_DEPTH} directories"));
    }
    let meta = match std::fs::symlink_metadata(host) {
        Ok(m) => m,
        Err(e) => {
            // Gone between the listing and here, or not ours to see: what the program
            // would meet too, so it is part of the tree.
            entry(h, rel, &format!("error:{}", e.raw_os_error().unwrap_or(0)));
            return Ok(());
        }
    };
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        "d"
    } else if ft.is_file() {
        "f"
    } else if ft.is_symlink() {
        "l"
    } else {
        "o"
    };
    let mut line = format!(
        "{kind} {:o} {}:{} {} {}:{} {}.{} {}.{}",
        meta.mode(),
        meta.uid(),
        meta.gid(),
        meta.size(),
        meta.dev(),
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    );
    if ft.is_symlink() {
        if let Ok(target) = std::fs::read_link(host) {
            line.push_str(" -> ");
            line.push_str(&hex::encode(target.as_os_str().as_bytes()));
        }
    }
    entry(h, rel, &line);
    if !ft.is_dir() {
        return Ok(());
    }
    // A directory that cannot be listed to its end (search-only, `0111`, to this user)
    // still serves the names inside it to a program that knows them: its tree cannot be
    // known, so nothing of it is pinned.
    let unlisted = |e: std::io::Error| format!("`{}` cannot be listed: {e}", host.display());
    let mut names = Vec::new();
    for e in std::fs::read_dir(host).map_err(unlisted)? {
        names.push(e.map_err(unlisted)?.file_name());
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for n in names {
        walk(&host.join(&n), &rel.join(&n), depth + 1, h, entries)?;
    }
    Ok(())
}

/// One entry: its path (hex, so that no byte of a name can forge a separator) and facts.
fn entry(h: &mut Sha256, rel: &Path, facts: &str) {
    h.update(hex::encode(rel.as_os_str().as_bytes()).as_bytes());
    h.update(b" ");
    h.update(facts.as_bytes());
    h.update(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_change_to_the_tree_changes_the_digest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/f"), b"SAFE").unwrap();
        let a = tree_digest(d.path());
        assert!(a.starts_with("tree-v1:"), "{a}");
        assert_eq!(a, tree_digest(d.path()), "stable while nothing changes");
        // The same size, the modification time put back: the change time still moves.
        let f = d.path().join("sub/f");
        let before = std::fs::metadata(&f).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, b"EVIL").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(before)
            .unwrap();
        let b = tree_digest(d.path());
        assert_ne!(a, b, "a rewrite with the old mtime");
        std::fs::write(d.path().join("new"), b"").unwrap();
        assert_ne!(b, tree_digest(d.path()), "a new entry");
        let c = tree_digest(d.path());
        std::fs::remove_file(d.path().join("new")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("new")).unwrap();
        assert_ne!(c, tree_digest(d.path()), "a file swapped for a symlink");
    }

    #[test]
    fn a_tree_too_large_is_named_unpinned() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..=MAX_ENTRIES {
            std::fs::write(d.path().join(i.to_string()), b"").unwrap();
        }
        let p = tree_digest(d.path());
        assert!(p.starts_with("unpinned: more than"), "{p}");
    }

    #[test]
    fn what_the_run_writes_and_paths_not_utf8_are_never_pinned() {
        use std::os::unix::ffi::OsStrExt as _;
        let d = tempfile::tempdir().unwrap();
        let odd = d.path().join(std::ffi::OsStr::from_bytes(b"odd\xff"));
        std::fs::create_dir_all(&odd).unwrap();
        let pins = of(std::slice::from_ref(&odd));
        assert!(pins.values().all(|p| p.contains("not UTF-8")), "{pins:?}");
        // An input directory that holds the output directory (a session's workspace) is
        // the run's own state: not pinned.
        let mut req = ExecRequest::new(["true"]);
        req.input_dir = Some(d.path().to_path_buf());
        req.output_dir = Some(d.path().to_path_buf());
        assert!(dirs(&req).is_empty());
        req.output_dir = Some(d.path().join("out"));
        assert!(dirs(&req).is_empty());
        req.output_dir = Some(std::env::temp_dir().join("elsewhere"));
        assert_eq!(dirs(&req), vec![d.path().to_path_buf()]);
    }

    #[test]
    fn only_read_only_directories_are_pinned_and_a_change_is_named() {
        let input = tempfile::tempdir().unwrap();
        let ro = tempfile::tempdir().unwrap();
        let rw = tempfile::tempdir().unwrap();
        let mut req = ExecRequest::new(["true"]);
        req.input_dir = Some(input.path().to_path_buf());
        let cwd = Path::new("/");
        req.mounts = vec![
            sandboxio_core::Mount::parse(&format!("{}:/ro", ro.path().display()), cwd).unwrap(),
            sandboxio_core::Mount::parse(&format!("{}:/rw:rw", rw.path().display()), cwd).unwrap(),
        ];
        req.pinned.insert("/forged".into(), "tree-v1:0".into());
        pin(&mut req);
        assert_eq!(req.pinned.len(), 2, "{:?}", req.pinned);
        assert!(!req.pinned.contains_key("/forged"));
        assert_eq!(changed(&req), None);
        std::fs::write(rw.path().join("state"), b"the run's own").unwrap();
        assert_eq!(changed(&req), None, "a read-write mount is the run's state");
        std::fs::write(ro.path().join("x"), b"1").unwrap();
        assert_eq!(changed(&req), Some(ro.path().display().to_string()));
    }
}
