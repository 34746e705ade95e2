//! What a front end (the CLI, the HTTP server) gets from the chain: a pending approval as
//! soon as an `ask` waits, a code per denying layer, replays that answer like the original,
//! and the headroom left under each rate limit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, Auditor};
use sandboxio_budget::{RateLimitRule, RateLimitsConfig};
use sandboxio_core::{
    Decision, IdempotencyKey, Layer, Operation, OperationArgs, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::store::{ApprovalState, SqliteStore, Store, SyncMode};
use sandboxio_gateway::*;
use sandboxio_sandbox::SandboxConfig;

/// `ok*` allow, `ask*` ask, anything else deny.
struct ByName;
impl PolicyEngine for ByName {
    fn decide(&self, op: &Operation, _now: DateTime<Utc>) -> Decision {
        let name = op.args.tool_name();
        let mut d = Decision::allow(Layer::Policy);
        d.reason = "ALLOW RULE REASON".into();
        if name.starts_with("ask") {
            d.verdict = Verdict::Ask;
            d.reason = "asks a person".into();
        } else if !name.starts_with("ok") {
            d = Decision::deny(Layer::Policy, format!("no rule allows `{name}`"));
        }
        d
    }
}

/// Echoes its arguments, or fails for good (not transient) when given `"fail": true`.
struct Echo;
#[async_trait]
impl Tool for Echo {
    async fn call(&self, a: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        if a["fail"] == true {
            return Err(ToolError {
                code: None,
                message: "the upstream said no".into(),
                transient: false,
            });
        }
        Ok(a.clone())
    }
}

fn gateway(
    cfg: GatewayConfig,
    approver: Approver,
) -> (Gateway, Arc<SqliteStore>, tempfile::TempDir) {
    gateway_with(
        cfg,
        approver,
        Redaction::from_env(vec![]),
        AuditConfig::default(),
    )
}

fn gateway_with(
    cfg: GatewayConfig,
    approver: Approver,
    redaction: Redaction,
    audit: AuditConfig,
) -> (Gateway, Arc<SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap());
    let auditor = Auditor::new(audit, redaction.base().unwrap());
    let gw = Gateway::new(
        cfg,
        store.clone(),
        Arc::new(ByName),
        auditor,
        redaction,
        SandboxConfig::default(),
        approver,
    )
    .with_tool("ok_tool", Arc::new(Echo))
    .with_tool("ask_tool", Arc::new(Echo));
    (gw, store, dir)
}

fn call(tool: &str, args: serde_json::Value) -> Submission {
    Submission::new(Operation::new(
        Principal::tenant("acme"),
        OperationArgs::ToolCall {
            tool: tool.into(),
            arguments: args,
        },
    ))
}

#[tokio::test]
async fn a_pending_approval_reaches_the_front_end_before_it_is_decided() {
    let cfg = GatewayConfig {
        approval_timeout: Duration::from_secs(30),
        ..GatewayConfig::default()
    };
    let (gw, store, _dir) = gateway(
        cfg,
        Approver::Store {
            poll: Duration::from_millis(20),
        },
    );
    let gw = Arc::new(gw);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut sub = call("ask_tool", serde_json::json!({ "q": 1 }));
    sub.approval_pending = Some(tx);
    let running = tokio::spawn({
        let gw = gw.clone();
        async move { gw.submit(sub).await }
    });
    let pending = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the front end hears of the approval while the run waits")
        .unwrap();
    assert_eq!(pending.state, ApprovalState::Pending);
    assert_eq!(pending.reason, "asks a person");
    assert!(!running.is_finished(), "the run still waits for a person");
    store
        .decide_approval(&pending.id, true, "bob", None, Utc::now())
        .unwrap();
    let out = running.await.unwrap().unwrap();
    assert_eq!(
        out.record.status,
        OperationStatus::Ok,
        "{}",
        out.record.reason
    );
    assert_eq!(out.record.approval_id.as_deref(), Some(pending.id.as_str()));
}

#[tokio::test]
async fn each_denying_layer_has_its_own_code_and_reason() {
    let cfg = GatewayConfig {
        approval_timeout: Duration::from_secs(1),
        rate_limits: RateLimitsConfig {
            limit: vec![RateLimitRule {
                action: "ok_tool".into(),
                limit: "1/hour".parse().unwrap(),
                tenant: None,
                agent: None,
                per: Default::default(),
            }],
        },
        ..GatewayConfig::default()
    };
    let (gw, store, _dir) = gateway(cfg, Approver::Nobody);
    let policy = gw
        .submit(call("no_tool", serde_json::json!({})))
        .await
        .unwrap();
    let approval = gw
        .submit(call("ask_tool", serde_json::json!({})))
        .await
        .unwrap();
    let first = gw
        .submit(call("ok_tool", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(first.record.status, OperationStatus::Ok);
    let rate = gw
        .submit(call("ok_tool", serde_json::json!({})))
        .await
        .unwrap();
    store.set_kill("maintenance", "ops", Utc::now()).unwrap();
    let kill = gw
        .submit(call("ok_tool", serde_json::json!({})))
        .await
        .unwrap();
    for (out, layer, code) in [
        (&policy, Layer::Policy, denial::POLICY),
        (&approval, Layer::Approval, denial::APPROVAL_TIMEOUT),
        (&rate, Layer::RateLimit, denial::RATE_LIMIT),
        (&kill, Layer::KillSwitch, denial::KILL_SWITCH),
    ] {
        let r = &out.record;
        assert_eq!(r.verdict, Verdict::Deny, "{layer}");
        assert_eq!(r.layer, layer);
        assert_eq!(r.error_code.as_deref(), Some(code), "{layer}: {}", r.reason);
        assert!(
            !r.reason.contains("ALLOW RULE REASON"),
            "{layer} denied with the allow rule's reason: {}",
            r.reason
        );
    }
    // The codes are distinct and documented ones.
    let mut codes = vec![
        denial::POLICY,
        denial::KILL_SWITCH,
        denial::RATE_LIMIT,
        denial::BUDGET,
        denial::APPROVAL_DENIED,
        denial::APPROVAL_TIMEOUT,
        denial::APPROVAL_INVALID,
    ];
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), 7);
}

#[tokio::test]
async fn a_replay_carries_the_original_status_and_code() {
    let (gw, _store, _dir) = gateway(GatewayConfig::default(), Approver::Nobody);
    let keyed = || {
        let mut s = call("ok_tool", serde_json::json!({ "fail": true }));
        s.op.idempotency_key = Some(IdempotencyKey::new("job-9").unwrap());
        s
    };
    let first = gw.submit(keyed()).await.unwrap();
    assert_eq!(first.record.status, OperationStatus::Failed);
    let code = first.record.error_code.clone();
    assert!(code.is_some(), "a failed tool call has a code");
    let again = gw.submit(keyed()).await.unwrap();
    assert_eq!(again.record.status, OperationStatus::Replayed);
    assert_eq!(again.record.replayed_status, Some(OperationStatus::Failed));
    assert_eq!(again.record.error_code, code);
}

#[tokio::test]
async fn rate_usage_reports_what_each_key_used_in_its_window() {
    let cfg = GatewayConfig {
        rate_limits: RateLimitsConfig {
            limit: vec![RateLimitRule {
                action: "ok_tool".into(),
                limit: "5/minute".parse().unwrap(),
                tenant: None,
                agent: None,
                per: Default::default(),
            }],
        },
        ..GatewayConfig::default()
    };
    let (gw, store, _dir) = gateway(cfg, Approver::Nobody);
    let since = Utc::now() - chrono::Duration::minutes(1);
    assert!(store.rate_usage("0|", since).unwrap().is_empty());
    for _ in 0..3 {
        gw.submit(call("ok_tool", serde_json::json!({})))
            .await
            .unwrap();
    }
    let used = store.rate_usage("0|", since).unwrap();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].count, 3);
    assert!(used[0].key.starts_with("0|acme|"), "{}", used[0].key);
    // Another rule's prefix sees nothing; a window that starts later sees nothing either.
    assert!(store.rate_usage("1|", since).unwrap().is_empty());
    let later = Utc::now() + chrono::Duration::seconds(1);
    assert!(store.rate_usage("0|", later).unwrap().is_empty());
}

/// Counts what the auditor reports as redacted (the server's `sandboxio_redactions`).
#[derive(Debug, Default)]
struct RedactionTap(std::sync::atomic::AtomicU64);
impl sandboxio_audit::MetricsTap for RedactionTap {
    fn operation(&self, _obs: &sandboxio_audit::OperationObservation) {}
    fn redactions(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The gateway redacts a record once, before the auditor sees it; the redactions it made
/// are the ones the metrics count (a second pass over the redacted record finds none).
/// Both a configured secret (the auditor's own redactor knows it) and a request's own
/// secret (only the request's redactor knows it).
#[tokio::test]
async fn redactions_made_by_the_chain_reach_the_metrics() {
    let canary = "redaction-canary-5d1c0b9e7a24";
    let own = "request-canary-0a9b8c7d6e5f";
    let tap = Arc::new(RedactionTap::default());
    let redaction =
        Redaction::from_env(vec![]).with_secrets(vec![sandboxio_audit::Secret::new(canary)]);
    let audit = AuditConfig {
        metrics_tap: Some(tap.clone()),
        ..AuditConfig::default()
    };
    let (gw, _store, _dir) =
        gateway_with(GatewayConfig::default(), Approver::Nobody, redaction, audit);
    let count = || tap.0.load(std::sync::atomic::Ordering::Relaxed);

    let out = gw
        .submit(call("ok_tool", serde_json::json!({ "token": canary })))
        .await
        .unwrap();
    let text = serde_json::to_string(&out.record).unwrap();
    assert!(!text.contains(canary), "{text}");
    assert!(
        count() >= 1,
        "a configured secret's redaction was not counted"
    );

    let before = count();
    let mut sub = call("ok_tool", serde_json::json!({ "token": own }));
    sub.secrets = vec![sandboxio_audit::Secret::new(own)];
    let out = gw.submit(sub).await.unwrap();
    let text = serde_json::to_string(&out.record).unwrap();
    assert!(!text.contains(own), "{text}");
    assert!(
        count() > before,
        "a request secret's redaction was not counted"
    );

    // Nothing to redact: nothing counted.
    let before = count();
    gw.submit(call("ok_tool", serde_json::json!({ "q": 1 })))
        .await
        .unwrap();
    assert_eq!(count(), before);
}
