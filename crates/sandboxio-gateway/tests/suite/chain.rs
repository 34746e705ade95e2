//! The chain, driven through tools (no sandbox needed): every layer stops with one record,
//! internal errors deny, approvals bind to one request, keys replay, retries stay bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sandboxio_audit::{AuditConfig, AuditError, AuditEvent, AuditSink, Auditor, Secret};
use sandboxio_budget::{RateLimitRule, RateLimitsConfig};
use sandboxio_core::{
    Decision, IdempotencyKey, IsolationTier, Layer, Money, Operation, OperationArgs,
    OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::config::RetrySettings;
use sandboxio_gateway::store::{SqliteStore, Store, SyncMode};
use sandboxio_gateway::*;
use sandboxio_sandbox::SandboxConfig;

#[derive(Default)]
pub struct MemSink(pub Mutex<Vec<AuditEvent>>);

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

impl MemSink {
    fn json(&self) -> String {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Decides by tool name: `ok*` allow, `ask*` ask, anything else deny.
struct ByName;
impl PolicyEngine for ByName {
    fn decide(&self, op: &Operation, _now: DateTime<Utc>) -> Decision {
        let name = op.args.tool_name();
        let mut d = Decision::allow(Layer::Policy);
        if name.starts_with("ask") {
            d.verdict = Verdict::Ask;
            d.reason = "asks a person".into();
        } else if !name.starts_with("ok") {
            d = Decision::deny(Layer::Policy, format!("no rule allows `{name}`"));
        }
        d
    }
}

struct Counter {
    calls: AtomicU64,
    fail: bool,
}

#[async_trait]
impl Tool for Counter {
    async fn call(&self, a: &serde_json::Value) -> Result<serde_json::Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(ToolError {
                code: None,
                message: "upstream unavailable".into(),
                transient: true,
            });
        }
        Ok(serde_json::json!({ "echo": a }))
    }
}

struct Answer(bool);
#[async_trait]
impl ApprovalCallback for Answer {
    async fn decide(&self, _a: &store::Approval) -> Option<ApprovalAnswer> {
        Some(ApprovalAnswer {
            approve: self.0,
            approver: "alice".into(),
            reason: None,
        })
    }
}

struct Fixture {
    gw: Gateway,
    sink: Arc<MemSink>,
    tool: Arc<Counter>,
    _dir: tempfile::TempDir,
}

fn fixture_with(
    cfg: GatewayConfig,
    store: Option<Arc<dyn Store>>,
    approver: Approver,
    fail: bool,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = store.unwrap_or_else(|| {
        Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap())
    });
    let sink = Arc::new(MemSink::default());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![sink.clone()]),
        redaction.base().unwrap(),
    );
    let tool = Arc::new(Counter {
        calls: AtomicU64::new(0),
        fail,
    });
    let gw = Gateway::new(
        cfg,
        store,
        Arc::new(ByName),
        auditor,
        redaction,
        SandboxConfig::default(),
        approver,
    );
    let gw = gw
        .with_tool("ok_tool", tool.clone())
        .with_tool("ask_tool", tool.clone())
        .with_tool("no_tool", tool.clone());
    Fixture {
        gw,
        sink,
        tool,
        _dir: dir,
    }
}

fn fixture() -> Fixture {
    fixture_with(GatewayConfig::default(), None, Approver::Nobody, false)
}

fn call(tool: &str, arg: &str) -> Submission {
    Submission::new(Operation::new(
        Principal::tenant("acme"),
        OperationArgs::ToolCall {
            tool: tool.into(),
            arguments: serde_json::json!({ "q": arg }),
        },
    ))
}

fn calls(f: &Fixture) -> u64 {
    f.tool.calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn allowed_call_runs_once_and_is_recorded_once() {
    let f = fixture();
    let out = f.gw.submit(call("ok_tool", "x")).await.unwrap();
    assert_eq!(out.record.status, OperationStatus::Ok);
    assert_eq!(calls(&f), 1);
    assert_eq!(f.sink.len(), 1);
}

/// A sandbox of a tier this build cannot run is refused as bad input, before the policy
/// (whose rule would have nothing to do with it), and changes nothing.
#[tokio::test]
async fn a_tier_this_build_cannot_run_is_refused_at_admit_before_policy() {
    let f = fixture();
    for tier in [IsolationTier::Microvm, IsolationTier::Remote] {
        let mut op = Operation::new(
            Principal::tenant("acme"),
            OperationArgs::Exec {
                argv: vec!["true".into()],
            },
        );
        op.tier = Some(tier);
        let out = f.gw.submit(Submission::new(op)).await.unwrap();
        assert!(out.result.is_none(), "{tier}: something ran");
        assert_eq!(out.record.status, OperationStatus::Denied, "{tier}");
        assert_eq!(
            out.record.layer,
            Layer::Admit,
            "{tier}: {}",
            out.record.reason
        );
        assert_eq!(
            out.record.error_code.as_deref(),
            Some("SBX_E1429"),
            "{tier}"
        );
    }
    let live = f.gw.store().live_counts().unwrap();
    assert_eq!((live.open_intents, live.reservations), (0, 0));
    assert_eq!(f.sink.len(), 2, "one record each");
}

#[tokio::test]
async fn policy_deny_runs_nothing_and_is_recorded_with_reason() {
    let f = fixture();
    let out = f.gw.submit(call("no_tool", "x")).await.unwrap();
    assert_eq!(out.record.verdict, Verdict::Deny);
    assert_eq!(out.record.layer, Layer::Policy);
    assert!(out.record.reason.contains("no rule allows"));
    assert_eq!(calls(&f), 0);
    assert_eq!(f.sink.len(), 1, "every attempt is recorded, allowed or not");
}

#[tokio::test]
async fn kill_switch_denies_before_policy_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    SqliteStore::open(&path, SyncMode::Full)
        .unwrap()
        .set_kill("runaway", "ops", Utc::now())
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path, SyncMode::Full).unwrap());
    let f = fixture_with(
        GatewayConfig::default(),
        Some(store),
        Approver::Nobody,
        false,
    );
    // Allowed, denied and asked about by the policy: the kill switch answers first
    // (read in the admission transaction for the first and the last, alone for a denial).
    for tool in ["ok_tool", "no_tool", "ask_tool"] {
        let out = f.gw.submit(call(tool, "x")).await.unwrap();
        assert_eq!(out.record.layer, Layer::KillSwitch, "{tool}");
        assert_eq!(out.record.verdict, Verdict::Deny, "{tool}");
        assert!(out.record.reason.contains("runaway"), "{tool}");
        assert!(
            out.record.rules.is_empty(),
            "{tool}: {:?}",
            out.record.rules
        );
    }
    assert_eq!(calls(&f), 0);
    assert_eq!(f.sink.len(), 3);
}

/// One hand-off per phase: an allowed operation makes two store calls, the admission
/// transaction (kill switch, rate limits, journal, reservation, key) and the closing one
/// (record, `finish`, then the budget read for the metrics on the same thread); a denied one
/// reads the kill switch, then stores the trail heads. None of them on an async worker:
/// the runtime here has one worker, and every call runs on another thread.
#[test]
fn an_operation_makes_one_store_call_per_phase_off_the_async_worker() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let worker = rt.block_on(async {
        tokio::spawn(async { std::thread::current().id() })
            .await
            .unwrap()
    });
    let watched = Arc::new(Watched::new(SqliteStore::open_in_memory().unwrap(), false));
    let mut cfg = GatewayConfig::default();
    cfg.budget.global = Some("100".parse().unwrap());
    let f = fixture_with(
        cfg,
        Some(watched.clone() as Arc<dyn Store>),
        Approver::Nobody,
        false,
    );
    let gw = Arc::new(f.gw);
    let run = |tool: &'static str| {
        let gw = gw.clone();
        rt.block_on(
            async move { tokio::spawn(async move { gw.submit(call(tool, "x")).await }).await },
        )
        .unwrap()
        .unwrap()
    };
    let out = run("ok_tool");
    assert_eq!(out.record.status, OperationStatus::Ok);
    let seen = watched.take();
    let names: Vec<&str> = seen.iter().map(|c| c.0).collect();
    assert_eq!(names, ["admit", "finish", "budget_summary"]);
    assert_eq!(
        seen[1].1, seen[2].1,
        "finish and the budget read: one closing call"
    );
    assert!(
        seen.iter().all(|c| c.1 != worker),
        "{seen:?} on the worker {worker:?}"
    );

    let out = run("no_tool");
    assert_eq!(out.record.layer, Layer::Policy);
    let seen = watched.take();
    let names: Vec<&str> = seen.iter().map(|c| c.0).collect();
    assert_eq!(names, ["kill_state", "put_heads"]);
    assert!(
        seen.iter().all(|c| c.1 != worker),
        "{seen:?} on the worker {worker:?}"
    );
    assert_eq!(f.sink.len(), 2, "one record each");
}

#[tokio::test]
async fn rate_limit_denies_with_retry_time() {
    let cfg = GatewayConfig {
        rate_limits: RateLimitsConfig {
            limit: vec![RateLimitRule {
                action: "tool_call".into(),
                limit: "2/minute".parse().unwrap(),
                tenant: None,
                agent: None,
                per: Default::default(),
            }],
        },
        ..GatewayConfig::default()
    };
    let f = fixture_with(cfg, None, Approver::Nobody, false);
    for _ in 0..2 {
        assert_eq!(
            f.gw.submit(call("ok_tool", "x"))
                .await
                .unwrap()
                .record
                .status,
            OperationStatus::Ok
        );
    }
    let out = f.gw.submit(call("ok_tool", "x")).await.unwrap();
    assert_eq!(out.record.layer, Layer::RateLimit);
    assert!(
        out.record.reason.contains("retry in"),
        "{}",
        out.record.reason
    );
    assert_eq!(calls(&f), 2);
}

#[tokio::test]
async fn budget_denies_with_numbers_and_leaks_nothing() {
    let mut cfg = GatewayConfig::default();
    cfg.budget.per_tenant = Some("1.00".parse().unwrap());
    let f = fixture_with(cfg, None, Approver::Nobody, false);
    let mut sub = call("ok_tool", "x");
    sub.op.estimated_cost = Some("0.70".parse::<Money>().unwrap());
    assert_eq!(
        f.gw.submit(sub).await.unwrap().record.status,
        OperationStatus::Ok
    );
    let mut sub = call("ok_tool", "y");
    sub.op.estimated_cost = Some("0.70".parse::<Money>().unwrap());
    let out = f.gw.submit(sub).await.unwrap();
    assert_eq!(out.record.layer, Layer::Budget);
    assert!(
        out.record.reason.contains("to 1.4 of its 1 ceiling"),
        "{}",
        out.record.reason
    );
    assert_eq!(f.gw.store().live_counts().unwrap().reservations, 0);
}

/// A store that notes which of the chain's calls it served and on which thread, and whose
/// admission transaction can be made to fail (the gateway must then deny, not run).
struct Watched {
    inner: SqliteStore,
    broken_admission: bool,
    calls: Mutex<Vec<(&'static str, std::thread::ThreadId)>>,
}

impl Watched {
    fn new(inner: SqliteStore, broken_admission: bool) -> Self {
        Watched {
            inner,
            broken_admission,
            calls: Mutex::new(Vec::new()),
        }
    }
    fn note(&self, call: &'static str) {
        self.calls
            .lock()
            .unwrap()
            .push((call, std::thread::current().id()));
    }
    fn take(&self) -> Vec<(&'static str, std::thread::ThreadId)> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl Store for Watched {
    fn kill_state(&self) -> store::StoreResult<Option<store::KillState>> {
        self.note("kill_state");
        self.inner.kill_state()
    }
    fn set_kill(&self, r: &str, b: &str, n: DateTime<Utc>) -> store::StoreResult<()> {
        self.inner.set_kill(r, b, n)
    }
    fn clear_kill(&self) -> store::StoreResult<()> {
        self.inner.clear_kill()
    }
    fn open_intents_since(
        &self,
        since: DateTime<Utc>,
    ) -> store::StoreResult<Vec<store::JournalEntry>> {
        self.inner.open_intents_since(since)
    }
    fn admin_change(
        &self,
        j: &store::JournalEntry,
        c: &store::AdminChange,
    ) -> store::StoreResult<store::AdminCommit> {
        self.note("admin_change");
        self.inner.admin_change(j, c)
    }
    fn admit(&self, a: &store::Admission<'_>) -> store::StoreResult<store::Admitted> {
        self.note("admit");
        if self.broken_admission {
            return Err(GatewayError::StoreBusy {
                action: "admitting an operation",
            });
        }
        self.inner.admit(a)
    }
    fn claim(
        &self,
        a: Option<(&str, &str)>,
        i: Option<&store::IdemClaim>,
        o: &str,
        n: DateTime<Utc>,
    ) -> store::StoreResult<Option<store::Claimed>> {
        self.inner.claim(a, i, o, n)
    }
    fn finish(
        &self,
        f: &store::Finish<'_>,
    ) -> store::StoreResult<Option<sandboxio_budget::Settlement>> {
        self.note("finish");
        self.inner.finish(f)
    }
    fn reopen_scope(
        &self,
        s: &sandboxio_budget::ScopeKey,
        now: DateTime<Utc>,
    ) -> store::StoreResult<bool> {
        self.inner.reopen_scope(s, now)
    }
    fn budget_summary(
        &self,
        c: &sandboxio_budget::BudgetConfig,
        s: &[sandboxio_budget::ScopeKey],
    ) -> store::StoreResult<Vec<sandboxio_budget::Summary>> {
        self.note("budget_summary");
        self.inner.budget_summary(c, s)
    }
    fn ledger(
        &self,
        a: DateTime<Utc>,
        b: DateTime<Utc>,
    ) -> store::StoreResult<Vec<store::LedgerLine>> {
        self.inner.ledger(a, b)
    }
    fn create_approval(&self, a: &store::Approval) -> store::StoreResult<()> {
        self.inner.create_approval(a)
    }
    fn get_approval(&self, id: &str) -> store::StoreResult<Option<store::Approval>> {
        self.inner.get_approval(id)
    }
    fn list_approvals(
        &self,
        s: Option<store::ApprovalState>,
    ) -> store::StoreResult<Vec<store::Approval>> {
        self.inner.list_approvals(s)
    }
    fn decide_approval(
        &self,
        id: &str,
        a: bool,
        b: &str,
        r: Option<&str>,
        n: DateTime<Utc>,
    ) -> store::StoreResult<store::Approval> {
        self.inner.decide_approval(id, a, b, r, n)
    }
    fn put_heads(&self, h: &[store::SignedHead], n: DateTime<Utc>) -> store::StoreResult<()> {
        self.note("put_heads");
        self.inner.put_heads(h, n)
    }
    fn keep_unrecorded(&self, u: &store::Unrecorded) -> store::StoreResult<()> {
        self.inner.keep_unrecorded(u)
    }
    fn unrecorded(&self, limit: usize) -> store::StoreResult<Vec<store::Unrecorded>> {
        self.inner.unrecorded(limit)
    }
    fn settle_unrecorded(&self, id: &str, left: &[String]) -> store::StoreResult<()> {
        self.inner.settle_unrecorded(id, left)
    }
    fn heads(&self) -> store::StoreResult<Vec<store::SignedHead>> {
        self.inner.heads()
    }
    fn record_anchor_break(
        &self,
        b: &store::AnchorBreak,
        h: Option<&store::SignedHead>,
    ) -> store::StoreResult<()> {
        self.inner.record_anchor_break(b, h)
    }
    fn anchor_breaks(&self) -> store::StoreResult<Vec<store::AnchorBreak>> {
        self.inner.anchor_breaks()
    }
    fn prune(&self, n: DateTime<Utc>, r: std::time::Duration) -> store::StoreResult<store::Pruned> {
        self.inner.prune(n, r)
    }
    fn expire_approvals(&self, n: DateTime<Utc>) -> store::StoreResult<u64> {
        self.inner.expire_approvals(n)
    }
    fn expire_approval(&self, id: &str) -> store::StoreResult<()> {
        self.inner.expire_approval(id)
    }
    fn journal_has(&self, ids: &[String]) -> store::StoreResult<Vec<String>> {
        self.inner.journal_has(ids)
    }
    fn claim_dead_intents(
        &self,
        c: &str,
        h: std::time::Duration,
        a: &dyn Fn(&str) -> bool,
    ) -> store::StoreResult<Vec<store::JournalEntry>> {
        self.inner.claim_dead_intents(c, h, a)
    }
    fn reserved_amounts(
        &self,
        ids: &[String],
    ) -> store::StoreResult<std::collections::BTreeMap<String, Money>> {
        self.inner.reserved_amounts(ids)
    }
    fn settle_interrupted(
        &self,
        n: DateTime<Utc>,
        d: &[store::JournalEntry],
        b: &sandboxio_budget::BudgetConfig,
        i: &dyn Fn(&store::JournalEntry) -> String,
    ) -> store::StoreResult<Vec<store::JournalEntry>> {
        self.inner.settle_interrupted(n, d, b, i)
    }
    fn live_counts(&self) -> store::StoreResult<store::LiveCounts> {
        self.inner.live_counts()
    }
    fn rate_usage(
        &self,
        p: &str,
        since: DateTime<Utc>,
    ) -> store::StoreResult<Vec<store::RateUsage>> {
        self.inner.rate_usage(p, since)
    }
    fn create_credential(
        &self,
        c: &sandboxio_gateway::credential::Credential,
    ) -> store::StoreResult<()> {
        self.inner.create_credential(c)
    }
    fn credential(
        &self,
        id: &str,
    ) -> store::StoreResult<Option<sandboxio_gateway::credential::Credential>> {
        self.inner.credential(id)
    }
    fn list_credentials(
        &self,
        t: Option<&str>,
    ) -> store::StoreResult<Vec<sandboxio_gateway::credential::Credential>> {
        self.inner.list_credentials(t)
    }
    fn revoke_credential(&self, id: &str, n: DateTime<Utc>) -> store::StoreResult<bool> {
        self.inner.revoke_credential(id, n)
    }
}

#[tokio::test]
async fn internal_error_in_a_layer_is_a_deny() {
    let mut cfg = GatewayConfig::default();
    cfg.budget.global = Some("100".parse().unwrap());
    let store: Arc<dyn Store> =
        Arc::new(Watched::new(SqliteStore::open_in_memory().unwrap(), true));
    let f = fixture_with(cfg, Some(store), Approver::Nobody, false);
    let out = f.gw.submit(call("ok_tool", "x")).await.unwrap();
    assert_eq!(out.record.verdict, Verdict::Deny);
    assert_eq!(out.record.layer, Layer::Journal);
    assert_eq!(out.record.status, OperationStatus::Error);
    assert_eq!(out.record.error_code.as_deref(), Some("SBX_E1502"));
    assert_eq!(calls(&f), 0);
    assert_eq!(f.sink.len(), 1);
}

#[tokio::test]
async fn ask_without_approver_is_denied_and_records_approval() {
    let f = fixture();
    let out = f.gw.submit(call("ask_tool", "x")).await.unwrap();
    assert_eq!(out.record.layer, Layer::Approval);
    assert!(out.record.approval_id.is_some());
    assert_eq!(calls(&f), 0);
}

#[tokio::test]
async fn approval_callback_allows_and_denies_and_each_request_asks_anew() {
    let f = fixture_with(
        GatewayConfig::default(),
        None,
        Approver::Callback(Arc::new(Answer(true))),
        false,
    );
    let a = f.gw.submit(call("ask_tool", "x")).await.unwrap();
    assert_eq!(a.record.status, OperationStatus::Ok);
    assert_eq!(a.record.approver.as_deref(), Some("alice"));
    let b = f.gw.submit(call("ask_tool", "x")).await.unwrap();
    assert_ne!(
        a.record.approval_id, b.record.approval_id,
        "an approval is used once; a repeat asks again"
    );
    assert_eq!(calls(&f), 2);
    let g = fixture_with(
        GatewayConfig::default(),
        None,
        Approver::Callback(Arc::new(Answer(false))),
        false,
    );
    let out = g.gw.submit(call("ask_tool", "x")).await.unwrap();
    assert_eq!(out.record.layer, Layer::Approval);
    assert!(out.record.reason.contains("denied by alice"));
    assert_eq!(calls(&g), 0);
}

#[tokio::test]
async fn an_approval_granted_for_one_request_cannot_run_another() {
    // A person approves request A through the store while request B waits on its own id.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Full).unwrap());
    let cfg = GatewayConfig {
        approval_timeout: Duration::from_secs(5),
        ..GatewayConfig::default()
    };
    let f = fixture_with(
        cfg,
        Some(store.clone()),
        Approver::Store {
            poll: Duration::from_millis(20),
        },
        false,
    );
    let gw = Arc::new(f.gw);
    let g2 = gw.clone();
    let task = tokio::spawn(async move { g2.submit(call("ask_tool", "A")).await.unwrap() });
    let pending = loop {
        let p = store
            .list_approvals(Some(store::ApprovalState::Pending))
            .unwrap();
        if let Some(a) = p.into_iter().next() {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    store
        .decide_approval(&pending.id, true, "alice", None, Utc::now())
        .unwrap();
    let out = task.await.unwrap();
    assert_eq!(out.record.status, OperationStatus::Ok);
    // The approval is now used: consuming it for another fingerprint (or again) fails.
    assert_eq!(
        store
            .claim(
                Some((&pending.id, "another-request")),
                None,
                "x",
                Utc::now()
            )
            .unwrap(),
        Some(store::Claimed::ApprovalInvalid)
    );
    assert_eq!(
        store
            .claim(
                Some((&pending.id, &pending.fingerprint)),
                None,
                "x",
                Utc::now()
            )
            .unwrap(),
        Some(store::Claimed::ApprovalInvalid)
    );
}

#[tokio::test]
async fn idempotency_key_replays_without_running_and_conflicts_on_different_request() {
    let f = fixture();
    let key = IdempotencyKey::new("order-42").unwrap();
    let mut a = call("ok_tool", "x");
    a.op.idempotency_key = Some(key.clone());
    let first = f.gw.submit(a).await.unwrap();
    let mut b = call("ok_tool", "x");
    b.op.idempotency_key = Some(key.clone());
    let second = f.gw.submit(b).await.unwrap();
    assert_eq!(calls(&f), 1);
    assert!(second.record.replayed);
    assert_eq!(second.record.status, OperationStatus::Replayed);
    assert_eq!(second.tool_output, first.tool_output);
    assert_eq!(second.record.idempotency_retention_s, Some(24 * 3600));
    let mut c = call("ok_tool", "DIFFERENT");
    c.op.idempotency_key = Some(key);
    let third = f.gw.submit(c).await.unwrap();
    assert_eq!(third.record.error_code.as_deref(), Some("SBX_E1505"));
    assert_eq!(calls(&f), 1);
    assert_eq!(f.sink.len(), 3);
}

/// Approves, and counts how often it was asked.
struct CountingYes(AtomicU64);
#[async_trait]
impl ApprovalCallback for CountingYes {
    async fn decide(&self, _a: &store::Approval) -> Option<ApprovalAnswer> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Some(ApprovalAnswer {
            approve: true,
            approver: "alice".into(),
            reason: None,
        })
    }
}

#[tokio::test]
async fn a_known_key_under_ask_is_answered_without_asking_anyone() {
    // A replay has no side effect and a conflict or a key still running is refused
    // whatever a person says: neither puts a question to an approver.
    let asked = Arc::new(CountingYes(AtomicU64::new(0)));
    let f = fixture_with(
        GatewayConfig::default(),
        None,
        Approver::Callback(asked.clone()),
        false,
    );
    let key = IdempotencyKey::new("order-43").unwrap();
    let keyed = |arg: &str| {
        let mut s = call("ask_tool", arg);
        s.op.idempotency_key = Some(key.clone());
        s
    };
    let first = f.gw.submit(keyed("x")).await.unwrap();
    assert_eq!(first.record.status, OperationStatus::Ok);
    assert_eq!(asked.0.load(Ordering::SeqCst), 1);
    let again = f.gw.submit(keyed("x")).await.unwrap();
    assert_eq!(again.record.status, OperationStatus::Replayed);
    assert_eq!(again.tool_output, first.tool_output);
    assert_eq!(
        again.record.approval_id, None,
        "a replay creates no approval"
    );
    let other = f.gw.submit(keyed("DIFFERENT")).await.unwrap();
    assert_eq!(other.record.error_code.as_deref(), Some("SBX_E1505"));
    assert_eq!(other.record.approval_id, None);
    assert_eq!(asked.0.load(Ordering::SeqCst), 1, "nobody was asked again");
    assert_eq!(calls(&f), 1);
    // The lookup claimed nothing: the same request without a key still asks and runs.
    let unkeyed = f.gw.submit(call("ask_tool", "y")).await.unwrap();
    assert_eq!(unkeyed.record.status, OperationStatus::Ok);
    assert_eq!(asked.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retry_storm_stays_within_the_retry_budget() {
    let cfg = GatewayConfig {
        retry: RetrySettings {
            base_delay: Duration::from_millis(0),
            max_delay: Duration::from_millis(0),
            ..RetrySettings::default()
        },
        ..GatewayConfig::default()
    };
    let f = fixture_with(cfg, None, Approver::Nobody, true);
    let n = 300u64;
    for i in 0..n {
        let mut s = call("ok_tool", &i.to_string());
        s.op.idempotent = true;
        let out = f.gw.submit(s).await.unwrap();
        assert_eq!(out.record.status, OperationStatus::Failed);
    }
    // Without a budget: 3 attempts each = 900 calls. With it: n + capacity + n * 0.1.
    let bound = n + 10 + n / 10;
    assert!(calls(&f) <= bound, "calls {} > bound {bound}", calls(&f));
    assert!(calls(&f) > n, "some retries happen");
}

#[tokio::test]
async fn non_idempotent_unkeyed_calls_are_never_retried() {
    let f = fixture_with(GatewayConfig::default(), None, Approver::Nobody, true);
    let out = f.gw.submit(call("ok_tool", "x")).await.unwrap();
    assert_eq!(out.record.attempts, 1);
    assert_eq!(calls(&f), 1);
}

#[tokio::test]
async fn a_secret_never_reaches_the_sink_or_the_outcome() {
    let f = fixture();
    let canary = "canary-Zq8v3K1mXw9RtY2pLs";
    let mut s = call("ok_tool", canary);
    s.secrets = vec![Secret::new(canary)];
    let out = f.gw.submit(s).await.unwrap();
    assert_eq!(calls(&f), 1);
    let shown = serde_json::to_string(&out).unwrap();
    assert!(!shown.contains(canary), "{shown}");
    assert!(!f.sink.json().contains(canary));
    // Denied requests carrying the secret are redacted too.
    let mut d = call("no_tool", canary);
    d.secrets = vec![Secret::new(canary)];
    let out = f.gw.submit(d).await.unwrap();
    assert!(!serde_json::to_string(&out).unwrap().contains(canary));
    assert!(!f.sink.json().contains(canary));
}

tokio::task_local! {
    static CALLER: &'static str;
}

/// A sink that only works on its caller's task (like an embedding's sink bound to the
/// caller's event loop): it reads a task-local value the caller set.
#[derive(Default)]
struct CallerBoundSink(Mutex<Vec<String>>);

#[async_trait]
impl AuditSink for CallerBoundSink {
    async fn emit(&self, e: &AuditEvent) -> Result<(), AuditError> {
        let caller = CALLER.try_with(|c| *c).map_err(|_| AuditError::Render {
            why: "not on the caller's task".into(),
        })?;
        self.0
            .lock()
            .unwrap()
            .push(format!("{caller}:{}", e.operation_id));
        Ok(())
    }
    fn name(&self) -> &str {
        "caller-bound"
    }
}

/// The closing call writes records off the async workers only for sinks that can; a sink
/// without a blocking path is still awaited on the operation's own task (its task-local
/// context intact), in fail mode too, and the operation is recorded once.
#[tokio::test]
async fn a_sink_without_a_blocking_path_is_awaited_on_the_callers_task() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap());
    let sink = Arc::new(CallerBoundSink::default());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default()
            .with_sinks(vec![sink.clone()])
            .on_sink_failure(sandboxio_audit::OnSinkFailure::Fail),
        redaction.base().unwrap(),
    );
    assert!(!auditor.records_blocking());
    let tool = Arc::new(Counter {
        calls: AtomicU64::new(0),
        fail: false,
    });
    let gw = Gateway::new(
        GatewayConfig::default(),
        store,
        Arc::new(ByName),
        auditor,
        redaction,
        SandboxConfig::default(),
        Approver::Nobody,
    )
    .with_tool("ok_tool", tool.clone());
    let out = CALLER
        .scope("py-loop", gw.submit(call("ok_tool", "x")))
        .await
        .expect("recorded on the caller's task");
    assert_eq!(out.record.status, OperationStatus::Ok);
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
    let seen = sink.0.lock().unwrap().clone();
    // The fail mode's intent record, then the outcome: both on the caller's task.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|s| s.starts_with("py-loop:")), "{seen:?}");
    let id = &out.record.operation_id;
    assert_eq!(seen.iter().filter(|s| s.ends_with(id.as_str())).count(), 2);
}

/// A sink that refuses every record (a full disk, say).
struct RefusingSink;

#[async_trait]
impl AuditSink for RefusingSink {
    async fn emit(&self, _e: &AuditEvent) -> Result<(), AuditError> {
        Err(AuditError::Render {
            why: "refused by the test".into(),
        })
    }
    fn name(&self) -> &str {
        "refusing"
    }
}

/// Recovery records an interrupted operation before it settles it: a recovery that could
/// not record (here a sink that refuses, in fail mode; a process killed mid-recovery is
/// the same window) leaves the intent open, and the next recovery records and settles it.
/// The other order settled it first, and a death before its record lost the record for
/// good (seen with CLI runs killed at random points: intents settled, no record).
#[tokio::test]
async fn recovery_records_an_interrupted_operation_before_settling_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap());
    let cfg = GatewayConfig::default();
    // An intent whose process is gone (an owner no live process has).
    let op = call("ok_tool", "x").op;
    let admitted = store
        .admit(&store::Admission {
            journal: store::JournalEntry {
                operation_id: "op-dead".into(),
                intent: serde_json::to_string(&op).unwrap(),
                started_at: Utc::now(),
                owner: "999999999:1".into(),
                idempotent: false,
                idem: None,
            },
            rate: vec![],
            budget: &cfg.budget,
            reserve: sandboxio_budget::ReserveRequest {
                id: "op-dead".into(),
                tenant: "acme".into(),
                session: None,
                category: sandboxio_core::CostCategory::Compute,
                estimate: Some(Money::ZERO),
                agent: None,
                at: None,
            },
            idem: None,
            idem_lookup_only: false,
            now: Utc::now(),
        })
        .unwrap();
    assert!(matches!(admitted, store::Admitted::Proceed(_)));
    let gateway = |sink: Arc<dyn AuditSink>| {
        let redaction = Redaction::from_env(vec![]);
        let auditor = Auditor::new(
            AuditConfig::default()
                .with_sinks(vec![sink])
                .on_sink_failure(sandboxio_audit::OnSinkFailure::Fail),
            redaction.base().unwrap(),
        );
        Gateway::new(
            GatewayConfig::default(),
            store.clone(),
            Arc::new(ByName),
            auditor,
            redaction,
            SandboxConfig::default(),
            Approver::Nobody,
        )
    };
    let refused = gateway(Arc::new(RefusingSink)).recover_interrupted().await;
    assert!(refused.is_err(), "{refused:?}");
    // Still open, and this process's retry may take it again (its own claim).
    let still_open = store
        .claim_dead_intents(&process_owner(), store::RECOVERY_HOLD, &owner_alive)
        .unwrap();
    assert_eq!(
        still_open
            .iter()
            .map(|e| e.operation_id.as_str())
            .collect::<Vec<_>>(),
        ["op-dead"],
        "an unrecorded recovery must leave the intent open"
    );
    let sink = Arc::new(MemSink::default());
    assert_eq!(
        gateway(sink.clone()).recover_interrupted().await.unwrap(),
        1
    );
    let json = sink.json();
    assert!(
        json.contains("op-dead") && json.contains("interrupted"),
        "{json}"
    );
    assert!(store
        .claim_dead_intents(&process_owner(), store::RECOVERY_HOLD, &owner_alive)
        .unwrap()
        .is_empty());
    assert_eq!(store.live_counts().unwrap().open_intents, 0);
}
