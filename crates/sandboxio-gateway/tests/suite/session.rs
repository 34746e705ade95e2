//! A `Sandbox` session under the real default policy: file operations go through the chain
//! (one record each), stay beneath the workspace, and symlinks cannot dodge a rule.

use std::sync::Arc;

use sandboxio_audit::{AuditConfig, Auditor};
use sandboxio_core::{Layer, OperationStatus, Principal, Verdict};
use sandboxio_gateway::policy::PolicySetEngine;
use sandboxio_gateway::store::SqliteStore;
use sandboxio_gateway::*;

use super::chain::MemSink;

fn gateway() -> (Arc<Gateway>, Arc<MemSink>) {
    let sink = Arc::new(MemSink::default());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![sink.clone()]),
        redaction.base().unwrap(),
    );
    let policy = sandboxio_policy::PolicySet::builtin_default().unwrap();
    let engine = Arc::new(PolicySetEngine::new(
        policy,
        sandboxio_core::IsolationTier::Namespace,
    ));
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let gw = Gateway::new(
        GatewayConfig::default(),
        store,
        engine,
        auditor,
        redaction,
        Default::default(),
        Approver::Nobody,
    );
    (Arc::new(gw), sink)
}

#[tokio::test]
async fn file_operations_go_through_the_chain_and_stay_in_the_workspace() {
    let (gw, sink) = gateway();
    let work = tempfile::tempdir().unwrap();
    let sbx = Sandbox::create(gw, Principal::tenant("acme"), None, Some(work.path())).unwrap();
    let shown = format!("{sbx:?}");
    assert!(
        shown.starts_with("<Sandbox namespace:")
            && shown.contains(" running caps=EXEC|RUN_CODE|FILESYSTEM"),
        "{shown}"
    );

    let w = sbx
        .write_file("notes/a.txt", b"hello".to_vec())
        .await
        .unwrap();
    assert_eq!(w.record.status, OperationStatus::Ok, "{}", w.record.reason);
    let r = sbx.read_file("notes/a.txt").await.unwrap();
    assert_eq!(r.tool_output.as_ref().unwrap()["content"], "hello");
    assert_eq!(r.record.bytes_out, 5);
    let l = sbx.list_files("notes").await.unwrap();
    assert_eq!(
        l.tool_output.as_ref().unwrap()["entries"][0]["name"],
        "a.txt"
    );
    // The workspace's own root lists too.
    let root = sbx.list_files(".").await.unwrap();
    assert_eq!(
        root.record.status,
        OperationStatus::Ok,
        "{}",
        root.record.reason
    );
    assert_eq!(
        root.tool_output.as_ref().unwrap()["entries"][0]["name"],
        "notes"
    );

    // `..` is refused by policy before anything runs.
    let esc = sbx.read_file("../outside.txt").await.unwrap();
    assert_eq!(esc.record.verdict, Verdict::Deny);
    assert_eq!(esc.record.layer, Layer::Policy);

    // A symlink inside the workspace pointing out: the resolved path is checked by policy,
    // and the kernel refuses the open anyway.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host secret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        sbx.workspace().join("innocent.txt"),
    )
    .unwrap();
    let s = sbx.read_file("innocent.txt").await.unwrap();
    assert_eq!(s.record.verdict, Verdict::Deny, "{:?}", s.record);
    assert!(s.tool_output.is_none());

    let d = sbx.delete_file("notes/a.txt").await.unwrap();
    assert_eq!(d.record.status, OperationStatus::Ok);
    assert!(!sbx.workspace().join("notes/a.txt").exists());
    // One record per operation, allowed or not.
    assert_eq!(sink.0.lock().unwrap().len(), 7);
    let dir = sbx.workspace().to_path_buf();
    sbx.close();
    assert!(!dir.exists());
    assert!(format!("{sbx:?}").contains(" closed "));
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"host secret"
    );
}
