#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Overspend harness (issue 9, DESIGN invariant 3): 8 OS processes at a time (the real
//! `sandboxio` binary, one shared state directory and audit trail) hammer one ceiling with
//! adversarial estimates (tiny, zero, absent, huge, larger than the bound) and with runs
//! whose measured cost exceeds the caller's estimate: busy loops that burn their CPU quota
//! until the timeout kills them. Two storms: tenant `acme` with a whole core per run
//! reaches its ceiling; tenant `beta` with a tenth of a core per run overruns.
//!
//! The reservation of a run is the most it can cost under its limits (timeout x CPU
//! quota), so a tiny or missing estimate cannot lower it. A CPU quota is enforced per
//! scheduler period (100 ms), so a run can burn a little more than `timeout x quota`
//! (one more period's quota, and the kernel's slice overshoot): that measurement passes
//! the reservation, which is the overrun the design allows: charged in full, recorded as
//! a `budget_warning`, and it closes every scope of the reservation. The harness checks:
//!
//! - spend never passes the ceiling except by the overruns, and the store's overrun total
//!   equals the sum of what the trail's records show;
//! - every operation that ran is in the trail exactly once and in the ledger exactly once,
//!   and the trail's charges add up to the ledger's;
//! - a huge estimate is refused and changes nothing;
//! - after an overrun the scopes are closed: no operation that started after the close was
//!   admitted, and a fresh run is refused until an operator reopens the scope;
//! - nothing leaks (reservations, intents, keys) and the trail verifies.

#[path = "reliability/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use common::Env;
use sandboxio_audit::AuditEvent;
use sandboxio_budget::{BudgetConfig, ScopeKey, Summary};
use sandboxio_core::{Money, OperationStatus};
use sandboxio_gateway::store::Store;

const SUBMITTERS: usize = 8;
const CEILING: &str = "1.00";

/// The same budget for every process: each tenant may spend 1.00 in its lifetime and 1.00
/// a day; CPU costs 1.00 a second, a call 0.01.
const BUDGET: &str = r#"
[budget]
per_tenant = "1.00"

[[budget.ceiling]]
scope = "tenant"
amount = "1.00"
window = "day"

[budget.rate_card]
cpu_second = "1.00"
gib_second = "0"
per_call = "0.01"
"#;

/// A whole core for 250 ms: the bound is 0.26. Busy loops sharing 2 cores with 7 others
/// measure well under it.
const WHOLE_CORE: &str = "[limits]\ntimeout = \"250ms\"\ncpu_millis = 1000\n";
/// A tenth of a core for 250 ms: the bound is 25 ms of CPU (0.035), and the quota is
/// refilled every 100 ms period, so a busy loop that spans three periods measures more.
const TENTH_CORE: &str = "[limits]\ntimeout = \"250ms\"\ncpu_millis = 100\n";

/// What the caller claims: nothing, zero, a billionth, far more than the ceiling, or more
/// than the bound (which then is the reservation).
const ESTIMATES: [Option<&str>; 5] = [
    None,
    Some("0"),
    Some("0.000000001"),
    Some("1000000"),
    Some("0.3"),
];
const HUGE: &str = "1000000";

#[derive(Debug, Clone)]
struct Attempt {
    tenant: &'static str,
    estimate: Option<&'static str>,
    busy: bool,
    exit: Option<i32>,
    record: serde_json::Value,
    /// When the process had exited: its finish transaction had committed by then.
    returned: DateTime<Utc>,
}

impl Attempt {
    fn id(&self) -> &str {
        self.record["operation_id"].as_str().unwrap()
    }
    fn denied(&self) -> bool {
        self.exit == Some(120)
    }
}

fn attempt(
    env: &Env,
    cfg: &Path,
    tenant: &'static str,
    estimate: Option<&'static str>,
    busy: bool,
) -> Attempt {
    let mut extra = vec!["--json", "--tenant", tenant];
    if let Some(e) = estimate {
        extra.extend(["--estimated-cost", e]);
    }
    let argv: &[&str] = if busy {
        &["sh", "-c", "while :; do :; done"]
    } else {
        &["true"]
    };
    let out = env.run_cmd(Some(cfg), &extra, argv).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no JSON answer ({e}), exit {:?}, stdout {stdout:?}, stderr {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Attempt {
        tenant,
        estimate,
        busy,
        exit: out.status.code(),
        record: v["record"].clone(),
        returned: Utc::now(),
    }
}

/// `SUBMITTERS` threads, each running `per` CLI processes one after another.
fn storm(env: &Arc<Env>, cfg: &Path, tenant: &'static str, per: usize) -> Vec<Attempt> {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let hs: Vec<_> = (0..SUBMITTERS)
        .map(|i| {
            let (env, cfg, attempts) = (env.clone(), cfg.to_path_buf(), attempts.clone());
            std::thread::spawn(move || {
                for j in 0..per {
                    let estimate = ESTIMATES[(i + j) % ESTIMATES.len()];
                    // Mostly busy loops (they spend), some quick runs (they barely do).
                    let busy = !(i * per + j).is_multiple_of(3);
                    let a = attempt(&env, &cfg, tenant, estimate, busy);
                    attempts.lock().unwrap().push(a);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let v = attempts.lock().unwrap().clone();
    assert_eq!(v.len(), SUBMITTERS * per);
    check_answers(&v);
    v
}

/// What holds for every storm: each answer is a run or a denial; a huge estimate never
/// runs; tiny, zero and absent estimates are charged what they measured.
fn check_answers(attempts: &[Attempt]) {
    for a in attempts {
        // A run (exit 0, or 124 for a busy loop at its timeout) or a denial (120).
        let ok = matches!(
            (a.busy, a.exit),
            (false, Some(0)) | (true, Some(124)) | (_, Some(120))
        );
        assert!(ok, "unexpected answer: {a:?}");
    }
    for a in attempts.iter().filter(|a| a.estimate == Some(HUGE)) {
        assert!(a.denied(), "a huge estimate ran: {a:?}");
        assert_eq!(a.record["layer"], "budget", "{a:?}");
        assert_eq!(a.record["error_code"], "SBX_E1553", "{a:?}");
    }
    let dodgers: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| !a.denied() && a.busy)
        .filter(|a| matches!(a.estimate, None | Some("0") | Some("0.000000001")))
        .collect();
    assert!(
        !dodgers.is_empty(),
        "no busy run with a tiny, zero or absent estimate was admitted"
    );
    for a in dodgers {
        let settled = money(&a.record["cost_settled"]).unwrap();
        let reserved = money(&a.record["cost_reserved"]).unwrap();
        assert!(
            settled > Money::from_minor(1, 2).unwrap(),
            "a busy run was charged only {settled}: {a:?}"
        );
        assert!(
            reserved >= Money::from_minor(35, 3).unwrap(),
            "reserved {reserved}, less than the bound: {a:?}"
        );
    }
}

fn money(v: &serde_json::Value) -> Option<Money> {
    v.as_str().map(|s| s.parse().unwrap())
}

fn sum(it: impl Iterator<Item = Money>) -> Money {
    it.fold(Money::ZERO, |a, m| a.checked_add(m).unwrap())
}

fn trail(env: &Env) -> Vec<AuditEvent> {
    let files = env.audit_files(&env.state().join("audit.jsonl"));
    let report = sandboxio_audit::verify(&files, None);
    assert!(report.ok, "the shared trail does not verify: {report:?}");
    sandboxio_audit::read_events(&files)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// When an operation started: its record is written at its end.
fn started(e: &AuditEvent) -> DateTime<Utc> {
    e.ts - chrono::Duration::milliseconds(e.duration_ms as i64)
}

/// What a charged record was charged past its reservation.
fn overrun_of(e: &AuditEvent) -> Money {
    let over = e
        .cost_settled
        .unwrap()
        .checked_sub(e.cost_reserved.unwrap())
        .unwrap();
    over.max(Money::ZERO)
}

fn budget_config() -> BudgetConfig {
    let table = BUDGET
        .trim()
        .strip_prefix("[budget]")
        .unwrap()
        .replace("[[budget.ceiling]]", "[[ceiling]]")
        .replace("[budget.rate_card]", "[rate_card]");
    BudgetConfig::from_toml(&table).unwrap()
}

fn summary(env: &Env, scope: ScopeKey) -> Summary {
    env.store()
        .budget_summary(&budget_config(), &[scope])
        .unwrap()
        .remove(0)
}

#[test]
fn eight_processes_with_adversarial_estimates_never_overspend() {
    let env = Arc::new(Env::new("overspend", "process"));
    let whole = env.write_config("whole.toml", &format!("{BUDGET}\n{WHOLE_CORE}"));
    let tenth = env.write_config("tenth.toml", &format!("{BUDGET}\n{TENTH_CORE}"));
    let ceiling: Money = CEILING.parse().unwrap();

    // Storm 1: `acme` hammers its ceiling. Near it, estimates that would fit are refused
    // because the reservation is the bound, not the estimate.
    let first = storm(&env, &whole, "acme", 6);
    let at_ceiling = first
        .iter()
        .filter(|a| a.denied() && a.estimate != Some(HUGE))
        .filter(|a| a.record["reason"].as_str().unwrap().contains("ceiling"))
        .count();
    assert!(at_ceiling > 0, "acme never reached its ceiling: {first:?}");
    // Whatever a storm closed (an overrun there is allowed too) an operator reopens, as a
    // recorded action, before the next storm.
    for scope in [ScopeKey::Global, ScopeKey::Tenant("acme".into())] {
        if summary(&env, scope.clone()).closed.is_some() {
            let out = env
                .cmd("budget", Some(&whole))
                .args(["--reopen", &scope.to_string()])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
    }
    assert!(summary(&env, ScopeKey::Global).closed.is_none());

    // Storm 2: `beta` with a tenth of a core: busy loops measure more than their bound.
    let second = storm(&env, &tenth, "beta", 3);

    // The trail: every operation exactly once; the charges add up to the ledger.
    let attempts: Vec<&Attempt> = first.iter().chain(&second).collect();
    let events = trail(&env);
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e.event == "exec") {
        *seen.entry(e.operation_id.as_str()).or_default() += 1;
    }
    for a in &attempts {
        assert_eq!(
            seen.get(a.id()),
            Some(&1),
            "operation {} in the trail",
            a.id()
        );
    }
    assert_eq!(
        seen.len(),
        attempts.len(),
        "exec records no process answered"
    );
    let charged: BTreeMap<&str, &AuditEvent> = events
        .iter()
        .filter(|e| e.event == "exec" && e.cost_settled.is_some())
        .map(|e| (e.operation_id.as_str(), e))
        .collect();
    let ran: Vec<&&Attempt> = attempts.iter().filter(|a| !a.denied()).collect();
    assert_eq!(charged.len(), ran.len(), "charged records vs runs");
    let ledger = env
        .store()
        .ledger(
            Utc::now() - chrono::Duration::hours(1),
            Utc::now() + chrono::Duration::hours(1),
        )
        .unwrap();
    let mut lines: BTreeMap<&str, Money> = BTreeMap::new();
    for l in &ledger {
        let twice = lines.insert(l.operation_id.as_str(), l.amount).is_some();
        assert!(
            !twice,
            "operation {} is in the ledger twice",
            l.operation_id
        );
    }
    for (id, e) in &charged {
        assert_eq!(
            lines.get(id),
            e.cost_settled.as_ref(),
            "ledger vs trail: {id}"
        );
    }
    assert_eq!(lines.len(), charged.len(), "ledger charges the trail lacks");

    // Per tenant and overall: spend passes a ceiling by at most the recorded overruns.
    let global = summary(&env, ScopeKey::Global);
    assert_eq!(global.total, sum(ledger.iter().map(|l| l.amount)));
    assert_eq!(global.reserved, Money::ZERO, "a reservation leaked");
    let mut overrun_total = Money::ZERO;
    for (tenant, storm) in [("acme", &first), ("beta", &second)] {
        let mine: Vec<&AuditEvent> = storm
            .iter()
            .filter_map(|a| charged.get(a.id()).copied())
            .collect();
        let spent = sum(mine.iter().map(|e| e.cost_settled.unwrap()));
        let overrun = sum(mine.iter().map(|e| overrun_of(e)));
        let s = summary(&env, ScopeKey::Tenant(tenant.into()));
        println!(
            "{tenant}: {} attempts by {SUBMITTERS} processes, {} ran; spent {spent} of {ceiling}, overruns {overrun} ({} runs)",
            storm.len(),
            mine.len(),
            mine.iter().filter(|e| overrun_of(e) > Money::ZERO).count()
        );
        assert_eq!(s.total, spent, "{tenant}: the store and the trail disagree");
        assert_eq!(
            s.overrun, overrun,
            "{tenant}: overruns in the store vs the trail"
        );
        assert!(
            spent <= ceiling.checked_add(overrun).unwrap(),
            "{tenant} spent {spent} > ceiling {ceiling} + overruns {overrun}"
        );
        assert!(storm.iter().all(|a| a.tenant == tenant));
        overrun_total = overrun_total.checked_add(overrun).unwrap();
    }
    assert_eq!(global.overrun, overrun_total);

    // The overrun of storm 2: recorded, it closed the scopes, and nothing that started
    // after it had settled was admitted (runs already in flight may still overrun: at
    // most one per process).
    let overruns: Vec<&AuditEvent> = second
        .iter()
        .filter_map(|a| charged.get(a.id()).copied())
        .filter(|e| overrun_of(e) > Money::ZERO)
        .collect();
    if overruns.is_empty() {
        // Whether a throttled busy loop measures more than its bound depends on how much CPU
        // the host gives it within each quota period; a loaded host may give less. The
        // invariants above held; the overrun path is also proven deterministically in the
        // gateway's budget tests.
        println!(
            "skipping the overrun checks: no busy loop with a tenth of a core measured more \
             than its bound on this host"
        );
        assert_eq!(env.live_counts(), Default::default(), "leaked state");
        return;
    }
    assert!(overruns.len() <= SUBMITTERS, "{} overruns", overruns.len());
    for e in &overruns {
        let recorded = events.iter().any(|w| {
            w.event == "budget_warning"
                && w.reason.contains(&e.operation_id)
                && w.reason.contains("more than its reservation")
        });
        assert!(recorded, "the overrun of {} left no record", e.operation_id);
    }
    assert!(
        global.closed.is_some(),
        "an overrun did not close the global scope"
    );
    let beta = summary(&env, ScopeKey::Tenant("beta".into()));
    assert!(
        beta.closed.is_some(),
        "an overrun did not close tenant beta"
    );
    let returned: BTreeMap<&str, DateTime<Utc>> =
        second.iter().map(|a| (a.id(), a.returned)).collect();
    let closed_at = overruns
        .iter()
        .map(|e| returned[e.operation_id.as_str()])
        .min()
        .unwrap();
    for a in second.iter().filter(|a| !a.denied()) {
        let e = charged[a.id()];
        assert!(
            started(e) <= closed_at,
            "operation {} started at {} after the scopes closed at {closed_at}, and ran",
            e.operation_id,
            started(e)
        );
    }
    // A fresh run with a tiny estimate is refused until an operator reopens the scope.
    let after = attempt(&env, &tenth, "beta", Some("0.000000001"), false);
    assert!(after.denied(), "{after:?}");
    assert_eq!(
        after.record["status"],
        serde_json::json!(OperationStatus::Denied)
    );
    let why = after.record["reason"].as_str().unwrap();
    assert!(
        why.contains("is closed") && why.contains("--reopen"),
        "{after:?}"
    );
    assert_eq!(env.live_counts(), Default::default(), "leaked state");
}
