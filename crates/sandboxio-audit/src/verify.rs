//! Offline verification of a (possibly rotated) trail.
//!
//! Walks every line in order and reports the FIRST problem:
//!
//! | tampering | how it shows |
//! |---|---|
//! | a record edited | its bytes no longer hash to its `hash` (`Edited`); if the attacker also recomputed the hash, the next record's `prev_hash` no longer matches (`ChainBroken`) |
//! | a record deleted | the next record's `seq` skips (`Missing`) |
//! | a record inserted | its `seq` repeats or its `prev_hash` does not match (`OutOfOrder` / `ChainBroken`) |
//! | records reordered | a `seq` out of order (`OutOfOrder`) |
//! | records cut before a checkpoint | the checkpoint's `tree_size` or root does not match the records before it (`CheckpointMismatch`) |
//! | the tail truncated | the trail does not end with a `close` checkpoint covering every record (`Truncated`) |
//! | a checkpoint forged | with the public key: its signature does not verify (`BadSignature`) |
//!
//! Without a public key, signatures are not checked (`signatures_checked = false`): the
//! chain and Merkle roots still catch accidental damage and naive edits, but someone who
//! rewrites the whole file consistently, or relabels a checkpoint as `close`, is only caught
//! with the key.

use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;
use serde::Serialize;

use crate::chain::{parse_line, TrailLine, GENESIS};
use crate::checkpoint::{CheckpointReason, Merkle};

/// What is wrong at the first bad line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tamper {
    /// The line does not parse.
    Malformed,
    /// The record's bytes do not match its hash.
    Edited,
    /// `seq` jumps forward: records are missing before this one.
    Missing,
    /// `seq` goes back or repeats: a record was inserted or records were reordered.
    OutOfOrder,
    /// `prev_hash` is not the previous record's hash.
    ChainBroken,
    /// A checkpoint's size, root or last hash does not match the records before it.
    CheckpointMismatch,
    /// A checkpoint's signature does not verify under the given key.
    BadSignature,
    /// The trail does not end with a `close` checkpoint covering all records.
    Truncated,
    /// No files, or a file that cannot be read.
    Unreadable,
}

/// The first bad line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    pub file: PathBuf,
    /// 1-based; for `Truncated`, the line after the last one.
    pub line: u64,
    /// The record's seq, or the expected seq when the line is not a record.
    pub seq: Option<u64>,
    pub kind: Tamper,
    pub why: String,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub files: usize,
    /// Records checked.
    pub records: u64,
    pub checkpoints: u64,
    /// Whether checkpoint signatures were checked (a public key was given).
    pub signatures_checked: bool,
    /// The trail ends with a `close` checkpoint covering every record.
    pub sealed: bool,
    /// Records after the last checkpoint (0 for a sealed trail): those no checkpoint's
    /// signature covers yet.
    pub unsealed: u64,
    /// Every line was checked and the only fault is the missing closing checkpoint at the
    /// end (a writer still running, or stopped without closing). Never set for a torn or
    /// damaged line: the trail could not be read whole.
    pub open_tail: bool,
    /// The seq of the first record checked (non-zero when verifying from a later file,
    /// anchored on its opening checkpoint).
    pub starts_at: u64,
    pub first_bad: Option<BadRecord>,
}

impl VerifyReport {
    fn fail(mut self, bad: BadRecord) -> VerifyReport {
        self.ok = false;
        self.first_bad = Some(bad);
        self
    }
}

/// Verifies the files of one trail, oldest first (see [`crate::reader::trail_files`]).
/// Works offline; never panics on any input.
pub fn verify<P: AsRef<Path>>(paths: &[P], public_key: Option<&VerifyingKey>) -> VerifyReport {
    verify_keys(
        paths,
        public_key.map(std::slice::from_ref).unwrap_or_default(),
    )
}

/// Like [`verify`] with several public keys (a trail whose key was rotated): each
/// checkpoint must verify under the key its key id names. No keys: signatures unchecked.
pub fn verify_keys<P: AsRef<Path>>(paths: &[P], public_keys: &[VerifyingKey]) -> VerifyReport {
    let public_key = (!public_keys.is_empty()).then_some(public_keys);
    let mut rep = VerifyReport {
        ok: true,
        files: paths.len(),
        records: 0,
        checkpoints: 0,
        signatures_checked: public_key.is_some(),
        sealed: false,
        unsealed: 0,
        open_tail: false,
        starts_at: 0,
        first_bad: None,
    };
    let Some(last_path) = paths.last().map(|p| p.as_ref().to_path_buf()) else {
        return rep.fail(BadRecord {
            file: PathBuf::new(),
            line: 0,
            seq: None,
            kind: Tamper::Unreadable,
            why: "no trail files given".into(),
        });
    };
    let mut merkle = Merkle::new();
    let mut prev = GENESIS;
    let mut seen_any = false;
    let mut last_checkpoint: Option<(CheckpointReason, u64)> = None;
    let mut last_line_was_close = false;
    let mut last_line_no = 0u64;
    for p in paths {
        let path = p.as_ref();
        let text = match sandboxio_core::fileread::read_regular_whole(path) {
            Ok(b) => b,
            Err(e) => {
                return rep.fail(BadRecord {
                    file: path.to_path_buf(),
                    line: 0,
                    seq: Some(merkle.size()),
                    kind: Tamper::Unreadable,
                    why: format!("cannot read: {e}"),
                })
            }
        };
        let text = String::from_utf8_lossy(&text);
        if !text.is_empty() && !text.ends_with('\n') {
            let n = text.lines().count() as u64;
            return rep.fail(BadRecord {
                file: path.to_path_buf(),
                line: n,
                seq: Some(merkle.size()),
                kind: Tamper::Truncated,
                why: "the file ends in the middle of a line".into(),
            });
        }
        last_line_no = 0;
        for (i, l) in text.lines().enumerate() {
            let line = i as u64 + 1;
            last_line_no = line;
            let bad = |kind: Tamper, seq: Option<u64>, why: String| BadRecord {
                file: path.to_path_buf(),
                line,
                seq,
                kind,
                why,
            };
            let parsed = match parse_line(l) {
                Ok(x) => x,
                Err(why) => return rep.fail(bad(Tamper::Malformed, Some(merkle.size()), why)),
            };
            match parsed {
                TrailLine::Record(r) => {
                    last_line_was_close = false;
                    let expected = merkle.size();
                    if r.computed_hash != r.hash {
                        return rep.fail(bad(
                            Tamper::Edited,
                            Some(r.seq),
                            "the record's content does not match its hash (edited)".into(),
                        ));
                    }
                    if r.seq > expected {
                        return rep.fail(bad(
                            Tamper::Missing,
                            Some(r.seq),
                            format!(
                                "expected seq {expected}, found {}: {} record(s) missing (deleted or reordered)",
                                r.seq,
                                r.seq - expected
                            ),
                        ));
                    }
                    if r.seq < expected {
                        return rep.fail(bad(
                            Tamper::OutOfOrder,
                            Some(r.seq),
                            format!(
                                "expected seq {expected}, found {} (inserted or reordered)",
                                r.seq
                            ),
                        ));
                    }
                    if r.prev_hash != prev {
                        return rep.fail(bad(
                            Tamper::ChainBroken,
                            Some(r.seq),
                            "prev_hash is not the previous record's hash (previous record \
                             rewritten, or this one inserted)"
                                .into(),
                        ));
                    }
                    merkle.push(&r.hash);
                    prev = r.hash;
                    rep.records += 1;
                    seen_any = true;
                }
                TrailLine::Checkpoint(cp) => {
                    rep.checkpoints += 1;
                    if let Some(keys) = public_key {
                        if !keys.iter().any(|k| cp.verify_signature(k)) {
                            return rep.fail(bad(
                                Tamper::BadSignature,
                                Some(merkle.size()),
                                "checkpoint signature does not verify under the given key".into(),
                            ));
                        }
                    }
                    // A trail verified from a later file starts at that file's opening
                    // checkpoint.
                    if !seen_any && merkle.size() == 0 && cp.tree_size > 0 {
                        match (cp.merkle(), cp.last_hash_bytes()) {
                            (Some(m), Some(h)) => {
                                merkle = m;
                                prev = h;
                                rep.starts_at = cp.tree_size;
                            }
                            _ => {
                                return rep.fail(bad(
                                    Tamper::CheckpointMismatch,
                                    Some(cp.tree_size),
                                    "checkpoint frontier does not match its root".into(),
                                ))
                            }
                        }
                    }
                    seen_any = true;
                    let root = base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        merkle.root(),
                    );
                    if cp.tree_size != merkle.size() {
                        let why = if cp.tree_size > merkle.size() {
                            format!(
                                "checkpoint covers {} records but only {} precede it \
                                 (records removed before it)",
                                cp.tree_size,
                                merkle.size()
                            )
                        } else {
                            format!(
                                "checkpoint covers {} records but {} precede it \
                                 (records added before it)",
                                cp.tree_size,
                                merkle.size()
                            )
                        };
                        return rep.fail(bad(Tamper::CheckpointMismatch, Some(merkle.size()), why));
                    }
                    if cp.root_hash != root || cp.last_hash_bytes() != Some(prev) {
                        return rep.fail(bad(
                            Tamper::CheckpointMismatch,
                            Some(merkle.size()),
                            "checkpoint root does not match the records before it".into(),
                        ));
                    }
                    last_checkpoint = Some((cp.reason, cp.tree_size));
                    last_line_was_close = cp.reason == CheckpointReason::Close;
                }
            }
        }
    }
    if last_line_was_close {
        rep.sealed = true;
        return rep;
    }
    rep.unsealed = merkle
        .size()
        .saturating_sub(last_checkpoint.map(|(_, size)| size).unwrap_or(0));
    rep.open_tail = true;
    let why = match last_checkpoint {
        Some((reason, size)) => format!(
            "the trail does not end with a closing checkpoint: the last checkpoint \
             ({}) covers {size} record(s), {} record(s) follow it; the tail was truncated \
             or the writer stopped without closing",
            reason.as_str(),
            merkle.size().saturating_sub(size)
        ),
        None => "the trail has no checkpoint at all".into(),
    };
    rep.fail(BadRecord {
        file: last_path,
        line: last_line_no + 1,
        seq: Some(merkle.size()),
        kind: Tamper::Truncated,
        why,
    })
}
