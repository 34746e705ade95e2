//! Signed checkpoints over the trail, in the spirit of C2SP `tlog-checkpoint`.
//!
//! A checkpoint commits to the number of records so far (`tree_size`) and the RFC 6962
//! Merkle tree hash over their record hashes (`root_hash`). The signed note body is
//!
//! ```text
//! <origin>\n<tree_size>\n<base64 root hash>\nreason <reason>\nlast <hex last record hash>\n
//! ```
//!
//! signed with Ed25519. The `reason` is signed, so a verifier holding the public key knows a
//! `close` checkpoint was written by the sink on clean close and not relabelled.
//! `frontier` (the roots of the perfect subtrees, left to right) lets a writer or verifier
//! continue from the checkpoint without re-reading earlier files; it is checked against
//! `root_hash` before use.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::AuditError;

/// The default checkpoint origin line.
pub const DEFAULT_ORIGIN: &str = "sandboxio-audit";

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointReason {
    /// The sink opened (or reopened) the trail.
    Open,
    /// Every `checkpoint_every` records.
    Periodic,
    /// Last line of a file that was rotated away.
    Rotate,
    /// The sink closed cleanly: a trail that ends with this is sealed.
    Close,
}

impl CheckpointReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            CheckpointReason::Open => "open",
            CheckpointReason::Periodic => "periodic",
            CheckpointReason::Rotate => "rotate",
            CheckpointReason::Close => "close",
        }
    }
}

/// One checkpoint line: `{"checkpoint":{...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub origin: String,
    pub tree_size: u64,
    /// base64 of the 32-byte Merkle root.
    pub root_hash: String,
    /// hex of the last record's hash (the `prev_hash` of the next record).
    pub last_hash: String,
    pub reason: CheckpointReason,
    pub ts: DateTime<Utc>,
    /// hex of the subtree roots, left to right.
    pub frontier: Vec<String>,
    /// hex of the 4-byte C2SP key id.
    pub key_id: String,
    /// base64 Ed25519 signature over [`Checkpoint::note_body`].
    pub signature: String,
}

impl Checkpoint {
    /// The signed text.
    pub fn note_body(&self) -> String {
        format!(
            "{}\n{}\n{}\nreason {}\nlast {}\n",
            self.origin,
            self.tree_size,
            self.root_hash,
            self.reason.as_str(),
            self.last_hash
        )
    }

    pub(crate) fn render(&self) -> Result<String, AuditError> {
        #[derive(Serialize)]
        struct Wrap<'a> {
            checkpoint: &'a Checkpoint,
        }
        serde_json::to_string(&Wrap { checkpoint: self })
            .map_err(|e| AuditError::Render { why: e.to_string() })
    }

    /// Whether the signature verifies under `key`.
    pub fn verify_signature(&self, key: &VerifyingKey) -> bool {
        if self.key_id != key_id(&self.origin, key) {
            return false;
        }
        let Ok(raw) = STANDARD.decode(&self.signature) else {
            return false;
        };
        let Ok(sig) = Signature::from_slice(&raw) else {
            return false;
        };
        key.verify(self.note_body().as_bytes(), &sig).is_ok()
    }

    /// The Merkle state this checkpoint commits to, when its frontier matches its root.
    pub fn merkle(&self) -> Option<Merkle> {
        let nodes: Option<Vec<[u8; 32]>> = self
            .frontier
            .iter()
            .map(|h| hex::decode(h).ok().and_then(|v| v.try_into().ok()))
            .collect();
        let m = Merkle::from_frontier(self.tree_size, nodes?)?;
        (STANDARD.encode(m.root()) == self.root_hash).then_some(m)
    }

    pub fn last_hash_bytes(&self) -> Option<[u8; 32]> {
        hex::decode(&self.last_hash).ok()?.try_into().ok()
    }
}

/// An incremental RFC 6962 Merkle tree hash over record hashes (leaf = the 32-byte hash).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merkle {
    size: u64,
    /// Roots of the perfect subtrees, left (largest) to right.
    nodes: Vec<[u8; 32]>,
}

fn leaf_hash(data: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

fn node_hash(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

impl Merkle {
    pub fn new() -> Self {
        Merkle::default()
    }

    fn from_frontier(size: u64, nodes: Vec<[u8; 32]>) -> Option<Merkle> {
        (size.count_ones() as usize == nodes.len()).then_some(Merkle { size, nodes })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn push(&mut self, leaf: &[u8; 32]) {
        let mut h = leaf_hash(leaf);
        // Each trailing one bit of the old size is a perfect subtree to merge with.
        let mut s = self.size;
        while s & 1 == 1 {
            match self.nodes.pop() {
                Some(left) => h = node_hash(&left, &h),
                None => break,
            }
            s >>= 1;
        }
        self.nodes.push(h);
        self.size += 1;
    }

    /// The Merkle tree hash (SHA-256 of the empty string for an empty tree).
    pub fn root(&self) -> [u8; 32] {
        let mut it = self.nodes.iter().rev();
        match it.next() {
            None => Sha256::digest([]).into(),
            Some(last) => it.fold(*last, |acc, left| node_hash(left, &acc)),
        }
    }

    pub fn frontier_hex(&self) -> Vec<String> {
        self.nodes.iter().map(hex::encode).collect()
    }
}

/// The C2SP key id: the first 4 bytes of SHA-256(origin || "\n" || 0x01 || public key).
pub fn key_id(origin: &str, key: &VerifyingKey) -> String {
    let mut h = Sha256::new();
    h.update(origin.as_bytes());
    h.update(b"\n");
    h.update([1u8]);
    h.update(key.as_bytes());
    let d = h.finalize();
    hex::encode(d.get(..4).unwrap_or(&[]))
}

/// The signing key of a trail. Its `Debug` never prints the private part.
pub struct AuditKey {
    signing: SigningKey,
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<AuditKey public={}>",
            hex::encode(self.signing.verifying_key().as_bytes())
        )
    }
}

impl AuditKey {
    pub fn generate() -> AuditKey {
        AuditKey {
            signing: SigningKey::generate(&mut rand::rngs::OsRng),
        }
    }

    /// Loads the key of the trail whose active file is `trail`: the key file must exist when
    /// the trail already holds records ([`AuditError::KeyLost`], which names
    /// `sandboxio audit rotate-key`, otherwise); a new trail gets a new key. A key file
    /// readable by others is tightened to 0600.
    pub fn load_for_trail(path: &Path, trail: &Path) -> Result<AuditKey, AuditError> {
        Self::settle_rotation(path, trail)?;
        if !path.exists() && crate::reader::trail_has_records(trail)? {
            return Err(AuditError::KeyLost {
                key: path.to_path_buf(),
                trail: trail.to_path_buf(),
            });
        }
        Self::load_or_generate(path)
    }

    /// Loads the key (64 hex characters: the Ed25519 seed) from `path`, or generates one and
    /// writes it there with mode 0600 when the file does not exist.
    pub fn load_or_generate(path: &Path) -> Result<AuditKey, AuditError> {
        match sandboxio_core::fileread::read_regular_string(path) {
            Ok(s) => {
                crate::sink::file_mode::tighten_file(path)?;
                Self::parse_private(path, &s)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Write the whole key to a private temporary file, then link it into place:
                // a concurrent process either sees no key or a complete one, and when two
                // generate at once the first link wins and both use its key.
                let key = AuditKey::generate();
                match key.write_new(path) {
                    Ok(()) => Ok(key),
                    Err(AuditError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists =>
                    {
                        let s = sandboxio_core::fileread::read_regular_string(path)
                            .map_err(|e| key_read_error(path, e))?;
                        Self::parse_private(path, &s)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(key_read_error(path, e)),
        }
    }

    /// Writes this key to a new file at `path` (0600, complete or absent: written to a
    /// temporary file and linked into place). Fails with `AlreadyExists` when `path` exists.
    fn write_new(&self, path: &Path) -> Result<(), AuditError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(|e| AuditError::io(&tmp, e))?;
        f.write_all(format!("{}\n", hex::encode(self.signing.to_bytes())).as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| AuditError::io(&tmp, e))?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        linked.map_err(|e| AuditError::io(path, e))
    }

    /// Writes this key as the pending key of a rotation beside `path` (complete or absent,
    /// 0600): the key the trail's next file will be signed with, kept before the trail uses
    /// it so that a rotation that stops half way can be finished
    /// ([`AuditKey::settle_rotation`]).
    pub fn write_pending(&self, path: &Path) -> Result<(), AuditError> {
        let pending = pending_path(path);
        let _ = std::fs::remove_file(&pending);
        self.write_new(&pending)
    }

    /// Puts the pending key of a rotation in place of the key at `path`.
    pub fn commit_pending(path: &Path) -> Result<(), AuditError> {
        let pending = pending_path(path);
        std::fs::rename(&pending, path).map_err(|e| AuditError::io(path, e))?;
        sync_parent(path)
    }

    /// Finishes or undoes a key rotation that stopped half way (a pending key beside
    /// `path`): when the trail's active file is already signed with the pending key, the
    /// rotation got that far and the pending key becomes the key; otherwise the trail never
    /// used it and it is removed. A crash between the trail's new file and the key's
    /// replacement left a trail signed with a key that was never saved: every run then
    /// failed its checkpoint check (`SBX_E1604`), `rotate-key` and `recover` too.
    pub fn settle_rotation(path: &Path, trail: &Path) -> Result<(), AuditError> {
        let pending = pending_path(path);
        let text = match sandboxio_core::fileread::read_regular_string(&pending) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(key_read_error(&pending, e)),
        };
        let key = Self::parse_private(&pending, &text)?;
        if last_checkpoint_signed_by(trail, &key.verifying_key())? {
            tracing::warn!(
                target: "sandboxio::audit",
                "finishing an audit key rotation that stopped half way: the trail is signed with its new key"
            );
            Self::commit_pending(path)
        } else {
            std::fs::remove_file(&pending).map_err(|e| AuditError::io(&pending, e))
        }
    }

    fn parse_private(path: &Path, s: &str) -> Result<AuditKey, AuditError> {
        let bad = |why: &str| AuditError::BadKey {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        let raw = hex::decode(s.trim()).map_err(|_| bad("expected 64 hex characters"))?;
        let seed: [u8; 32] = raw
            .try_into()
            .map_err(|_| bad("expected a 32-byte ed25519 seed"))?;
        Ok(AuditKey {
            signing: SigningKey::from_bytes(&seed),
        })
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// The public key as a C2SP verifier key: `<origin>+<key id>+<base64(0x01 || key)>`.
    pub fn export_public(&self, origin: &str) -> String {
        export_public_key(origin, &self.verifying_key())
    }

    pub(crate) fn sign(&self, body: &str) -> String {
        STANDARD.encode(self.signing.sign(body.as_bytes()).to_bytes())
    }
}

/// Formats a public key as a C2SP verifier key.
pub fn export_public_key(origin: &str, key: &VerifyingKey) -> String {
    let mut raw = vec![1u8];
    raw.extend_from_slice(key.as_bytes());
    format!(
        "{}+{}+{}",
        origin,
        key_id(origin, key),
        STANDARD.encode(raw)
    )
}

/// Parses a public key: a C2SP verifier key, or 64 hex characters.
pub fn parse_public_key(s: &str) -> Result<VerifyingKey, AuditError> {
    let s = s.trim();
    let bad = |why: &str| AuditError::BadKey {
        path: PathBuf::from("<public key>"),
        why: why.to_string(),
    };
    // `<name>+<key id>+<base64>`: the name has no `+`, the base64 may.
    let raw: Vec<u8> = if let Some(b64) = s.splitn(3, '+').nth(2) {
        let v = STANDARD
            .decode(b64)
            .map_err(|_| bad("bad base64 in verifier key"))?;
        match v.split_first() {
            Some((1, rest)) => rest.to_vec(),
            _ => return Err(bad("verifier key is not ed25519 (type 0x01)")),
        }
    } else {
        hex::decode(s).map_err(|_| bad("expected a verifier key or 64 hex characters"))?
    };
    let arr: [u8; 32] = raw
        .try_into()
        .map_err(|_| bad("an ed25519 public key is 32 bytes"))?;
    VerifyingKey::from_bytes(&arr).map_err(|_| bad("not a valid ed25519 point"))
}

/// Reads every public key of a key file: one per non-empty line (a trail whose key was
/// rotated lists the old keys too, so old segments still verify).
pub fn load_public_keys(path: &Path) -> Result<Vec<VerifyingKey>, AuditError> {
    let s =
        sandboxio_core::fileread::read_regular_string(path).map_err(|e| key_read_error(path, e))?;
    let mut out = Vec::new();
    for line in s.lines().filter(|l| !l.trim().is_empty()) {
        out.push(parse_public_key(line).map_err(|e| match e {
            AuditError::BadKey { why, .. } => AuditError::BadKey {
                path: path.to_path_buf(),
                why,
            },
            other => other,
        })?);
    }
    if out.is_empty() {
        return Err(AuditError::BadKey {
            path: path.to_path_buf(),
            why: "the file holds no public key".into(),
        });
    }
    Ok(out)
}

/// Why a key file could not be read: a file that is not text is no key (`BadKey`), and one
/// this user may not read says so with what to do (`BadKey` too: the key given is not
/// usable by whoever runs the command); anything else is an i/o error.
fn key_read_error(path: &Path, e: std::io::Error) -> AuditError {
    match e.kind() {
        std::io::ErrorKind::InvalidData => AuditError::BadKey {
            path: path.to_path_buf(),
            why: "the file is not a key (not text: a key is 64 hex characters)".into(),
        },
        std::io::ErrorKind::PermissionDenied => AuditError::BadKey {
            path: path.to_path_buf(),
            why: "permission denied: the user running sandboxio cannot read it (run as its \
                  owner, or give that user read access: mode 0600 for the signing key)"
                .into(),
        },
        _ => AuditError::io(path, e),
    }
}

/// Reads a public key file (see [`parse_public_key`]).
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, AuditError> {
    let s =
        sandboxio_core::fileread::read_regular_string(path).map_err(|e| key_read_error(path, e))?;
    parse_public_key(&s).map_err(|e| match e {
        AuditError::BadKey { why, .. } => AuditError::BadKey {
            path: path.to_path_buf(),
            why,
        },
        other => other,
    })
}

/// Builds and signs a checkpoint for the current state.
pub(crate) fn make_checkpoint(
    key: &AuditKey,
    origin: &str,
    merkle: &Merkle,
    last: &[u8; 32],
    reason: CheckpointReason,
) -> Checkpoint {
    let mut cp = Checkpoint {
        origin: origin.to_string(),
        tree_size: merkle.size(),
        root_hash: STANDARD.encode(merkle.root()),
        last_hash: hex::encode(last),
        reason,
        ts: Utc::now(),
        frontier: merkle.frontier_hex(),
        key_id: key_id(origin, &key.verifying_key()),
        signature: String::new(),
    };
    cp.signature = key.sign(&cp.note_body());
    cp
}

/// `<key>.pending`: a rotation's new key until the trail is signed with it.
fn pending_path(key: &Path) -> PathBuf {
    let mut p = key.as_os_str().to_owned();
    p.push(".pending");
    PathBuf::from(p)
}

/// Fsyncs the directory holding `path` (a rename in it is then durable).
fn sync_parent(path: &Path) -> Result<(), AuditError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| AuditError::io(dir, e))
}

/// Whether the last checkpoint line of the trail's active file verifies with `key`.
fn last_checkpoint_signed_by(trail: &Path, key: &VerifyingKey) -> Result<bool, AuditError> {
    let bytes = match sandboxio_core::fileread::read_regular_whole(trail) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(AuditError::io(trail, e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    for line in text.lines().rev() {
        if let Ok(crate::chain::TrailLine::Checkpoint(cp)) = crate::chain::parse_line(line) {
            return Ok(cp.verify_signature(key));
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// The recursive definition from RFC 6962 section 2.1, as a reference.
    fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
        match leaves.len() {
            0 => Sha256::digest([]).into(),
            1 => leaf_hash(&leaves[0]),
            n => {
                let mut k = 1;
                while k * 2 < n {
                    k *= 2;
                }
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn incremental_root_matches_rfc6962_definition() {
        let mut m = Merkle::new();
        let mut leaves = Vec::new();
        assert_eq!(m.root(), mth(&leaves));
        for i in 0..70u8 {
            let l = [i; 32];
            m.push(&l);
            leaves.push(l);
            assert_eq!(m.root(), mth(&leaves), "size {}", i + 1);
            let restored = Merkle::from_frontier(m.size(), m.nodes.clone()).unwrap();
            assert_eq!(restored.root(), m.root());
        }
    }

    #[test]
    fn public_key_roundtrips_through_verifier_key_format() {
        let k = AuditKey::generate();
        let s = k.export_public(DEFAULT_ORIGIN);
        assert_eq!(parse_public_key(&s).unwrap(), k.verifying_key());
        let hexed = hex::encode(k.verifying_key().as_bytes());
        assert_eq!(parse_public_key(&hexed).unwrap(), k.verifying_key());
    }
}
