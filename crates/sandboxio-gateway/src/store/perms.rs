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
pub fn prepare_state_dir(dir: &Path) -> Result<(), GatewayError> {
    let err = |source: std::io::Error| GatewayError::StateDir {
        path: dir.display().to_string(),
        source,
    };
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
