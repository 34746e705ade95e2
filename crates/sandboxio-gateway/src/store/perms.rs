//! Who may read the state: the state directory is 0700 and every file in it 0600 (the
//! public audit key may stay world-readable). Looser modes found at open are tightened.
//!
//! The database journals what ran, approvals, spend and idempotency outcomes: all redacted,
//! but still who ran what, for whom and when. The audit signing key is a secret outright.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::GatewayError;

pub const STATE_DIR_MODE: u32 = 0o700;
pub const STATE_FILE_MODE: u32 = 0o600;

/// Creates the state directory (0700, parents too) or tightens an existing one. A
/// directory others may write to and that is shared on purpose (the sticky bit, as on
/// `/tmp`) is refused rather than changed: the state belongs in a directory of its own.
///
/// A directory owned by another user is refused before anything is created in it: its
/// owner could swap the files under us (a key, a database, a trail), and root would leave
/// root-owned files there that lock the owner out of their own state.
///
/// Every directory above it must be one that only root and the user running sandboxio can
/// change ([`check_ancestors`]), checked before anything is created: whoever may rename
/// entries in a parent could move the whole state directory away, and the next run would
/// start from an empty state (the kill switch released, spend and idempotency keys
/// forgotten).
pub fn prepare_state_dir(dir: &Path) -> Result<(), GatewayError> {
    let err = |source: std::io::Error| GatewayError::StateDir {
        path: dir.display().to_string(),
        source,
    };
    // The directories the given name passes through (a symlink's own directory too),
    // before anything is created below them.
    let abs = std::path::absolute(dir).map_err(err)?;
    check_ancestors(dir, &abs)?;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(STATE_DIR_MODE)
            .create(dir)
            .map_err(err)?;
    }
    let meta = std::fs::metadata(dir).map_err(err)?;
    let mode = meta.permissions().mode();
    if !meta.is_dir() {
        return Err(GatewayError::StateDirInsecure {
            path: dir.display().to_string(),
            why: "it is not a directory".into(),
        });
    }
    let euid = sandboxio_sandbox::ids::effective_uid();
    if meta.uid() != euid {
        return Err(GatewayError::StateDirInsecure {
            path: dir.display().to_string(),
            why: format!(
                "it is owned by {}, not by {} who runs sandboxio; use a directory of your own \
                 (or run as its owner)",
                user(meta.uid()),
                user(euid)
            ),
        });
    }
    // And the directories it really is in, past every symlink.
    let real = std::fs::canonicalize(dir).map_err(err)?;
    check_ancestors(dir, &real)?;
    if mode & 0o1000 != 0 {
        return Err(GatewayError::StateDirInsecure {
            path: dir.display().to_string(),
            why: format!(
                "it is a shared directory (mode {:o}, sticky bit); use a directory of its own",
                mode & 0o7777
            ),
        });
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(STATE_DIR_MODE)).map_err(
            |e| GatewayError::StateDirInsecure {
                path: dir.display().to_string(),
                why: format!(
                    "others have access (mode {:o}) and it cannot be tightened to 700: {e}",
                    mode & 0o7777
                ),
            },
        )?;
    }
    Ok(())
}

/// Refuses `state` (the state directory, named `path` as it resolves) when a directory
/// above `path` lets a user other than root or us rename its entries: owned by another
/// user, writable by others without the sticky bit, or writable by its group without the
/// sticky bit (unless that group is our own primary group). Directories that do not exist
/// yet are skipped (they are created 0700 by us). Inside a user namespace, an owner that is
/// not mapped there (shown as the overflow id) cannot be told apart and is accepted.
pub fn check_ancestors(state: &Path, path: &Path) -> Result<(), GatewayError> {
    let euid = sandboxio_sandbox::ids::effective_uid();
    let egid = effective_gid();
    for a in path.ancestors().skip(1) {
        if a.as_os_str().is_empty() {
            continue;
        }
        let meta = match std::fs::metadata(a) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(GatewayError::StateDir {
                    path: a.display().to_string(),
                    source,
                })
            }
        };
        if let Some(why) = ancestor_problem(&meta, euid, egid) {
            return Err(GatewayError::StateDirInsecure {
                path: state.display().to_string(),
                why: format!(
                    "the directory above it, `{}`, {why}: that user could move the state \
                     directory away, and the next run would start from an empty state; use a \
                     directory whose parents only root and you can change (`--state-dir` or \
                     SBX_STATE_DIR)",
                    a.display()
                ),
            });
        }
    }
    Ok(())
}

/// Why a directory above the state lets another user rename its entries, if it does.
fn ancestor_problem(meta: &std::fs::Metadata, euid: u32, egid: u32) -> Option<String> {
    let mode = meta.permissions().mode();
    let sticky = mode & 0o1000 != 0;
    if meta.uid() != 0 && meta.uid() != euid && !unmapped(meta.uid(), "uid") {
        return Some(format!(
            "is owned by {}, not by root or {} who runs sandboxio",
            user(meta.uid()),
            user(euid)
        ));
    }
    if mode & 0o002 != 0 && !sticky {
        return Some(format!(
            "is writable by every user without the sticky bit (mode {:o})",
            mode & 0o7777
        ));
    }
    if mode & 0o020 != 0 && !sticky && meta.gid() != egid && !unmapped(meta.gid(), "gid") {
        return Some(format!(
            "is writable by the members of group {} without the sticky bit (mode {:o})",
            meta.gid(),
            mode & 0o7777
        ));
    }
    None
}

/// The effective gid of this process (`/proc/self/status`); `u32::MAX` when unknown, so
/// no group is taken for ours.
fn effective_gid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Gid:"))
                .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// Whether `id` is the overflow id a user namespace shows for an owner it does not map
/// (`kind` is `uid` or `gid`): never in the initial namespace.
fn unmapped(id: u32, kind: &str) -> bool {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let map = read(&format!("/proc/self/{kind}_map"));
    if map.is_empty() || sandboxio_sandbox::ids::full_identity_map(&map) {
        return false;
    }
    let overflow = read(&format!("/proc/sys/kernel/overflow{kind}"))
        .trim()
        .parse::<u32>()
        .unwrap_or(65534);
    let mapped = map.lines().any(|l| {
        let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        matches!(f.as_slice(), [inside, _, count] if (*inside..inside + count).contains(&u64::from(id)))
    });
    id == overflow && !mapped
}

/// `uid 65534 (nobody)`: the uid, and its name from `/etc/passwd` when it has one.
fn user(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
        p.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id = f.nth(1)?;
            (id.parse::<u32>().ok()? == uid).then(|| name.to_string())
        })
    });
    match name {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// Sets an existing file to 0600 when group or others have any access.
pub(crate) fn tighten_file(path: &Path) -> Result<(), GatewayError> {
    let err = |source: std::io::Error| GatewayError::StateFile {
        path: path.display().to_string(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o077 != 0 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(STATE_FILE_MODE))
                .map_err(err)
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Creates `path` empty with mode 0600 when it does not exist, so that SQLite (which gives
/// its `-wal` and `-shm` files the database's mode) never creates a readable file.
pub(crate) fn create_private(path: &Path) -> Result<(), GatewayError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(STATE_FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(GatewayError::StateFile {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// The database and its `-wal` / `-shm` companions.
pub(crate) fn db_files(db: &Path) -> [std::path::PathBuf; 3] {
    let with = |suffix: &str| {
        let mut s = db.as_os_str().to_owned();
        s.push(suffix);
        std::path::PathBuf::from(s)
    };
    [db.to_path_buf(), with("-wal"), with("-shm")]
}
