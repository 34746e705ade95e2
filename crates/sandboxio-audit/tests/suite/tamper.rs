//! Every kind of tampering is detected by `verify`, at the first bad record.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandboxio_audit::chain::RECORD_DOMAIN;
use sandboxio_audit::sink::FileSinkOptions;
use sandboxio_audit::{
    verify, AuditEvent, AuditKey, AuditSink, FileSink, FsyncPolicy, Tamper, VerifyReport,
};
use sha2::{Digest, Sha256};

use super::common::exec_record;

/// A closed trail of `n` records with a checkpoint every 4; returns (dir, path, key).
async fn trail(n: u64) -> (tempfile::TempDir, PathBuf, Arc<AuditKey>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = FileSink::open(
        FileSinkOptions::new(&path)
            .fsync(FsyncPolicy::Never)
            .checkpoint_every(4),
        key.clone(),
    )
    .unwrap();
    for i in 0..n {
        let ev = AuditEvent::from_record(&exec_record(&format!("op-{i}")), false);
        sink.emit(&ev).await.unwrap();
    }
    sink.close().await.unwrap();
    (dir, path, key)
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn write(p: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    std::fs::write(p, s).unwrap();
}

/// Index (0-based) of the line holding record `seq`.
fn line_of(lines: &[String], seq: u64) -> usize {
    let needle = format!("{{\"seq\":{seq},");
    lines.iter().position(|l| l.starts_with(&needle)).unwrap()
}

fn check(rep: &VerifyReport, kind: Tamper, line0: usize, seq: Option<u64>) {
    assert!(!rep.ok, "{rep:?}");
    let bad = rep.first_bad.as_ref().unwrap();
    assert_eq!(bad.kind, kind, "{bad:?}");
    assert_eq!(bad.line, line0 as u64 + 1, "{bad:?}");
    if seq.is_some() {
        assert_eq!(bad.seq, seq, "{bad:?}");
    }
}

#[tokio::test]
async fn untouched_trail_verifies_with_and_without_key() {
    let (_d, path, key) = trail(10).await;
    let rep = verify(&[&path], Some(&key.verifying_key()));
    assert!(rep.ok, "{rep:?}");
    assert!(rep.sealed && rep.signatures_checked);
    assert_eq!(rep.records, 10);
    // open + 2 periodic + close
    assert_eq!(rep.checkpoints, 4);
    let rep = verify(&[&path], None);
    assert!(rep.ok && !rep.signatures_checked, "{rep:?}");
}

#[tokio::test]
async fn edited_record_is_reported_at_that_record() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let i = line_of(&l, 3);
    l[i] = l[i].replace("\"exit_code\":0", "\"exit_code\":1");
    write(&path, &l);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::Edited,
        i,
        Some(3),
    );
}

#[tokio::test]
async fn edit_with_recomputed_hash_breaks_the_chain_at_the_next_record() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let i = line_of(&l, 1);
    let edited = l[i].replace("\"exit_code\":0", "\"exit_code\":1");
    // Recompute the edited line's own hash, as a careful attacker would.
    let cut = edited.len() - 75;
    let body = format!("{}}}", &edited[..cut]);
    let mut h = Sha256::new();
    h.update(RECORD_DOMAIN);
    h.update(body.as_bytes());
    l[i] = format!(
        "{},\"hash\":\"{}\"}}",
        &edited[..cut],
        hex::encode(h.finalize())
    );
    write(&path, &l);
    let rep = verify(&[&path], Some(&key.verifying_key()));
    check(&rep, Tamper::ChainBroken, line_of(&l, 2), Some(2));
}

#[tokio::test]
async fn deleted_record_is_reported_at_the_gap() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let i = line_of(&l, 5);
    l.remove(i);
    write(&path, &l);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::Missing,
        i,
        Some(6),
    );
}

#[tokio::test]
async fn inserted_record_is_reported_at_the_insertion() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let i = line_of(&l, 2);
    let dup = l[i].clone();
    l.insert(i + 1, dup);
    write(&path, &l);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::OutOfOrder,
        i + 1,
        Some(2),
    );
}

#[tokio::test]
async fn reordered_records_are_reported_at_the_first_moved_one() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let (a, b) = (line_of(&l, 6), line_of(&l, 7));
    l.swap(a, b);
    write(&path, &l);
    let rep = verify(&[&path], Some(&key.verifying_key()));
    check(&rep, Tamper::Missing, a, Some(7));
    assert!(rep.first_bad.unwrap().why.contains("reordered"));
}

#[tokio::test]
async fn truncated_tail_is_detected() {
    let (_d, path, key) = trail(10).await;
    let l = lines(&path);
    // Cut the closing checkpoint and the last two records.
    let kept: Vec<String> = l[..l.len() - 3].to_vec();
    write(&path, &kept);
    let rep = verify(&[&path], Some(&key.verifying_key()));
    check(&rep, Tamper::Truncated, kept.len(), Some(8));
    assert!(!rep.sealed);
}

#[tokio::test]
async fn truncation_exactly_at_a_periodic_checkpoint_is_detected() {
    let (_d, path, key) = trail(10).await;
    let l = lines(&path);
    // Keep everything up to and including the checkpoint after record 7 (size 8).
    let cp = l
        .iter()
        .position(|x| x.starts_with("{\"checkpoint\":") && x.contains("\"tree_size\":8"))
        .unwrap();
    let kept = l[..=cp].to_vec();
    write(&path, &kept);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::Truncated,
        kept.len(),
        Some(8),
    );
}

#[tokio::test]
async fn records_cut_just_before_a_checkpoint_are_detected_at_the_checkpoint() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let i = line_of(&l, 7); // the last record before the size-8 checkpoint
    l.remove(i);
    write(&path, &l);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::CheckpointMismatch,
        i,
        Some(7),
    );
}

#[tokio::test]
async fn partial_last_line_is_truncation() {
    let (_d, path, key) = trail(5).await;
    let mut s = std::fs::read_to_string(&path).unwrap();
    s.truncate(s.len() - 10);
    std::fs::write(&path, s).unwrap();
    let rep = verify(&[&path], Some(&key.verifying_key()));
    assert_eq!(rep.first_bad.unwrap().kind, Tamper::Truncated);
}

#[tokio::test]
async fn forged_checkpoint_signature_is_detected_with_the_key() {
    let (_d, path, key) = trail(10).await;
    let mut l = lines(&path);
    let cp = l
        .iter()
        .position(|x| x.contains("\"reason\":\"periodic\""))
        .unwrap();
    // Re-sign with another key: the signature is well-formed but not ours.
    let other = AuditKey::generate();
    let v: serde_json::Value = serde_json::from_str(&l[cp]).unwrap();
    let mut c: sandboxio_audit::Checkpoint =
        serde_json::from_value(v["checkpoint"].clone()).unwrap();
    let forged = forge(&other, &c);
    c.signature = forged;
    l[cp] = serde_json::json!({ "checkpoint": c }).to_string();
    write(&path, &l);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::BadSignature,
        cp,
        None,
    );
    // Without the key the forgery is not visible, and the report says signatures were not checked.
    let rep = verify(&[&path], None);
    assert!(rep.ok && !rep.signatures_checked);
}

#[tokio::test]
async fn relabelling_a_checkpoint_as_close_after_truncation_is_detected_with_the_key() {
    let (_d, path, key) = trail(10).await;
    let l = lines(&path);
    let cp = l
        .iter()
        .position(|x| x.contains("\"tree_size\":8") && x.contains("periodic"))
        .unwrap();
    let mut kept = l[..=cp].to_vec();
    kept[cp] = kept[cp].replace("\"reason\":\"periodic\"", "\"reason\":\"close\"");
    write(&path, &kept);
    check(
        &verify(&[&path], Some(&key.verifying_key())),
        Tamper::BadSignature,
        cp,
        None,
    );
}

fn forge(k: &AuditKey, c: &sandboxio_audit::Checkpoint) -> String {
    use base64::Engine;
    // Sign the same note body with a different key (exported only through the public API:
    // generate a trail with `k` and steal its signature for the same body is not possible,
    // so sign directly).
    let sk = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let _ = k;
    let sig = ed25519_dalek::Signer::sign(&sk, c.note_body().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sig.to_bytes())
}
