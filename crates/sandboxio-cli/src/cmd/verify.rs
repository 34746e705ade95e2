//! `sandboxio audit verify`: the trail on its own (chain, checkpoints, signatures), then
//! against the signed head kept in the state database, which catches what the file alone
//! cannot show: a deleted file, whole runs cut from the end, an older copy swapped in.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use sandboxio_audit::{HeadCheck, SignedHead, VerifyReport, VerifyingKey};
use sandboxio_gateway::store::{AnchorBreak, SqliteStore, Store};
use serde::Serialize;

use crate::error::CliError;
use crate::exit;
use crate::out::outln;

/// How the trail compares with its anchor in the state database.
#[derive(Debug, Serialize)]
struct Anchor {
    /// The state database read (none found: the trail could not be compared).
    state_db: Option<PathBuf>,
    trail: String,
    head: Option<SignedHead>,
    check: Option<HeadCheck>,
    /// Starts that found this trail not holding its head (kept as evidence).
    breaks: Vec<AnchorBreak>,
    /// Whether the head's signature verified (`None`: no key given, not checked).
    head_signature: Option<bool>,
    ok: bool,
    why: String,
}

/// The state database to read the head from: `--state-dir`, else the trail's directory
/// when it holds one (the default layout).
fn state_db(base: &Path, state_dir: Option<&Path>) -> Result<Option<PathBuf>> {
    if let Some(d) = state_dir {
        let db = d.join("state.db");
        if !db.is_file() {
            bail!("no state database at `{}`", db.display());
        }
        return Ok(Some(db));
    }
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let db = dir.join("state.db");
    Ok(db.is_file().then_some(db))
}

fn anchor(
    base: &Path,
    paths: &[PathBuf],
    state_dir: Option<&Path>,
    keys: &[VerifyingKey],
) -> Result<Anchor> {
    let trail = sandboxio_audit::trail_id(base);
    let mut a = Anchor {
        state_db: state_db(base, state_dir)?,
        trail: trail.clone(),
        head: None,
        check: None,
        breaks: Vec::new(),
        head_signature: None,
        ok: true,
        why: String::new(),
    };
    let Some(db) = &a.state_db else {
        a.why =
            "not compared with a signed head (no state database found; pass --state-dir)".into();
        return Ok(a);
    };
    let store = SqliteStore::open_read_only(db)?;
    a.breaks = store
        .anchor_breaks()?
        .into_iter()
        .filter(|b| b.trail == trail)
        .collect();
    a.head = store.heads()?.into_iter().find(|h| h.trail == trail);
    let Some(head) = &a.head else {
        a.ok = a.breaks.is_empty();
        a.why = "the state database keeps no signed head for this trail".into();
        return Ok(a.finish_breaks());
    };
    if !keys.is_empty() {
        let good = head.verify_signature(keys);
        a.head_signature = Some(good);
        if !good {
            a.ok = false;
            a.why = "the signed head's signature does not verify under the given key".into();
            return Ok(a);
        }
    }
    let check = sandboxio_audit::check_head(paths, head);
    a.ok = check.ok() && a.breaks.is_empty();
    a.why = check.describe();
    a.check = Some(check);
    Ok(a.finish_breaks())
}

impl Anchor {
    fn finish_breaks(mut self) -> Anchor {
        if let Some(b) = self.breaks.last() {
            self.why = format!(
                "{} earlier start(s) found the trail not holding its signed head; the last, at {}: {}",
                self.breaks.len(),
                b.at.format("%Y-%m-%dT%H:%M:%SZ"),
                b.found
            );
        }
        self
    }
}

pub fn verify(
    json: bool,
    key: Option<&Path>,
    state_dir: Option<&Path>,
    files: &[PathBuf],
) -> Result<i32> {
    let keys = key
        .map(sandboxio_audit::load_public_keys)
        .transpose()?
        .unwrap_or_default();
    let mut paths = Vec::new();
    for f in files {
        let t = sandboxio_audit::trail_files(f)?;
        if t.is_empty() {
            paths.push(f.clone());
        } else {
            paths.extend(t);
        }
    }
    paths.dedup();
    let rep = sandboxio_audit::verify_keys(&paths, &keys);
    // The anchor of the (first) trail named: its head is kept under its active file's name.
    let anchor = match files.first() {
        Some(base) => Some(anchor(base, &paths, state_dir, &keys)?),
        None => None,
    };
    let anchored_ok = anchor.as_ref().is_none_or(|a| a.ok);
    let ok = rep.ok && anchored_ok;
    if json {
        let mut v = serde_json::to_value(&rep)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("anchor".into(), serde_json::to_value(&anchor)?);
            obj.insert("ok".into(), serde_json::Value::Bool(ok));
        }
        outln!("{}", crate::out::pretty(&v)?)?;
    } else {
        print_human(&rep, anchor.as_ref())?;
    }
    Ok(if ok { exit::OK } else { exit::FAILURE })
}

fn print_human(rep: &VerifyReport, anchor: Option<&Anchor>) -> Result<(), CliError> {
    if let Some(b) = &rep.first_bad {
        return outln!("TAMPERED: {b:?}");
    }
    if let Some(a) = anchor.filter(|a| !a.ok) {
        return outln!("TAMPERED: {}", a.why);
    }
    outln!(
        "ok: {} record(s), {} checkpoint(s) in {} file(s); signatures {}; {}; {}",
        rep.records,
        rep.checkpoints,
        rep.files,
        if rep.signatures_checked {
            "checked"
        } else {
            "not checked (no --key)"
        },
        if rep.sealed {
            "sealed by a closing checkpoint"
        } else {
            "not sealed (still open, or truncated after the last checkpoint)"
        },
        anchor.map_or("not compared with a signed head", |a| a.why.as_str())
    )
}
