//! `sandboxio audit rotate-key`: a new audit signing key, after the old one was lost
//! (SBX_E1620) or to retire it. The active trail file is closed (signed by the old key
//! when it is still there) and kept like a rotated file; a new file continues the chain
//! under the new key; the rotation is the first record signed by it. `audit.pub` keeps the
//! old public keys, so old segments still verify.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use sandboxio_core::{Layer, OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::layers::audit::checkpoint::key_id;
use sandboxio_gateway::layers::audit::{
    AuditConfig, AuditKey, Auditor, FileSink, FileSinkOptions, Redactor, DEFAULT_ORIGIN,
};
use sandboxio_gateway::store::{Store as _, SyncMode};

use crate::args::Common;
use crate::exit;
use crate::out::outln;
use crate::setup;

const ROTATED_EVENT: &str = "audit.key_rotated";

pub async fn rotate_key(common: &Common) -> Result<i32> {
    let loaded = setup::load(common)?;
    let files = loaded.state_files();
    files.prepare_dir()?;
    let key_path = loaded.state_dir.join("audit.key");
    let pub_path = loaded.state_dir.join("audit.pub");
    // A rotation that stopped half way is finished (or undone) first.
    AuditKey::settle_rotation(&key_path, &loaded.audit_file())?;
    let old_private = if key_path.exists() {
        Some(Arc::new(AuditKey::load_or_generate(&key_path)?))
    } else {
        None
    };
    let mut old_public = if pub_path.exists() {
        sandboxio_gateway::layers::audit::load_public_keys(&pub_path)?
    } else {
        Vec::new()
    };
    if let Some(k) = &old_private {
        old_public.push(k.verifying_key());
    }
    let new_key = Arc::new(AuditKey::generate());
    let fsync = match loaded.config.audit.fsync {
        sandboxio_config::FsyncPolicy::Always => {
            sandboxio_gateway::layers::audit::FsyncPolicy::Always
        }
        sandboxio_config::FsyncPolicy::Never => {
            sandboxio_gateway::layers::audit::FsyncPolicy::Never
        }
    };
    // The new key is kept (pending, and its public half listed) before the trail uses it;
    // then the trail's new file is signed by it from its first line; then it replaces the
    // key. A crash between any two steps is settled at the next load
    // (`AuditKey::settle_rotation`): before the trail's new file, the pending key is
    // dropped (an unused public key stays listed, harmless); after it, it becomes the key.
    new_key.write_pending(&key_path)?;
    append_public(&pub_path, &new_key)?;
    let sink = Arc::new(FileSink::open_rotating_key(
        FileSinkOptions::new(loaded.audit_file()).fsync(fsync),
        new_key.clone(),
        old_private.clone(),
        &old_public,
    )?);
    AuditKey::commit_pending(&key_path)?;

    let old_id = old_public
        .last()
        .map(|k| key_id(DEFAULT_ORIGIN, k))
        .unwrap_or_else(|| "unknown".into());
    let new_id = key_id(DEFAULT_ORIGIN, &new_key.verifying_key());
    let by = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let mut rec = OperationRecord::new(record_id(), ROTATED_EVENT);
    rec.backend = "audit".into();
    rec.status = OperationStatus::Ok;
    rec.verdict = Verdict::Allow;
    rec.layer = Layer::Record;
    rec.approver = Some(by.clone());
    rec.reason = format!(
        "audit signing key rotated by {by}: key {old_id} ({}) replaced by key {new_id}; `audit.pub` lists both",
        if old_private.is_some() {
            "retired; its last checkpoint closes the previous file"
        } else {
            "lost; the previous file ends without its closing checkpoint"
        }
    );
    let redactor = Arc::new(Redactor::builder().build()?);
    let auditor = Auditor::new(
        AuditConfig::from_env()?.with_sinks(vec![sink.clone()]),
        redactor,
    );
    auditor.record(rec).await?;
    auditor.close().await?;
    // Anchor the trail after the rotation record when the state database is usable and
    // has not lost work the trail records (a new head would hide the loss from the next
    // start's check); a lost one is recovered next, which anchors it then.
    if let Ok(store) = files.open_store(SyncMode::Full) {
        if setup::lost_work(&loaded, &store)?.is_none() {
            store.put_heads(&auditor.heads_to_anchor(), chrono::Utc::now())?;
        }
    }
    if common.json {
        outln!(
            "{}",
            serde_json::json!({ "old_key_id": old_id, "new_key_id": new_id, "public_keys": pub_path })
        )?;
    } else {
        outln!("audit signing key rotated: {old_id} -> {new_id}")?;
        outln!("public keys (old and new): {}", pub_path.display())?;
    }
    Ok(exit::OK)
}

/// Adds the new public key as a line of `audit.pub` (created 0644 when missing).
fn append_public(path: &std::path::Path, key: &AuditKey) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    f.write_all(format!("{}\n", key.export_public(DEFAULT_ORIGIN)).as_bytes())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("cannot write `{}`", path.display()))
}

fn record_id() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
