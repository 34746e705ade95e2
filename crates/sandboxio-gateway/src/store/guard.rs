//! Opening the state so that losing it is never a silent fresh start.
//!
//! The database holds what must not be forgotten: an engaged kill switch, spend against
//! ceilings, idempotency keys, approvals. When it is missing, empty (0 bytes), not a
//! database, or a database holding nothing at all (not even a trail head) while the audit
//! trail next to it already holds records (or, for a missing or empty database, while the
//! audit key written after it is still there), the state was lost or damaged, and starting afresh would release the kill switch and forget the spend. Every
//! open is then refused with a code that names the recovery command, until an operator
//! runs it (`sandboxio state recover --from-trail`, which rebuilds spend and keys from the
//! trail and leaves the kill switch engaged until `sandboxio resume`).

use std::path::PathBuf;

use super::perms::{db_files, prepare_state_dir, tighten_file};
use super::{SqliteStore, SyncMode};
use crate::error::GatewayError;

/// The command an operator runs after the state database was lost or damaged.
pub const RECOVER_COMMAND: &str = "sandboxio state recover --from-trail";

/// Where the state lives: the directory, its database, and the audit trail (whose active
/// file may be configured elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFiles {
    pub dir: PathBuf,
    pub db: PathBuf,
    pub trail: PathBuf,
}

impl StateFiles {
    /// The default layout: `<dir>/state.db`, and the trail at `trail` or `<dir>/audit.jsonl`.
    pub fn new(dir: impl Into<PathBuf>, trail: Option<PathBuf>) -> StateFiles {
        let dir = dir.into();
        StateFiles {
            db: dir.join("state.db"),
            trail: trail.unwrap_or_else(|| dir.join("audit.jsonl")),
            dir,
        }
    }

    /// Creates or tightens the state directory (0700).
    pub fn prepare_dir(&self) -> Result<(), GatewayError> {
        prepare_state_dir(&self.dir)
    }

    /// Opens the database, refusing a lost or damaged one where a trail exists (see the
    /// module docs). Tightens the directory and the database files.
    pub fn open_store(&self, sync: SyncMode) -> Result<SqliteStore, GatewayError> {
        self.prepare_dir()?;
        self.check_not_lost()?;
        let store = SqliteStore::open(&self.db, sync).map_err(|e| self.damaged(e))?;
        // A database that holds nothing at all (not even a trail head) next to a trail
        // with records was replaced by a new one: the same loss, refused the same way.
        // Cheap in the normal case: the trail is read only when the database is blank.
        if store.is_blank().map_err(|e| self.damaged(e))? && self.trail_has_records()? {
            return Err(GatewayError::StateLost {
                db: self.db.display().to_string(),
                trail: self.trail.display().to_string(),
                why: "a new, empty database".into(),
            });
        }
        Ok(store)
    }

    /// Whether the trail already holds records (the state is then not new).
    pub fn trail_has_records(&self) -> Result<bool, GatewayError> {
        sandboxio_audit::trail_has_records(&self.trail).map_err(|e| GatewayError::StateLost {
            db: self.db.display().to_string(),
            trail: self.trail.display().to_string(),
            why: format!("cannot be checked against the trail ({e})"),
        })
    }

    /// The loss of a database that is missing, empty or not a file (`why`), when something
    /// shows that this directory held a state: records in the trail, or else the audit key
    /// or its public list. Those are written only after the database (the first open
    /// creates the database, then the key), so a directory that holds one of them without
    /// its database lost the database; with the trail gone too, the key is all that is
    /// left to say so. `None`: a new state. (A blank database beside a key is not judged by
    /// this: a command that opens the state and records nothing leaves exactly that.)
    fn loss(&self, why: String) -> Result<Option<GatewayError>, GatewayError> {
        if self.trail_has_records()? {
            return Ok(Some(GatewayError::StateLost {
                db: self.db.display().to_string(),
                trail: self.trail.display().to_string(),
                why,
            }));
        }
        Ok(["audit.key", "audit.key.pending", "audit.pub"]
            .into_iter()
            .map(|name| self.dir.join(name))
            .find(|p| std::fs::symlink_metadata(p).is_ok())
            .map(|p| GatewayError::StateGone {
                db: self.db.display().to_string(),
                trail: self.trail.display().to_string(),
                why,
                evidence: p.display().to_string(),
            }))
    }

    fn check_not_lost(&self) -> Result<(), GatewayError> {
        let why = match std::fs::metadata(&self.db) {
            // A FIFO, a socket or a device is no database, whatever its size says (a
            // directory is left to SQLite, which cannot open it).
            Ok(m) if !m.is_file() && !m.is_dir() => {
                let what = sandboxio_core::fileread::not_regular(m.file_type()).to_string();
                return Err(match self.loss(format!("not a database ({what})"))? {
                    Some(lost) => lost,
                    None => GatewayError::StateFile {
                        path: self.db.display().to_string(),
                        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, what),
                    },
                });
            }
            Ok(m) if m.len() > 0 => return Ok(()),
            Ok(_) => "empty (0 bytes)",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "missing",
            Err(source) => {
                return Err(GatewayError::StateFile {
                    path: self.db.display().to_string(),
                    source,
                })
            }
        };
        match self.loss(why.to_string())? {
            Some(lost) => Err(lost),
            None => Ok(()),
        }
    }

    /// A database SQLite cannot read is reported as damaged, with the recovery command.
    fn damaged(&self, e: GatewayError) -> GatewayError {
        match e {
            GatewayError::StoreOpen { source, .. } | GatewayError::Store { source, .. }
                if is_damage(&source) =>
            {
                GatewayError::StateCorrupt {
                    db: self.db.display().to_string(),
                    why: source.to_string(),
                }
            }
            other => other,
        }
    }

    /// Moves the database and its `-wal`/`-shm` files aside (kept as evidence, never
    /// deleted) to `<name>.damaged-<time>`; returns where the database went.
    pub fn move_db_aside(&self) -> Result<Option<PathBuf>, GatewayError> {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
        let mut moved = None;
        for f in db_files(&self.db) {
            if !f.exists() {
                continue;
            }
            let mut to = f.as_os_str().to_owned();
            to.push(format!(".damaged-{stamp}"));
            let to = PathBuf::from(to);
            tighten_file(&f)?;
            std::fs::rename(&f, &to).map_err(|source| GatewayError::StateFile {
                path: f.display().to_string(),
                source,
            })?;
            if f == self.db {
                moved = Some(to);
            }
        }
        Ok(moved)
    }
}

/// SQLite's own words for "this is not (or no longer) a database".
pub(crate) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt)
    )
}
