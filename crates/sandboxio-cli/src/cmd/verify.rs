//! `sandboxio audit verify`: each trail on its own (chain, checkpoints, signatures), then
//! against the signed head kept in the state store, which catches what the file alone
//! cannot show: a deleted file, whole runs cut from the end, an older copy swapped in.
//! Replicas of a shared store each keep their own trail; they are verified together,
//! each against its head in the shared store (`--config`), and with `--all` a head that
//! no given trail holds fails too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;
use sandboxio_config::Config;
use sandboxio_gateway::layers::audit::{BadRecord, HeadCheck, Tamper, VerifyReport, VerifyingKey};
use sandboxio_gateway::store::{read_trail_anchors, AnchorSource, KeptHead, TrailAnchors};

use serde::Serialize;

use super::anchor::{self, Anchor};
use crate::error::CliError;
use crate::exit;
use crate::out::outln;

/// Where the signed heads are read from.
#[derive(Debug, Clone)]
pub enum StoreArg {
    /// Each trail's own directory, when it holds `state.db` (the default layout).
    Beside,
    /// `--state-dir`: its `state.db`.
    StateDir(PathBuf),
    /// `--config`: its `[state] url` (shared store), else its `[state] dir`.
    Config(PathBuf),
    /// `--no-head`: each trail on its own, compared with no signed head.
    NoHead,
}

impl StoreArg {
    pub fn from_args(
        state_dir: Option<PathBuf>,
        config: Option<PathBuf>,
        no_head: bool,
    ) -> StoreArg {
        match (state_dir, config) {
            _ if no_head => StoreArg::NoHead,
            (Some(d), _) => StoreArg::StateDir(d),
            (None, Some(c)) => StoreArg::Config(c),
            (None, None) => StoreArg::Beside,
        }
    }

    /// Why a trail was compared with no signed head.
    fn unanchored_why(&self) -> &'static str {
        match self {
            StoreArg::NoHead => {
                "not compared with a signed head (--no-head): records cut from \
                 its end, or an older copy, would pass unnoticed"
            }
            _ => {
                "not compared with a signed head (no state database found; pass --state-dir, \
                 or --config for a shared store; --no-head to accept a check of the trail alone)"
            }
        }
    }

    /// The store holding the heads of the trail whose active file is `base` (holding
    /// `records` records).
    fn source(&self, base: &Path, records: u64) -> Result<Option<AnchorSource>> {
        let sqlite = |dir: &Path| -> Result<AnchorSource> {
            let db = dir.join("state.db");
            if !db.is_file() {
                return Err(CliError::HeadStore {
                    why: format!("no state database at `{}`", db.display()),
                }
                .into());
            }
            Ok(AnchorSource::Sqlite(db))
        };
        match self {
            StoreArg::NoHead => Ok(None),
            StoreArg::StateDir(d) => sqlite(d).map(Some),
            StoreArg::Config(c) => {
                let config = Config::load(c)?;
                match (&config.state.url, &config.state.dir) {
                    (Some(url), _) => Ok(Some(AnchorSource::Shared(url.clone()))),
                    (None, Some(d)) => sqlite(d).map(Some),
                    (None, None) => Err(CliError::HeadStore {
                        why: format!(
                            "`{}` names no shared store (`[state] url`) and no state \
                             directory (`[state] dir`)",
                            c.display()
                        ),
                    }
                    .into()),
                }
            }
            StoreArg::Beside => {
                let dir = match base.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                let db = dir.join("state.db");
                if db.is_file() {
                    return Ok(Some(AnchorSource::Sqlite(db)));
                }
                // The trail sits in a state directory whose database is gone: the head
                // that would show records cut from its end went with it.
                if let Some(found) = state_marker(&dir, base).filter(|_| records > 0) {
                    return Err(sandboxio_gateway::GatewayError::StateLost {
                        db: db.display().to_string(),
                        trail: base.display().to_string(),
                        why: format!(
                            "missing (the trail is in a state directory: `{found}` is there), so \
                             the trail cannot be compared with its signed head; `audit verify \
                             --no-head` checks the trail alone"
                        ),
                    }
                    .into());
                }
                Ok(None)
            }
        }
    }
}

/// A file only a state directory holds beside its trail (the signing key, the trail's
/// lock, the database's write-ahead log), when one is in `dir`. A trail copied elsewhere
/// for checking (with its public key) has none.
fn state_marker(dir: &Path, base: &Path) -> Option<String> {
    let mut lock = base
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    lock.push(".lock");
    let lock = lock.to_string_lossy().into_owned();
    let found = [
        "audit.key",
        "audit.key.pending",
        "state.db-wal",
        "state.db-shm",
        lock.as_str(),
    ]
    .into_iter()
    .find(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
    .map(str::to_string);
    found
}

/// The heads `src` keeps, for the trail `base`. A SQLite database that is empty (0 bytes)
/// or holds no state tables was replaced or cut: the state was lost (`SBX_E1532`, as a
/// run reports it), not a store error.
fn read_anchors(src: &AnchorSource, base: &Path) -> Result<TrailAnchors> {
    let lost = |db: &Path, why: &str| sandboxio_gateway::GatewayError::StateLost {
        db: db.display().to_string(),
        trail: base.display().to_string(),
        why: why.to_string(),
    };
    let sqlite = match src {
        AnchorSource::Sqlite(db) => Some(db),
        AnchorSource::Shared(_) => None,
    };
    if let Some(db) = sqlite.filter(|db| std::fs::metadata(db).is_ok_and(|m| m.len() == 0)) {
        return Err(lost(db, "empty (0 bytes)").into());
    }
    match (read_trail_anchors(src), sqlite) {
        (Ok(a), _) => Ok(a),
        (Err(sandboxio_gateway::GatewayError::Store { source, .. }), Some(db))
            if source.to_string().contains("no such table") =>
        {
            Err(lost(db, "a database without sandboxio's tables").into())
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// One trail's outcome.
struct Checked {
    file: PathBuf,
    rep: VerifyReport,
    anchor: Anchor,
    /// The trail is open (not closed) and holds its signed head.
    open: Option<Open>,
}

/// A trail that does not end with a closing checkpoint but holds the signed head its store
/// keeps: a writer is still running (a server), or one stopped without closing (killed; the
/// next start seals the trail with a recovery checkpoint). Every record up to the head is
/// vouched for by the head; the few written after it (a live writer between its record and
/// storing the head, or one killed there) are chained but covered by no signature yet.
#[derive(Debug, Clone, Serialize)]
struct Open {
    /// Records after the last checkpoint (they carry no checkpoint's signature).
    after_checkpoint: u64,
    /// Records after the signed head (they carry no signature at all yet).
    after_head: u64,
}

impl Open {
    /// `Some` when the only fault of `rep` is a missing closing checkpoint at the end and
    /// the anchor found the trail holding its head. Without a store, or when the trail
    /// does not hold its head, an open trail cannot be told from a truncated one.
    fn of(rep: &VerifyReport, anchor: &Anchor) -> Option<Open> {
        let bad = rep.first_bad.as_ref()?;
        // Only a trail read whole, every line checked, whose one fault is the missing
        // closing checkpoint; never a torn or damaged line.
        if bad.kind != Tamper::Truncated || !rep.open_tail || !anchor.ok {
            return None;
        }
        let head = anchor.head.as_ref()?;
        if !matches!(anchor.check.as_ref()?, HeadCheck::Extends { .. }) {
            return None;
        }
        // Every record of the trail (from the first one checked) against the head's.
        let trail_size = rep.starts_at.saturating_add(rep.records);
        Some(Open {
            after_checkpoint: rep.unsealed,
            after_head: trail_size.saturating_sub(head.size),
        })
    }

    /// Records after the signed head are covered by no signature: nothing vouches for
    /// them (a writer killed between a record and storing its head leaves one; anyone can
    /// append chained records without the key).
    fn vouched(&self) -> bool {
        self.after_head == 0
    }
}

impl Checked {
    fn ok(&self) -> bool {
        (self.rep.ok || self.open.as_ref().is_some_and(Open::vouched)) && self.anchor.ok
    }

    fn to_json(&self) -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(&self.rep)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("anchor".into(), serde_json::to_value(&self.anchor)?);
            obj.insert("ok".into(), serde_json::Value::Bool(self.ok()));
            if let Some(open) = &self.open {
                obj.insert("open".into(), serde_json::to_value(open)?);
                obj.insert("first_bad".into(), serde_json::Value::Null);
            }
        }
        Ok(v)
    }
}

/// The files of the trail whose active file is `base`, oldest first.
fn files_of(base: &Path) -> Result<Vec<PathBuf>> {
    let t = sandboxio_gateway::layers::audit::trail_files(base)?;
    Ok(if t.is_empty() {
        vec![base.to_path_buf()]
    } else {
        t
    })
}

/// A trail file that is there but cannot be read (no permission, a FIFO, a device, a
/// directory) is an input error, not evidence of tampering: refused with the file named,
/// without blocking on a FIFO. A missing file is left to the check (a deleted trail is
/// what the signed head catches).
fn readable(path: &Path) -> Result<(), CliError> {
    let err = |source: std::io::Error| CliError::ReadInput {
        flag: "audit verify TRAIL",
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e)),
        Ok(_) => sandboxio_core::fileread::open_regular(path)
            .map(drop)
            .map_err(err),
    }
}

/// The first bad line, for people.
fn describe_bad(b: &BadRecord) -> String {
    let kind = match b.kind {
        Tamper::Malformed => "a line that does not parse",
        Tamper::Edited => "a record edited",
        Tamper::Missing => "records missing",
        Tamper::OutOfOrder => "records out of order or inserted",
        Tamper::ChainBroken => "the hash chain broken",
        Tamper::CheckpointMismatch => "a checkpoint that does not match its records",
        Tamper::BadSignature => "a checkpoint signature that does not verify",
        Tamper::Truncated => "the trail cut short",
        Tamper::Unreadable => "a file that cannot be read",
    };
    format!(
        "{kind} in `{}` at line {}{}: {}",
        b.file.display(),
        b.line,
        b.seq.map(|s| format!(" (seq {s})")).unwrap_or_default(),
        b.why
    )
}

/// A head the store keeps that no given trail holds.
#[derive(Debug, Serialize)]
struct Unheld {
    state_db: String,
    #[serde(flatten)]
    kept: KeptHead,
}

pub fn verify(
    json: bool,
    key_files: &[PathBuf],
    store: &StoreArg,
    all: bool,
    files: &[PathBuf],
) -> Result<i32> {
    let mut keys: Vec<VerifyingKey> = Vec::new();
    for k in key_files {
        keys.extend(sandboxio_gateway::layers::audit::load_public_keys(k)?);
    }
    // Each store is read once, however many trails it anchors.
    let mut stores: Vec<(String, TrailAnchors)> = Vec::new();
    let mut checked = Vec::new();
    let mut seen = BTreeSet::new();
    for base in files {
        if !seen.insert(sandboxio_gateway::layers::audit::trail_id(base)) {
            continue;
        }
        let paths = files_of(base)?;
        for p in &paths {
            readable(p)?;
        }
        let rep = sandboxio_gateway::layers::audit::verify_keys(&paths, &keys);
        let at = match store.source(base, rep.records)? {
            Some(src) => {
                let name = src.describe();
                match stores.iter().position(|(n, _)| *n == name) {
                    Some(i) => Some(i),
                    None => {
                        stores.push((name, read_anchors(&src, base)?));
                        Some(stores.len() - 1)
                    }
                }
            }
            None => None,
        };
        let anchor = anchor::check(
            base,
            &paths,
            rep.records,
            at.map(|i| (stores[i].0.clone(), &stores[i].1)),
            &keys,
            store.unanchored_why(),
        );
        let open = Open::of(&rep, &anchor);
        checked.push(Checked {
            file: base.clone(),
            rep,
            anchor,
            open,
        });
    }
    let used: BTreeSet<_> = checked.iter().filter_map(|c| c.anchor.used()).collect();
    let unheld: Vec<Unheld> = if all {
        stores
            .iter()
            .flat_map(|(name, a)| {
                a.heads
                    .iter()
                    .filter(|k| !used.contains(&(k.node.clone(), k.head.trail.clone())))
                    .map(|k| Unheld {
                        state_db: name.clone(),
                        kept: k.clone(),
                    })
            })
            .collect()
    } else {
        Vec::new()
    };
    let ok = checked.iter().all(Checked::ok) && unheld.is_empty();
    if json {
        let v = match checked.as_slice() {
            [one] if !all => one.to_json()?,
            _ => serde_json::json!({
                "ok": ok,
                "trails": checked
                    .iter()
                    .map(|c| {
                        let mut v = c.to_json()?;
                        if let Some(o) = v.as_object_mut() {
                            o.insert("file".into(), serde_json::to_value(&c.file)?);
                        }
                        Ok(v)
                    })
                    .collect::<Result<Vec<_>>>()?,
                "unheld_heads": unheld,
            }),
        };
        outln!("{}", crate::out::pretty(&v)?)?;
    } else {
        let several = checked.len() > 1;
        for c in &checked {
            let prefix = if several {
                format!("`{}`: ", c.file.display())
            } else {
                String::new()
            };
            print_human(&prefix, c)?;
        }
        for u in &unheld {
            outln!(
                "TAMPERED: `{}` keeps a signed head for trail `{}`{} ({} record(s)) that none \
                 of the given trails holds: a trail was left out, deleted or renamed",
                u.state_db,
                u.kept.head.trail,
                u.kept
                    .node
                    .as_deref()
                    .map(|n| format!(" on node `{n}`"))
                    .unwrap_or_default(),
                u.kept.head.size
            )?;
        }
    }
    Ok(if ok { exit::OK } else { exit::FAILURE })
}

fn print_human(prefix: &str, c: &Checked) -> Result<(), CliError> {
    let (rep, anchor) = (&c.rep, &c.anchor);
    if !anchor.ok {
        if let Some(b) = &rep.first_bad {
            return outln!("{prefix}TAMPERED: {}", describe_bad(b));
        }
        return outln!("{prefix}TAMPERED: {}", anchor.why);
    }
    if let Some(open) = c.open.as_ref().filter(|o| !o.vouched()) {
        return outln!(
            "{prefix}UNVERIFIED: {} record(s) after the signed head are covered by no \
             signature (the trail is not closed: a writer killed between a record and its \
             head leaves one; anyone can append chained records without the key); {}",
            open.after_head,
            anchor.why
        );
    }
    let signatures = if rep.signatures_checked {
        "checked"
    } else {
        "not checked (no --key)"
    };
    if let Some(open) = &c.open {
        return outln!(
            "{prefix}ok (open): {} record(s), {} checkpoint(s) in {} file(s); signatures {}; \
             not closed: a writer is still running, or one stopped without closing (the next \
             start seals it); {}; {} record(s) after the last checkpoint, all covered by the \
             signed head",
            rep.records,
            rep.checkpoints,
            rep.files,
            signatures,
            anchor.why,
            open.after_checkpoint
        );
    }
    if let Some(b) = &rep.first_bad {
        return outln!("{prefix}TAMPERED: {}", describe_bad(b));
    }
    outln!(
        "{prefix}ok: {} record(s), {} checkpoint(s) in {} file(s); signatures {}; {}; {}",
        rep.records,
        rep.checkpoints,
        rep.files,
        signatures,
        if rep.sealed {
            "sealed by a closing checkpoint"
        } else {
            "not sealed (still open, or truncated after the last checkpoint)"
        },
        anchor.why
    )
}
