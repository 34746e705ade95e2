//! The signed head: the trail anchored outside itself.
//!
//! A trail can only prove what is in it: a deleted file, whole runs cut from its end or an
//! older copy swapped in still verify on their own. After each record the writer's head
//! (the number of records and the last record's hash, signed with the audit key) is kept
//! somewhere else (the gateway keeps it in its state store). [`check_head`] compares a
//! trail with a head: the trail must hold the record the head names, with that hash.
//!
//! The signed body is
//!
//! ```text
//! sandboxio-audit/head/v1\n<trail>\n<size>\nlast <hex last record hash>\n
//! ```
//!
//! where `<trail>` is [`trail_id`] of the active file.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::chain::{parse_line, TrailLine, GENESIS};
use crate::checkpoint::{key_id, AuditKey};

const HEAD_DOMAIN: &str = "sandboxio-audit/head/v1";

/// The last record of a trail as its writer saw it, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedHead {
    /// [`trail_id`] of the trail's active file.
    pub trail: String,
    /// Records written so far (the last record's seq + 1).
    pub size: u64,
    /// hex of the last record's hash (zeros for an empty trail).
    pub last_hash: String,
    pub origin: String,
    /// hex of the 4-byte key id of the signing key.
    pub key_id: String,
    /// base64 Ed25519 signature over [`SignedHead::body`].
    pub signature: String,
}

impl SignedHead {
    /// The head of `trail` before its first record (unsigned): checking a trail against it
    /// reads every record the trail holds.
    pub fn genesis(trail: String) -> SignedHead {
        SignedHead {
            trail,
            size: 0,
            last_hash: hex::encode(GENESIS),
            origin: String::new(),
            key_id: String::new(),
            signature: String::new(),
        }
    }

    pub fn body(&self) -> String {
        format!(
            "{HEAD_DOMAIN}\n{}\n{}\nlast {}\n",
            self.trail, self.size, self.last_hash
        )
    }

    pub(crate) fn sign(
        key: &AuditKey,
        origin: &str,
        trail: String,
        size: u64,
        last: &[u8; 32],
    ) -> SignedHead {
        let mut h = SignedHead {
            trail,
            size,
            last_hash: hex::encode(last),
            origin: origin.to_string(),
            key_id: key_id(origin, &key.verifying_key()),
            signature: String::new(),
        };
        h.signature = key.sign(&h.body());
        h
    }

    /// Whether one of `keys` (the one with this head's key id) signed it.
    pub fn verify_signature(&self, keys: &[VerifyingKey]) -> bool {
        let Some(k) = keys.iter().find(|k| key_id(&self.origin, k) == self.key_id) else {
            return false;
        };
        let Ok(raw) = STANDARD.decode(&self.signature) else {
            return false;
        };
        let Ok(sig) = Signature::from_slice(&raw) else {
            return false;
        };
        k.verify(self.body().as_bytes(), &sig).is_ok()
    }
}

/// A stable name for a trail: the canonical directory of its active file plus the file
/// name (so the name survives the file being deleted, and `./a` and `/x/a` agree).
pub fn trail_id(active: &Path) -> String {
    let name = active.file_name().map(PathBuf::from).unwrap_or_default();
    let dir = match active.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&dir)
        .or_else(|_| std::path::absolute(&dir))
        .unwrap_or(dir);
    dir.join(name).display().to_string()
}

/// How a trail compares with a head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum HeadCheck {
    /// The trail holds the head's last record with the head's hash (and maybe more after).
    Extends { trail_size: u64 },
    /// The trail ends before the head's last record: runs cut from the end, the file
    /// deleted, or an older copy.
    Behind { trail_size: u64, head_size: u64 },
    /// The trail has a different record where the head's last record should be: the file
    /// was replaced (or rewritten from that point).
    Diverges { seq: u64 },
    /// The trail could not be read.
    Unreadable { why: String },
}

impl HeadCheck {
    pub fn ok(&self) -> bool {
        matches!(self, HeadCheck::Extends { .. })
    }

    /// One sentence for people.
    pub fn describe(&self) -> String {
        match self {
            HeadCheck::Extends { trail_size } => {
                format!("the trail ({trail_size} record(s)) holds its signed head")
            }
            HeadCheck::Behind {
                trail_size,
                head_size,
            } => format!(
                "the signed head says {head_size} record(s) were written but the trail holds \
                 {trail_size}: records were cut from the end, the file was deleted, or an older \
                 copy was put in its place"
            ),
            HeadCheck::Diverges { seq } => format!(
                "record {seq} of the trail is not the one the signed head names: the trail was \
                 replaced or rewritten"
            ),
            HeadCheck::Unreadable { why } => format!("the trail cannot be read: {why}"),
        }
    }
}

/// Compares the files of a trail (oldest first) with a head. Reads files newest first and
/// stops at the one holding the head's last record. Never panics on any input.
pub fn check_head<P: AsRef<Path>>(paths: &[P], head: &SignedHead) -> HeadCheck {
    let Some(want) = hex::decode(&head.last_hash)
        .ok()
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
    else {
        return HeadCheck::Unreadable {
            why: "the head's hash is not 32 bytes of hex".into(),
        };
    };
    let mut trail_size: Option<u64> = None;
    if head.size == 0 {
        return match trail_size_of(paths) {
            Ok(n) if want == GENESIS => HeadCheck::Extends { trail_size: n },
            Ok(_) => HeadCheck::Diverges { seq: 0 },
            Err(why) => HeadCheck::Unreadable { why },
        };
    }
    let target = head.size - 1;
    for p in paths.iter().rev() {
        let path = p.as_ref();
        let bytes = match trail_file(path) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(why) => return HeadCheck::Unreadable { why },
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut first_seq = None;
        for l in text.lines() {
            let Ok(TrailLine::Record(r)) = parse_line(l) else {
                continue;
            };
            first_seq.get_or_insert(r.seq);
            if trail_size.is_none_or(|n| r.seq + 1 > n) {
                trail_size = Some(r.seq + 1);
            }
            if r.seq == target {
                return if r.hash == want && r.computed_hash == want {
                    HeadCheck::Extends {
                        trail_size: trail_size.unwrap_or(head.size),
                    }
                } else {
                    HeadCheck::Diverges { seq: target }
                };
            }
        }
        if first_seq.is_some_and(|s| s < target) {
            // This file starts before the target and does not hold it.
            break;
        }
    }
    HeadCheck::Behind {
        trail_size: trail_size.unwrap_or(0),
        head_size: head.size,
    }
}

/// The records of a trail (its files oldest first) from record number `from` on, oldest
/// first: what was written after a head of `from` records. Reads files newest first and
/// stops at the one that starts at or before `from`; lines that are not records are skipped
/// (the chain's own check reports them). Never panics on any input.
pub fn records_from<P: AsRef<Path>>(
    paths: &[P],
    from: u64,
) -> Result<Vec<crate::event::AuditEvent>, String> {
    let mut out = Vec::new();
    for p in paths.iter().rev() {
        let path = p.as_ref();
        let Some(bytes) = trail_file(path)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut first_seq = None;
        for l in text.lines() {
            let Ok(TrailLine::Record(r)) = parse_line(l) else {
                continue;
            };
            first_seq.get_or_insert(r.seq);
            if r.seq >= from {
                out.push((r.seq, r.event));
            }
        }
        if first_seq.is_some_and(|s| s <= from) {
            break;
        }
    }
    out.sort_by_key(|(seq, _)| *seq);
    Ok(out.into_iter().map(|(_, e)| e).collect())
}

/// One file of a trail, read whole (a regular file only); `None` when it is not there.
fn trail_file(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match sandboxio_core::fileread::read_regular_whole(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("`{}`: {e}", path.display())),
    }
}

fn trail_size_of<P: AsRef<Path>>(paths: &[P]) -> Result<u64, String> {
    for p in paths.iter().rev() {
        let path = p.as_ref();
        let Some(bytes) = trail_file(path)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let last = text.lines().rev().find_map(|l| match parse_line(l) {
            Ok(TrailLine::Record(r)) => Some(r.seq + 1),
            Ok(TrailLine::Checkpoint(cp)) => Some(cp.tree_size),
            Err(_) => None,
        });
        if let Some(n) = last {
            return Ok(n);
        }
    }
    Ok(0)
}
