//! Continuing an existing trail file: recover the chain state from its last checkpoint and
//! the records after it, and move a torn or garbage LAST line aside instead of refusing
//! every later write. Only the last line: damage before it is tampering, and stays an error.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;
use sandboxio_core::{Layer, OperationRecord, OperationStatus, Verdict};

use crate::chain::{self, TrailLine, GENESIS};
use crate::checkpoint::Merkle;
use crate::error::AuditError;
use crate::event::AuditEvent;
use crate::sink::file_mode::write_new_private;

/// The event of the record written after a line was moved aside.
pub const REPAIR_EVENT: &str = "audit.trail_repaired";

/// The chain state of an active file, and what was moved aside to get it.
pub(crate) struct Recovered {
    pub merkle: Merkle,
    pub prev: [u8; 32],
    /// Bytes of the active file after the repair.
    pub bytes: u64,
    pub moved: Option<MovedAside>,
    /// The file's last line is a checkpoint (signed by a trusted key) of exactly this
    /// state: a sink continuing it has nothing new to sign.
    pub ends_with_checkpoint: bool,
    /// A torn or bad last line that could not be moved aside (a full disk): the file is
    /// left as it was (`bytes` is its whole length), the chain state is the one before
    /// that line, and nothing may be appended until a later try moves it aside.
    pub unrepaired: Option<String>,
}

/// What a scan found: the chain state and whether the last line is its checkpoint.
struct Scanned {
    merkle: Merkle,
    prev: [u8; 32],
    /// A checkpoint was found (else the state was built from the genesis).
    from_checkpoint: bool,
    /// Records after the last checkpoint.
    records_after: u64,
}

/// How much of the end of the file is read first: enough to hold the last checkpoint and
/// the records after it in the usual case (a process that closed its trail cleanly left a
/// checkpoint as its last line; a record is about 2 KB); doubled while no checkpoint is in
/// it, and the whole file is read when none is near the end. Every opening reads and
/// scans this much (64 KB was about a tenth of a denied CLI run's CPU).
const TAIL_BYTES: u64 = 16 * 1024;

/// A last line that was cut from the trail and kept in a sibling file.
#[derive(Debug, Clone)]
pub(crate) struct MovedAside {
    pub to: PathBuf,
    pub bytes: u64,
    pub why: String,
}

/// Where a moved-aside line goes: `<path>.torn-<UTC time>` (never a rotated file's name).
fn sibling(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(
        ".torn-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ")
    ));
    PathBuf::from(s)
}

/// Reads the active file and recovers its chain state. `trusted` are the keys the last
/// checkpoint may be signed with (empty: signatures are not checked).
pub(crate) fn recover(
    path: &Path,
    file: &mut File,
    trusted: &[VerifyingKey],
    origin: &str,
) -> Result<Recovered, AuditError> {
    if let Some(r) = recover_from_tail(path, file, trusted, origin)? {
        return Ok(r);
    }
    let mut buf = Vec::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut buf))
        .map_err(|e| AuditError::io(path, e))?;
    if buf.is_empty() {
        return Ok(Recovered {
            unrepaired: None,
            merkle: Merkle::new(),
            prev: GENESIS,
            bytes: 0,
            moved: None,
            ends_with_checkpoint: false,
        });
    }
    // A last line without its newline was torn by a crash: never acknowledged, moved aside.
    if !buf.ends_with(b"\n") {
        let keep = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let moved = match move_aside(
            path,
            file,
            &buf,
            keep,
            "the last line is incomplete (torn write)",
        ) {
            Ok(m) => m,
            Err(e) => return unrepaired(path, &buf, keep, trusted, origin, e),
        };
        buf.truncate(keep);
        let sc = scan(path, &buf, trusted, origin).map_err(|(_, e)| e)?;
        return Ok(Recovered {
            unrepaired: None,
            merkle: sc.merkle,
            prev: sc.prev,
            bytes: keep as u64,
            moved: Some(moved),
            ends_with_checkpoint: false,
        });
    }
    match scan(path, &buf, trusted, origin) {
        Ok(sc) => Ok(Recovered {
            unrepaired: None,
            ends_with_checkpoint: sc.from_checkpoint && sc.records_after == 0,
            merkle: sc.merkle,
            prev: sc.prev,
            bytes: buf.len() as u64,
            moved: None,
        }),
        Err((Some(bad), e)) if bad.is_last => {
            let why = format!("the last line is not a record that chains ({})", bad.why);
            let moved = match move_aside(path, file, &buf, bad.start, &why) {
                Ok(m) => m,
                Err(e) => return unrepaired(path, &buf, bad.start, trusted, origin, e),
            };
            buf.truncate(bad.start);
            let sc = scan(path, &buf, trusted, origin).map_err(|(_, _)| e)?;
            Ok(Recovered {
                unrepaired: None,
                merkle: sc.merkle,
                prev: sc.prev,
                bytes: bad.start as u64,
                moved: Some(moved),
                ends_with_checkpoint: false,
            })
        }
        Err((_, e)) => Err(e),
    }
}

/// The state before `buf[keep..]`, a last line that could not be moved aside (`e`): the
/// file is left whole, and the caller appends nothing until a later try moves it aside.
fn unrepaired(
    path: &Path,
    buf: &[u8],
    keep: usize,
    trusted: &[VerifyingKey],
    origin: &str,
    e: AuditError,
) -> Result<Recovered, AuditError> {
    let sc =
        scan(path, buf.get(..keep).unwrap_or_default(), trusted, origin).map_err(|(_, e2)| e2)?;
    tracing::warn!(target: "sandboxio::audit", path = %path.display(), "the trail's last line needs moving aside and cannot be now ({e}); nothing is appended until it is");
    Ok(Recovered {
        merkle: sc.merkle,
        prev: sc.prev,
        bytes: buf.len() as u64,
        moved: None,
        ends_with_checkpoint: false,
        unrepaired: Some(e.to_string()),
    })
}

/// The usual case without reading the whole file: a file that ends with a complete line
/// and holds its last checkpoint, followed by records that chain, within its last
/// [`TAIL_BYTES`] (or more, doubling, up to a quarter of the file). `None` when that is
/// not so (no checkpoint near the end, a torn or bad line, a small file): the caller then
/// reads the whole file, which also gives exact line numbers in errors.
fn recover_from_tail(
    path: &Path,
    file: &mut File,
    trusted: &[VerifyingKey],
    origin: &str,
) -> Result<Option<Recovered>, AuditError> {
    let len = file
        .seek(SeekFrom::End(0))
        .map_err(|e| AuditError::io(path, e))?;
    let mut want = TAIL_BYTES;
    while want < len && want <= len / 4 {
        let start = len - want;
        let mut buf = Vec::with_capacity(want as usize);
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.by_ref().take(want).read_to_end(&mut buf))
            .map_err(|e| AuditError::io(path, e))?;
        if !buf.ends_with(b"\n") {
            return Ok(None);
        }
        // The first (partial) line is not ours to judge: start after it.
        let Some(cut) = buf.iter().position(|b| *b == b'\n') else {
            return Ok(None);
        };
        let lines = buf.get(cut + 1..).unwrap_or_default();
        match scan(path, lines, trusted, origin) {
            Ok(sc) if sc.from_checkpoint => {
                return Ok(Some(Recovered {
                    unrepaired: None,
                    ends_with_checkpoint: sc.records_after == 0,
                    merkle: sc.merkle,
                    prev: sc.prev,
                    bytes: len,
                    moved: None,
                }))
            }
            // No checkpoint in this part: look further back.
            Ok(_) => want *= 2,
            Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

/// Copies `buf[keep..]` to a private sibling file, then cuts it from the active file.
fn move_aside(
    path: &Path,
    file: &File,
    buf: &[u8],
    keep: usize,
    why: &str,
) -> Result<MovedAside, AuditError> {
    let tail = buf.get(keep..).unwrap_or_default();
    let to = sibling(path);
    write_new_private(&to, tail)?;
    file.set_len(keep as u64)
        .and_then(|_| file.sync_data())
        .map_err(|e| AuditError::io(path, e))?;
    tracing::warn!(
        target: "sandboxio::audit",
        path = %path.display(),
        moved_to = %to.display(),
        bytes = tail.len(),
        "audit trail: {why}; moved it aside"
    );
    Ok(MovedAside {
        to,
        bytes: tail.len() as u64,
        why: why.to_string(),
    })
}

/// A line that stopped the scan.
struct BadLine {
    /// Byte offset where the line starts.
    start: usize,
    is_last: bool,
    why: String,
}

/// Recovers (merkle, prev) from complete lines. On failure, says which line when it is a
/// line's own fault (unparseable, or a record that does not chain).
fn scan(
    path: &Path,
    buf: &[u8],
    trusted: &[VerifyingKey],
    origin: &str,
) -> Result<Scanned, (Option<BadLine>, AuditError)> {
    // (start offset, text or None when not UTF-8)
    let mut lines: Vec<(usize, Option<&str>)> = Vec::new();
    let mut start = 0usize;
    for (i, b) in buf.iter().enumerate() {
        if *b == b'\n' {
            let raw = buf.get(start..i).unwrap_or_default();
            lines.push((start, std::str::from_utf8(raw).ok()));
            start = i + 1;
        }
    }
    let n = lines.len();
    let broken = |i: usize, why: String| AuditError::ChainBroken {
        path: path.to_path_buf(),
        line: i as u64 + 1,
        why,
    };
    let mut first = 0usize;
    let mut from_checkpoint = false;
    let mut records_after = 0u64;
    let mut merkle = Merkle::new();
    let mut prev = GENESIS;
    for (i, (_, l)) in lines.iter().enumerate().rev() {
        let Some(l) = l else { continue };
        if let Ok(TrailLine::Checkpoint(cp)) = chain::parse_line(l) {
            let signed = trusted.is_empty() || trusted.iter().any(|k| cp.verify_signature(k));
            if !signed || cp.origin != origin {
                return Err((
                    None,
                    AuditError::BadCheckpointSignature {
                        path: path.to_path_buf(),
                        line: i as u64 + 1,
                    },
                ));
            }
            match (cp.merkle(), cp.last_hash_bytes()) {
                (Some(m), Some(h)) => {
                    merkle = m;
                    prev = h;
                }
                _ => {
                    return Err((
                        None,
                        broken(i, "checkpoint frontier does not match its root".into()),
                    ))
                }
            }
            first = i + 1;
            from_checkpoint = true;
            break;
        }
    }
    for (i, (off, l)) in lines.iter().enumerate().skip(first) {
        let bad = |why: String| {
            (
                Some(BadLine {
                    start: *off,
                    is_last: i + 1 == n,
                    why: why.clone(),
                }),
                broken(i, why),
            )
        };
        let Some(l) = l else {
            return Err(bad("the line is not UTF-8".into()));
        };
        match chain::parse_line(l) {
            Ok(TrailLine::Record(r)) => {
                if r.hash != r.computed_hash || r.seq != merkle.size() || r.prev_hash != prev {
                    return Err(bad(format!("record seq {} does not chain", r.seq)));
                }
                merkle.push(&r.hash);
                prev = r.hash;
                records_after += 1;
            }
            Ok(TrailLine::Checkpoint(_)) => {}
            Err(why) => return Err(bad(why)),
        }
    }
    Ok(Scanned {
        merkle,
        prev,
        from_checkpoint,
        records_after,
    })
}

/// The record that says a line was moved aside (written by the sink itself).
pub(crate) fn repair_event(m: &MovedAside) -> AuditEvent {
    let mut id = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut id);
    let mut rec = OperationRecord::new(hex::encode(id), REPAIR_EVENT);
    rec.backend = "audit".into();
    rec.status = OperationStatus::Warning;
    rec.verdict = Verdict::Allow;
    rec.layer = Layer::Record;
    rec.path = Some(m.to.display().to_string());
    rec.reason = format!(
        "{}: moved {} byte(s) to `{}`; the trail continues after the last good record",
        m.why,
        m.bytes,
        m.to.display()
    );
    AuditEvent::from_record(&rec, false)
}
