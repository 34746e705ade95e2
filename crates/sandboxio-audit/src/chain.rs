//! The hash chain: how one record line of the file trail is written and read back.
//!
//! A record line is the event's JSON object with three more members:
//!
//! ```text
//! {"seq":7,"prev_hash":"<64 hex>", ...event fields... ,"hash":"<64 hex>"}
//! ```
//!
//! `hash` = SHA-256(`RECORD_DOMAIN` || body), where body is the exact line bytes with the
//! trailing `,"hash":"…"` member removed (so the hash is over the bytes actually written,
//! never over a re-serialisation). `prev_hash` is the previous record's `hash`; the first
//! record of a trail has 32 zero bytes (`GENESIS`). Checkpoint lines (`{"checkpoint":…}`)
//! are not part of the chain; they sign the Merkle root over record hashes.

use sha2::{Digest, Sha256};

use crate::checkpoint::Checkpoint;
use crate::event::AuditEvent;

/// The `prev_hash` of the first record of a trail.
pub const GENESIS: [u8; 32] = [0u8; 32];
/// Domain separation for record hashes.
pub const RECORD_DOMAIN: &[u8] = b"sandboxio-audit/record/v1\n";

const HASH_SUFFIX_PREFIX: &str = ",\"hash\":\"";
/// `,"hash":"` + 64 hex + `"}`.
const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;

pub(crate) fn record_hash(body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(RECORD_DOMAIN);
    h.update(body);
    h.finalize().into()
}

/// Renders a record line (without newline) for an event JSON object; returns it and its hash.
pub(crate) fn render_record(seq: u64, prev: &[u8; 32], event_json: &str) -> (String, [u8; 32]) {
    let rest = event_json.strip_prefix('{').unwrap_or(event_json);
    let mut body = String::with_capacity(event_json.len() + 96 + HASH_SUFFIX_LEN);
    body.push_str("{\"seq\":");
    body.push_str(&seq.to_string());
    body.push_str(",\"prev_hash\":\"");
    body.push_str(&hex::encode(prev));
    body.push_str("\",");
    body.push_str(rest);
    let hash = record_hash(body.as_bytes());
    body.pop(); // the closing brace
    body.push_str(HASH_SUFFIX_PREFIX);
    body.push_str(&hex::encode(hash));
    body.push_str("\"}");
    (body, hash)
}

/// One parsed line of a trail file.
#[derive(Debug, Clone)]
pub enum TrailLine {
    Record(Box<RecordLine>),
    Checkpoint(Box<Checkpoint>),
}

/// A parsed record line.
#[derive(Debug, Clone)]
pub struct RecordLine {
    pub seq: u64,
    pub prev_hash: [u8; 32],
    /// The hash written in the line.
    pub hash: [u8; 32],
    /// The hash recomputed from the line's bytes; differs from `hash` when edited.
    pub computed_hash: [u8; 32],
    pub event: AuditEvent,
}

#[derive(serde::Deserialize)]
struct RecordHead {
    seq: u64,
    prev_hash: String,
}

#[derive(serde::Deserialize)]
struct CheckpointWrap {
    checkpoint: Checkpoint,
}

fn hash32(s: &str) -> Result<[u8; 32], String> {
    let v = hex::decode(s).map_err(|e| format!("bad hash `{s}`: {e}"))?;
    v.try_into()
        .map_err(|_| format!("bad hash `{s}`: not 32 bytes"))
}

/// Parses one line (without newline). Errors are human-readable reasons.
pub fn parse_line(line: &str) -> Result<TrailLine, String> {
    if line.starts_with("{\"checkpoint\":") {
        let w: CheckpointWrap =
            serde_json::from_str(line).map_err(|e| format!("bad checkpoint line: {e}"))?;
        return Ok(TrailLine::Checkpoint(Box::new(w.checkpoint)));
    }
    if line.len() < HASH_SUFFIX_LEN + 2 || !line.ends_with("\"}") {
        return Err("not a record line".into());
    }
    let cut = line.len() - HASH_SUFFIX_LEN;
    let (head, suffix) = (line.get(..cut), line.get(cut..));
    let (Some(head), Some(suffix)) = (head, suffix) else {
        return Err("not a record line".into());
    };
    let Some(hash_hex) = suffix
        .strip_prefix(HASH_SUFFIX_PREFIX)
        .and_then(|s| s.strip_suffix("\"}"))
    else {
        return Err("record line does not end with its hash".into());
    };
    let hash = hash32(hash_hex)?;
    let mut body = String::with_capacity(head.len() + 1);
    body.push_str(head);
    body.push('}');
    let computed_hash = record_hash(body.as_bytes());
    let h: RecordHead = serde_json::from_str(&body).map_err(|e| format!("bad record line: {e}"))?;
    let event: AuditEvent =
        serde_json::from_str(&body).map_err(|e| format!("bad audit event: {e}"))?;
    Ok(TrailLine::Record(Box::new(RecordLine {
        seq: h.seq,
        prev_hash: hash32(&h.prev_hash)?,
        hash,
        computed_hash,
        event,
    })))
}
