#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! One request, one chain: every fact a caller controls (env, stdin, limits, network, file
//! contents) is fingerprinted, visible to policy, charged and recorded. Each test here was a
//! way around the chain before the request became one value. The gateway runs in this
//! process; the sandbox helper is the `sandboxio` binary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sandboxio_audit::{AuditConfig, Auditor};
use sandboxio_core::{
    AdminAction, ByteSize, ExecRequest, IdempotencyKey, IsolationTier, Layer, Money, NetworkMode,
    Operation, OperationArgs, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::policy::PolicySetEngine;
use sandboxio_gateway::store::{ApprovalState, SqliteStore, Store, SyncMode};
use sandboxio_gateway::*;
use sandboxio_policy::{PolicySet, PolicySource};
use sandboxio_sandbox::SandboxConfig;

/// Keeps every event in memory.
#[derive(Default)]
struct MemSink(Mutex<Vec<sandboxio_audit::AuditEvent>>);

#[async_trait]
impl sandboxio_audit::AuditSink for MemSink {
    async fn emit(
        &self,
        e: &sandboxio_audit::AuditEvent,
    ) -> Result<(), sandboxio_audit::AuditError> {
        self.0.lock().unwrap().push(e.clone());
        Ok(())
    }
    fn name(&self) -> &str {
        "mem"
    }
}

const POLICY: &str = r#"
[[rule]]
id = "sh"
effect = "allow"
reason = "shell is allowed in these tests"
kind = "exec"
argv_prefix = ["sh"]

[[rule]]
id = "ask-approve-me"
effect = "ask"
reason = "a person approves this one"
kind = "exec"
argv_prefix = ["sh", "-c", "echo approve-me"]

[[rule]]
id = "no-full-network"
effect = "deny"
reason = "full network is never allowed"
kind = "exec"
network = "full"

[[rule]]
id = "no-big-memory"
effect = "deny"
reason = "more than 1GiB needs another policy"
kind = "exec"
memory_above = "1GiB"

[[rule]]
id = "no-secret-env"
effect = "deny"
reason = "no AWS credentials in sandboxes"
kind = "exec"
env = "AWS_*"

[[rule]]
id = "files"
effect = "allow"
reason = "files of the workspace"
kind = ["file_read", "file_write"]
in_workspace = true
"#;

struct Fx {
    gw: Arc<Gateway>,
    sink: Arc<MemSink>,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

fn fx(cfg: GatewayConfig, approver: Approver) -> Fx {
    fx_in(cfg, approver, None)
}

/// `work_root`: where the sandboxes' workspaces go (a test that counts what is left there).
fn fx_in(cfg: GatewayConfig, approver: Approver, work_root: Option<&std::path::Path>) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db"), SyncMode::Normal).unwrap());
    let sink = Arc::new(MemSink::default());
    let redaction = Redaction::from_env(vec![]);
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![sink.clone()]),
        redaction.base().unwrap(),
    );
    let set = PolicySet::from_sources(&[PolicySource::new("t.toml", POLICY.as_bytes())]).unwrap();
    let engine = Arc::new(PolicySetEngine::new(set, IsolationTier::Process));
    let cfg = GatewayConfig {
        default_tier: IsolationTier::Process,
        ..cfg
    };
    let gw = Gateway::new(
        cfg,
        store.clone(),
        engine,
        auditor,
        redaction,
        SandboxConfig {
            helper_path: Some(env!("CARGO_BIN_EXE_sandboxio").into()),
            work_root: work_root.map(Into::into),
            ..SandboxConfig::default()
        },
        approver,
    );
    Fx {
        gw: Arc::new(gw),
        sink,
        store,
        _dir: dir,
    }
}

fn sh(script: &str, req: ExecRequest) -> Submission {
    let argv: Vec<String> = vec!["sh".into(), "-c".into(), script.into()];
    let mut op = Operation::new(
        Principal::tenant("acme"),
        OperationArgs::Exec { argv: argv.clone() },
    );
    op.tier = Some(IsolationTier::Process);
    Submission::new(op.with_exec(req))
}

fn keyed(mut s: Submission, key: &str) -> Submission {
    s.op.idempotency_key = Some(IdempotencyKey::new(key).unwrap());
    s
}

fn with_env(k: &str, v: &str) -> ExecRequest {
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.env.insert(k.into(), v.into());
    r
}

fn stdout(o: &Outcome) -> String {
    let b: &[u8] = o
        .result
        .as_ref()
        .map(|r| r.stdout.as_ref())
        .unwrap_or_default();
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn same_key_with_another_env_value_stdin_or_limit_is_a_conflict() {
    let f = fx(GatewayConfig::default(), Approver::Nobody);
    let first =
        f.gw.submit(keyed(sh("echo $X", with_env("X", "1")), "k1"))
            .await
            .unwrap();
    assert_eq!(
        first.record.status,
        OperationStatus::Ok,
        "{:?}",
        first.record
    );
    assert_eq!(stdout(&first).trim(), "1");
    // The same request replays.
    let again =
        f.gw.submit(keyed(sh("echo $X", with_env("X", "1")), "k1"))
            .await
            .unwrap();
    assert_eq!(again.record.status, OperationStatus::Replayed);
    // Every other fact of the request makes it another request.
    let mut variants = vec![with_env("X", "2")];
    let mut r = with_env("X", "1");
    r.stdin = Some(b"other".to_vec());
    variants.push(r);
    let mut r = with_env("X", "1");
    r.limits.memory = ByteSize::mib(300);
    variants.push(r);
    let mut r = with_env("X", "1");
    r.limits.timeout = Duration::from_secs(7);
    variants.push(r);
    let mut r = with_env("X", "1");
    r.network = NetworkMode::Allowlist {
        allow: vec!["example.test:443".into()],
    };
    variants.push(r);
    let input = tempfile::tempdir().unwrap();
    let mut r = with_env("X", "1");
    r.input_dir = Some(input.path().to_path_buf());
    variants.push(r);
    for (i, v) in variants.into_iter().enumerate() {
        let o = f.gw.submit(keyed(sh("echo $X", v), "k1")).await.unwrap();
        assert_eq!(
            o.record.error_code.as_deref(),
            Some("SBX_E1505"),
            "variant {i}: {:?}",
            o.record
        );
        assert!(o.result.is_none(), "variant {i} ran");
    }
}

#[tokio::test]
async fn same_key_with_other_file_content_is_a_conflict() {
    let f = fx(GatewayConfig::default(), Approver::Nobody);
    let sbx = Sandbox::create(f.gw.clone(), Principal::tenant("acme"), None, None).unwrap();
    let write = |content: &'static [u8]| {
        let mut op = Operation::new(
            Principal::tenant("acme"),
            OperationArgs::FileWrite {
                path: "a.txt".into(),
                size: 0,
                content_sha256: None,
            },
        );
        op.idempotency_key = Some(IdempotencyKey::new("w1").unwrap());
        let mut s = Submission::new(op);
        s.workspace = Some(sbx.workspace().to_path_buf());
        s.content = Some(content.to_vec());
        s
    };
    let a = f.gw.submit(write(b"one")).await.unwrap();
    assert_eq!(a.record.status, OperationStatus::Ok, "{:?}", a.record);
    let b = f.gw.submit(write(b"two")).await.unwrap();
    assert_eq!(b.record.error_code.as_deref(), Some("SBX_E1505"));
    assert_eq!(
        std::fs::read(sbx.workspace().join("a.txt")).unwrap(),
        b"one"
    );
    sbx.close();
}

#[derive(Default)]
struct Collect(Mutex<Vec<(String, String)>>);

#[async_trait]
impl ApprovalCallback for Collect {
    async fn decide(&self, a: &store::Approval) -> Option<ApprovalAnswer> {
        self.0
            .lock()
            .unwrap()
            .push((a.fingerprint.clone(), a.operation.clone()));
        Some(ApprovalAnswer {
            approve: true,
            approver: "alice".into(),
            reason: None,
        })
    }
}

#[tokio::test]
async fn approvers_see_the_whole_request_and_any_difference_is_a_new_approval() {
    let c = Arc::new(Collect::default());
    let f = fx(GatewayConfig::default(), Approver::Callback(c.clone()));
    let mut r = with_env("TOKEN", "canary-value-4711");
    r.env.insert("MODE".into(), "fast".into());
    r.limits.memory = ByteSize::mib(200);
    let o = f.gw.submit(sh("echo approve-me", r.clone())).await.unwrap();
    assert_eq!(o.record.status, OperationStatus::Ok, "{:?}", o.record);
    r.env.insert("TOKEN".into(), "another-value".into());
    f.gw.submit(sh("echo approve-me", r)).await.unwrap();
    let seen = c.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_ne!(
        seen[0].0, seen[1].0,
        "another env value, another fingerprint"
    );
    let shown = &seen[0].1;
    // Names, limits and network in clear; values by digest (a credential-shaped name's
    // digest is redacted too).
    for want in ["TOKEN", "MODE", "sha256:", "209715200", "network"] {
        assert!(
            shown.contains(want),
            "approver does not see `{want}`: {shown}"
        );
    }
    assert!(!shown.contains("canary-value-4711"), "{shown}");
    assert!(!shown.contains("fast"), "{shown}");
}

#[tokio::test]
async fn policy_sees_the_network_limits_and_env_names_of_the_request() {
    let f = fx(GatewayConfig::default(), Approver::Nobody);
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.network = NetworkMode::Full;
    let o = f.gw.submit(sh("true", r)).await.unwrap();
    assert_eq!(o.record.layer, Layer::Policy);
    assert!(
        o.record.reason.contains("full network"),
        "{}",
        o.record.reason
    );
    assert!(o.result.is_none());
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.limits.memory = ByteSize::mib(2048);
    let o = f.gw.submit(sh("true", r)).await.unwrap();
    assert_eq!(o.record.layer, Layer::Policy, "{:?}", o.record);
    let o =
        f.gw.submit(sh("true", with_env("AWS_SECRET_ACCESS_KEY", "x")))
            .await
            .unwrap();
    assert_eq!(o.record.layer, Layer::Policy, "{:?}", o.record);
    // The same request without those facts runs.
    let o =
        f.gw.submit(sh("true", ExecRequest::new(Vec::<String>::new())))
            .await
            .unwrap();
    assert_eq!(o.record.status, OperationStatus::Ok, "{:?}", o.record);
}

#[tokio::test]
async fn zero_limits_take_the_default_and_ceilings_deny() {
    let mut cfg = GatewayConfig::default();
    cfg.limits_default.memory = ByteSize::mib(256);
    cfg.limits_default.pids = 64;
    let f = fx(cfg, Approver::Nobody);
    // Zero memory and pids: the configured default, never unlimited (the policy's
    // memory_above rule sees 256MiB, and the run records the limit it got).
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.limits.memory = ByteSize(0);
    r.limits.pids = 0;
    r.limits.timeout = Duration::ZERO;
    let o = f.gw.submit(sh("true", r)).await.unwrap();
    assert_eq!(o.record.status, OperationStatus::Ok, "{:?}", o.record);
    let limits = o
        .record
        .enforcement
        .as_ref()
        .map(|e| e.limits.join(" "))
        .unwrap_or_default();
    assert!(
        limits.contains("256MiB") || limits.contains("268435456"),
        "{limits}"
    );
    // Above a ceiling: denied at admit with its code, nothing runs.
    for (what, r) in [
        ("memory", {
            let mut r = ExecRequest::new(Vec::<String>::new());
            r.limits.memory = ByteSize(64 << 30);
            r
        }),
        ("timeout", {
            let mut r = ExecRequest::new(Vec::<String>::new());
            r.limits.timeout = Duration::from_secs(100 * 3600);
            r
        }),
        ("pids", {
            let mut r = ExecRequest::new(Vec::<String>::new());
            r.limits.pids = 100_000;
            r
        }),
    ] {
        let o = f.gw.submit(sh("true", r)).await.unwrap();
        assert_eq!(o.record.error_code.as_deref(), Some("SBX_E1517"), "{what}");
        assert_eq!(o.record.layer, Layer::Admit, "{what}");
        assert!(
            o.record.reason.contains(what),
            "{what}: {}",
            o.record.reason
        );
        assert!(o.result.is_none());
    }
}

fn budget_cfg() -> GatewayConfig {
    GatewayConfig {
        budget: sandboxio_budget::BudgetConfig::from_toml(
            "per_tenant = \"10.00\"\n[rate_card]\ncpu_second = \"1.00\"\n",
        )
        .unwrap(),
        ..GatewayConfig::default()
    }
}

#[tokio::test]
async fn a_tiny_estimate_does_not_dodge_the_budget() {
    let f = fx(budget_cfg(), Approver::Nobody);
    // 30 s at one CPU can cost 30.00: more than the 10.00 ceiling, whatever the estimate.
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.limits.timeout = Duration::from_secs(30);
    let mut s = sh("true", r);
    s.op.estimated_cost = Some("0.000000001".parse::<Money>().unwrap());
    let o = f.gw.submit(s).await.unwrap();
    assert_eq!(o.record.layer, Layer::Budget, "{:?}", o.record);
    assert_eq!(
        o.record.error_code.as_deref(),
        Some(sandboxio_gateway::denial::BUDGET)
    );
    assert!(
        o.record.reason.contains("most this request can cost"),
        "{}",
        o.record.reason
    );
    // 2 s at one CPU fits; the charge is the measured cost, at most the reservation.
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.limits.timeout = Duration::from_secs(2);
    let mut s = sh("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", r);
    s.op.estimated_cost = Some("0.000000001".parse::<Money>().unwrap());
    let o = f.gw.submit(s).await.unwrap();
    assert_eq!(o.record.verdict, Verdict::Allow, "{:?}", o.record);
    let reserved = o.record.cost_reserved.unwrap();
    let settled = o.record.cost_settled.unwrap();
    assert_eq!(reserved, "2.00".parse::<Money>().unwrap());
    assert!(
        settled > Money::ZERO,
        "measured CPU is charged, not the estimate"
    );
    assert!(settled <= reserved);
}

#[tokio::test]
async fn kill_switch_during_an_approval_wait_means_the_run_never_starts() {
    let f = fx(
        GatewayConfig::default(),
        Approver::Store {
            poll: Duration::from_millis(20),
        },
    );
    let gw = f.gw.clone();
    let waiting = tokio::spawn(async move {
        gw.submit(sh(
            "echo approve-me",
            ExecRequest::new(Vec::<String>::new()),
        ))
        .await
        .unwrap()
    });
    let mut approval = None;
    for _ in 0..1000 {
        let pending = f
            .store
            .list_approvals(Some(ApprovalState::Pending))
            .unwrap();
        if let Some(a) = pending.into_iter().next() {
            approval = Some(a);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let approval = approval.expect("the ask never became a pending approval");
    let k = f.gw.kill("stop everything", "test-operator").await.unwrap();
    assert_eq!(k.record.status, OperationStatus::Ok);
    // Approving after the kill is refused: the ask already ended as a denial.
    let late =
        f.gw.admin(
            "acme",
            "alice",
            AdminAction::Approve {
                approval_id: approval.id.clone(),
                reason: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(late.record.verdict, Verdict::Deny, "{:?}", late.record);
    let o = waiting.await.unwrap();
    assert_eq!(o.record.layer, Layer::KillSwitch, "{:?}", o.record);
    assert_eq!(
        o.record.error_code.as_deref(),
        Some(sandboxio_gateway::denial::KILL_SWITCH)
    );
    assert!(o.result.is_none(), "the run must never start");
    assert!(o.record.sandbox_id.is_none());
}

#[tokio::test]
async fn admin_actions_are_operations_with_records() {
    let f = fx(GatewayConfig::default(), Approver::Nobody);
    f.gw.kill("drill", "bob").await.unwrap();
    let denied =
        f.gw.submit(sh("true", ExecRequest::new(Vec::<String>::new())))
            .await
            .unwrap();
    assert_eq!(denied.record.layer, Layer::KillSwitch);
    f.gw.admin("default", "bob", AdminAction::Resume)
        .await
        .unwrap();
    let unknown =
        f.gw.admin(
            "default",
            "bob",
            AdminAction::Deny {
                approval_id: "apr_nope".into(),
                reason: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(unknown.record.error_code.as_deref(), Some("SBX_E1507"));
    let events = f.sink.0.lock().unwrap().clone();
    let admin: Vec<_> = events.iter().filter(|e| e.event == "admin").collect();
    assert_eq!(admin.len(), 3, "kill, resume, deny: {events:?}");
    assert!(admin.iter().all(|e| e.agent_id.as_deref() == Some("bob")));
    let ok =
        f.gw.submit(sh("true", ExecRequest::new(Vec::<String>::new())))
            .await
            .unwrap();
    assert_eq!(ok.record.status, OperationStatus::Ok);
}

/// One exec a minute: the second is refused at the admission's rate limit.
fn one_exec_a_minute() -> GatewayConfig {
    GatewayConfig {
        rate_limits: sandboxio_budget::RateLimitsConfig {
            limit: vec![sandboxio_budget::RateLimitRule {
                action: "exec".into(),
                limit: "1/minute".parse().unwrap(),
                tenant: None,
                agent: None,
                per: Default::default(),
            }],
        },
        ..GatewayConfig::default()
    }
}

/// What the sandboxes left in a work root.
fn left_in(root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// How many times the payloads appended to `mark`.
fn runs_in(mark: &std::path::Path) -> usize {
    std::fs::read_to_string(mark)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The sandbox starts beside its admission, held at its release until the admission is
/// durable (`chain/launch.rs`). Every way an admission refuses (rate limit, budget, kill
/// switch, a replayed key) must withdraw it: the payload never runs, and its workspace is
/// gone when the refusal is answered.
#[tokio::test]
async fn a_refused_admission_runs_nothing_of_the_sandbox_started_beside_it() {
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("ran");
    let script = format!("echo ran >> {}", mark.display());
    let rated = one_exec_a_minute();
    let cases: Vec<(&str, GatewayConfig, Layer)> = vec![
        ("rate limit", rated, Layer::RateLimit),
        ("budget", budget_cfg(), Layer::Budget),
        ("kill switch", GatewayConfig::default(), Layer::KillSwitch),
        ("replayed key", GatewayConfig::default(), Layer::Idempotency),
    ];
    for (case, cfg, layer) in cases {
        let _ = std::fs::remove_file(&mark);
        let root = tempfile::tempdir().unwrap();
        let f = fx_in(cfg, Approver::Nobody, Some(root.path()));
        let sub = |key: &str| keyed(sh(&script, ExecRequest::new(Vec::<String>::new())), key);
        // What the refusal needs: one run before it, or the switch engaged, or a ceiling
        // the estimate passes.
        let refused = match case {
            "rate limit" => {
                let first = f.gw.submit(sub("a")).await.unwrap();
                assert_eq!(first.record.status, OperationStatus::Ok, "{case}");
                sub("b")
            }
            "replayed key" => {
                let first = f.gw.submit(sub("a")).await.unwrap();
                assert_eq!(first.record.status, OperationStatus::Ok, "{case}");
                sub("a")
            }
            "kill switch" => {
                f.store
                    .set_kill("test", "tester", chrono::Utc::now())
                    .unwrap();
                sub("a")
            }
            _ => {
                let mut s = sub("a");
                s.op.estimated_cost = Some("50.00".parse::<Money>().unwrap());
                s
            }
        };
        let before = runs_in(&mark);
        let out = f.gw.submit(refused).await.unwrap();
        assert_eq!(out.record.layer, layer, "{case}: {:?}", out.record);
        assert!(out.result.is_none() || case == "replayed key", "{case}");
        assert_eq!(left_in(root.path()), Vec::<String>::new(), "{case}");
        // A payload that had been let go would have appended by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(runs_in(&mark), before, "{case}: the refused payload ran");
    }
}

/// The payload starts only once the admission is durable: while another connection holds
/// the database's write lock, the admission waits, and so does the sandbox started beside
/// it; released, the run goes on and answers as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payload_waits_for_the_admission_to_be_durable() {
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("ran");
    let root = tempfile::tempdir().unwrap();
    let f = fx_in(
        GatewayConfig::default(),
        Approver::Nobody,
        Some(root.path()),
    );
    // Warm up: the first run sweeps, opens what it needs.
    let warm =
        f.gw.submit(sh("true", ExecRequest::new(Vec::<String>::new())))
            .await
            .unwrap();
    assert_eq!(warm.record.status, OperationStatus::Ok);
    let db = f._dir.path().join("s.db");
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (free_tx, free_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let mut c = rusqlite::Connection::open(&db).unwrap();
        let t = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        locked_tx.send(()).unwrap();
        free_rx.recv().unwrap();
        t.commit().unwrap();
    });
    locked_rx.recv().unwrap();
    let gw = f.gw.clone();
    let script = format!("echo ran >> {}", mark.display());
    let run = tokio::spawn(async move {
        gw.submit(sh(&script, ExecRequest::new(Vec::<String>::new())))
            .await
    });
    // The sandbox is prepared (a workspace exists) while its admission waits for the lock.
    let mut prepared = false;
    for _ in 0..200 {
        if !left_in(root.path()).is_empty() {
            prepared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(prepared, "the sandbox was not started beside the admission");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        runs_in(&mark),
        0,
        "the payload ran before its admission was durable"
    );
    assert!(!run.is_finished());
    free_tx.send(()).unwrap();
    holder.join().unwrap();
    let out = run.await.unwrap().unwrap();
    assert_eq!(out.record.status, OperationStatus::Ok, "{:?}", out.record);
    assert_eq!(runs_in(&mark), 1);
    assert_eq!(left_in(root.path()), Vec::<String>::new());
}

/// A refused admission holds back the tenant's next early starts: a flood bound to be
/// refused (here by a rate limit) prepares no sandbox each. Watched from outside: the work
/// root stays empty while twenty more requests are refused (a sandbox started for any of
/// them would leave its workspace there for milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_refused_lately_prepares_no_sandbox_for_its_next_refusals() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let root = tempfile::tempdir().unwrap();
    let rated = one_exec_a_minute();
    let f = fx_in(rated, Approver::Nobody, Some(root.path()));
    let run = || sh("true", ExecRequest::new(Vec::<String>::new()));
    assert_eq!(
        f.gw.submit(run()).await.unwrap().record.status,
        OperationStatus::Ok
    );
    // The first refusal: its sandbox was started beside the admission and withdrawn.
    let first = f.gw.submit(run()).await.unwrap();
    assert_eq!(first.record.layer, Layer::RateLimit);
    let seen = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = std::thread::spawn({
        let (seen, stop, root) = (seen.clone(), stop.clone(), root.path().to_path_buf());
        move || {
            while !stop.load(Ordering::SeqCst) {
                if !left_in(&root).is_empty() {
                    seen.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    });
    for _ in 0..20 {
        let o = f.gw.submit(run()).await.unwrap();
        assert_eq!(o.record.layer, Layer::RateLimit, "{:?}", o.record);
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    assert!(
        !seen.load(Ordering::SeqCst),
        "a sandbox was prepared for a tenant refused moments before"
    );
}

#[tokio::test]
async fn a_price_past_what_money_holds_is_refused_not_run_free() {
    let cfg = GatewayConfig {
        budget: sandboxio_budget::BudgetConfig::from_toml(
            "per_tenant = \"1.00\"\n[rate_card]\ncpu_second = \"70000000000000000000000000000\"\n",
        )
        .unwrap(),
        ..GatewayConfig::default()
    };
    let f = fx(cfg, Approver::Nobody);
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.limits.timeout = Duration::from_secs(2);
    let o = f.gw.submit(sh("true", r)).await.unwrap();
    assert_eq!(o.record.layer, Layer::Budget, "{:?}", o.record);
    assert!(
        o.record
            .reason
            .contains("past what a money amount can hold"),
        "{}",
        o.record.reason
    );
    assert!(o.result.is_none(), "it ran");
}

/// An idempotency key covers what the input directory holds: the same request over the same
/// files replays, over changed files it is a conflict (`SBX_E1505`), never the old answer.
#[tokio::test]
async fn same_key_with_other_input_contents_is_a_conflict() {
    let f = fx(GatewayConfig::default(), Approver::Nobody);
    let input = tempfile::tempdir().unwrap();
    std::fs::write(input.path().join("f"), "A\n").unwrap();
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.input_dir = Some(input.path().to_path_buf());
    let submit = || keyed(sh("cat \"$SANDBOX_INPUT/f\"", r.clone()), "k-input");
    let first = f.gw.submit(submit()).await.unwrap();
    assert_eq!(
        first.record.status,
        OperationStatus::Ok,
        "{:?}",
        first.record
    );
    assert_eq!(stdout(&first), "A\n");
    let again = f.gw.submit(submit()).await.unwrap();
    assert_eq!(again.record.status, OperationStatus::Replayed);
    assert_eq!(stdout(&again), "A\n");
    std::fs::write(input.path().join("f"), "B\n").unwrap();
    let changed = f.gw.submit(submit()).await.unwrap();
    assert_eq!(
        changed.record.error_code.as_deref(),
        Some("SBX_E1505"),
        "{:?}",
        changed.record
    );
    assert!(!stdout(&changed).contains('A'), "the old answer came back");
}

/// Input streamed while the program runs cannot be covered by an approval: under `ask`
/// the request is refused before anyone is asked (`SBX_E1559`).
#[tokio::test]
async fn streamed_stdin_is_refused_where_a_person_must_approve() {
    let c = Arc::new(Collect::default());
    let f = fx(GatewayConfig::default(), Approver::Callback(c.clone()));
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.stdin_stream = true;
    let o = f.gw.submit(sh("echo approve-me", r)).await.unwrap();
    assert_eq!(
        o.record.error_code.as_deref(),
        Some(sandboxio_gateway::denial::APPROVAL_STREAMED_STDIN),
        "{:?}",
        o.record
    );
    assert!(o.result.is_none());
    assert!(c.0.lock().unwrap().is_empty(), "nobody is asked");
    // The same request with its bytes is asked about, and runs.
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.stdin = Some(b"ignored".to_vec());
    let o = f.gw.submit(sh("echo approve-me", r)).await.unwrap();
    assert_eq!(o.record.status, OperationStatus::Ok, "{:?}", o.record);
    assert_eq!(c.0.lock().unwrap().len(), 1);
}

/// A read-only directory too large to pin cannot be approved: nobody could know what the
/// program would read there (`SBX_E1566`), and nobody is asked.
#[tokio::test]
async fn a_directory_too_large_to_pin_is_refused_where_a_person_must_approve() {
    let c = Arc::new(Collect::default());
    let f = fx(GatewayConfig::default(), Approver::Callback(c.clone()));
    let input = tempfile::tempdir().unwrap();
    for i in 0..50_001 {
        std::fs::write(input.path().join(i.to_string()), b"").unwrap();
    }
    let mut r = ExecRequest::new(Vec::<String>::new());
    r.input_dir = Some(input.path().to_path_buf());
    let o = f.gw.submit(sh("echo approve-me", r)).await.unwrap();
    assert_eq!(
        o.record.error_code.as_deref(),
        Some(sandboxio_gateway::denial::PINNED_TOO_LARGE),
        "{:?}",
        o.record
    );
    assert!(o.result.is_none());
    assert!(c.0.lock().unwrap().is_empty(), "nobody is asked");
}
