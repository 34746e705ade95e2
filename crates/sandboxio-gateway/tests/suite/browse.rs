//! `browse` requests the gateway refuses before anything runs: each with its code and one
//! record naming the page. (Loading pages for real: scripts/suites/browse.sh.)

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, AuditError, AuditEvent, AuditSink, Auditor};
use sandboxio_core::{
    ByteSize, Decision, ExecRequest, IsolationTier, Layer, NetworkMode, Operation, OperationArgs,
    OperationStatus, Principal,
};
use sandboxio_gateway::store::{SqliteStore, Store, SyncMode};
use sandboxio_gateway::*;
use sandboxio_sandbox::SandboxConfig;

#[derive(Default)]
struct MemSink(Mutex<Vec<AuditEvent>>);

#[async_trait]
impl AuditSink for MemSink {
    async fn emit(&self, e: &AuditEvent) -> Result<(), AuditError> {
        self.0.lock().unwrap().push(e.clone());
        Ok(())
    }
    fn name(&self) -> &str {
        "mem"
    }
}

/// Allows everything: every refusal below comes from the browse's own rules.
struct AllowAll;
impl PolicyEngine for AllowAll {
    fn decide(&self, _op: &Operation, _now: DateTime<Utc>) -> Decision {
        Decision::allow(Layer::Policy)
    }
}

fn gateway(cfg: GatewayConfig) -> (Gateway, Arc<MemSink>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap());
    let sink = Arc::new(MemSink::default());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![sink.clone()]),
        redaction.base().unwrap(),
    );
    let gw = Gateway::new(
        cfg,
        store,
        Arc::new(AllowAll),
        auditor,
        redaction,
        SandboxConfig::default(),
        Approver::Nobody,
    );
    (gw, sink, dir)
}

fn browse(url: &str, tier: IsolationTier, exec: Option<ExecRequest>) -> Submission {
    let mut op = Operation::new(
        Principal::tenant("acme"),
        OperationArgs::Browse {
            url: url.into(),
            screenshot: true,
        },
    );
    op.tier = Some(tier);
    op.exec = exec;
    Submission::new(op)
}

fn with_network() -> ExecRequest {
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.network = NetworkMode::Allowlist {
        allow: vec!["site.test:80".into()],
    };
    r
}

/// Submits, and checks the one record: denied at admit with `code`, naming the page.
async fn refused(cfg: GatewayConfig, sub: Submission, code: &str) -> String {
    let (gw, sink, _dir) = gateway(cfg);
    let url = match &sub.op.args {
        OperationArgs::Browse { url, .. } => url.clone(),
        _ => unreachable!(),
    };
    let out = gw.submit(sub).await.unwrap();
    assert!(
        out.result.is_none() && out.tool_output.is_none(),
        "nothing ran"
    );
    assert_eq!(out.record.status, OperationStatus::Denied);
    assert_eq!(out.record.layer, Layer::Admit);
    assert_eq!(
        out.record.error_code.as_deref(),
        Some(code),
        "{}",
        out.record.reason
    );
    let events = sink.0.lock().unwrap();
    assert_eq!(events.len(), 1, "one record");
    assert_eq!(events[0].event, "browse");
    assert_eq!(events[0].arguments.as_ref().unwrap()["url"], url.as_str());
    out.record.reason
}

#[tokio::test]
async fn browse_outside_the_namespace_tier_is_refused() {
    for tier in [IsolationTier::Process, IsolationTier::Landlock] {
        let why = refused(
            GatewayConfig::default(),
            browse("http://site.test/", tier, Some(with_network())),
            "SBX_E1560",
        )
        .await;
        assert!(why.contains("namespace tier"), "{why}");
    }
}

#[tokio::test]
async fn browse_without_network_is_refused() {
    let why = refused(
        GatewayConfig::default(),
        browse("http://site.test/", IsolationTier::Namespace, None),
        "SBX_E1561",
    )
    .await;
    assert!(why.contains("`allowlist` or `full`"), "{why}");
}

#[tokio::test]
async fn browse_with_a_program_or_mounts_in_its_request_is_refused() {
    let mut req = with_network();
    req.argv = vec!["sh".into(), "-c".into(), "id".into()];
    let why = refused(
        GatewayConfig::default(),
        browse("http://site.test/", IsolationTier::Namespace, Some(req)),
        "SBX_E1563",
    )
    .await;
    assert!(why.contains("`argv`"), "{why}");
}

#[tokio::test]
async fn browse_of_a_url_that_is_not_http_is_refused() {
    for url in [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "--remote-debugging-port=1",
    ] {
        refused(
            GatewayConfig::default(),
            browse(url, IsolationTier::Namespace, Some(with_network())),
            "SBX_E1005",
        )
        .await;
    }
}

#[tokio::test]
async fn browse_defaults_still_answer_to_the_ceilings() {
    let mut cfg = GatewayConfig::default();
    cfg.limits_max.memory = ByteSize::mib(512);
    let why = refused(
        cfg,
        browse(
            "http://site.test/",
            IsolationTier::Namespace,
            Some(with_network()),
        ),
        "SBX_E1517",
    )
    .await;
    assert!(why.contains("memory"), "{why}");
}
