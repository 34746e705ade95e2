//! Concurrency against one budget ceiling (issue 4, DESIGN invariant 3): 8 submitter
//! threads, each running `sandboxio run` N times in sequence (8 OS processes at a time
//! sharing one SQLite store), every request reserving 0.01 with a rate card that charges
//! exactly 0.01 per call (settle == reserve, estimate-bounded).
//!
//! N: the target is 500 per submitter (4,000 CLI processes). One CLI run costs
//! ~50-150 ms of mostly fsync and process start on this 2-core host, so 4,000 take several
//! minutes; the default here is N = 60 (480 requests, ceiling 3.00 = 300 fit). Set
//! SBX_CONC_N=500 to run the full size.
//!
//! Each submitter has its own audit file: the audit FileSink has no inter-process lock, so
//! concurrent CLI processes appending to one trail fork its hash chain and later opens fail
//! with SBX_E1603 (see `shared_audit_trail_under_concurrent_writers`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use sandboxio_core::Money;
use sandboxio_gateway::store::Store;

use crate::common::*;

const SUBMITTERS: usize = 8;

fn n() -> usize {
    std::env::var("SBX_CONC_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

fn config(env: &Env, i: usize, ceiling: &str) -> PathBuf {
    let audit = env.path().join(format!("audit-{i}.jsonl"));
    env.write_config(
        &format!("config-{i}.toml"),
        &format!(
            "[audit]\nfile = \"{}\"\n\n[budget]\nglobal = \"{ceiling}\"\n\n[budget.rate_card]\ncpu_second = \"0\"\ngib_second = \"0\"\nper_call = \"0.01\"\n",
            audit.display()
        ),
    )
}

struct Tally {
    ok: AtomicUsize,
    denied: AtomicUsize,
    killed: AtomicUsize,
    other: std::sync::Mutex<Vec<String>>,
}

/// Runs the 8 submitters; `kill_p` is the chance that a request's process is SIGKILLed.
fn storm(env: &Arc<Env>, per: usize, ceiling: &str, kill_p: f64) -> (Arc<Tally>, Duration) {
    let tally = Arc::new(Tally {
        ok: AtomicUsize::new(0),
        denied: AtomicUsize::new(0),
        killed: AtomicUsize::new(0),
        other: Default::default(),
    });
    let t0 = Instant::now();
    let mut hs = Vec::new();
    for i in 0..SUBMITTERS {
        let cfg = config(env, i, ceiling);
        let env = env.clone();
        let tally = tally.clone();
        hs.push(std::thread::spawn(move || {
            let mut rng = rand::thread_rng();
            for _ in 0..per {
                let mut c = env.run_cmd(Some(&cfg), &["--estimated-cost", "0.01"], &["true"]);
                c.stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped());
                if kill_p > 0.0 && rng.gen_bool(kill_p) {
                    let mut ch = c.spawn().unwrap();
                    std::thread::sleep(Duration::from_millis(rng.gen_range(0..150)));
                    if ch.try_wait().unwrap().is_none() {
                        ch.kill().unwrap();
                        let _ = ch.wait();
                        tally.killed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let code = ch.wait().unwrap().code();
                    count(&tally, code, String::new());
                    continue;
                }
                let out = c.output().unwrap();
                count(
                    &tally,
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                );
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    (tally, t0.elapsed())
}

fn count(t: &Tally, code: Option<i32>, err: String) {
    match code {
        Some(0) => t.ok.fetch_add(1, Ordering::Relaxed),
        Some(120) if err.is_empty() || err.contains("at budget") => {
            t.denied.fetch_add(1, Ordering::Relaxed)
        }
        c => {
            t.other.lock().unwrap().push(format!("{c:?}: {err}"));
            0
        }
    };
}

fn ledger_total(env: &Env) -> (usize, Money) {
    let lines = env
        .store()
        .ledger(
            chrono::Utc::now() - chrono::Duration::hours(1),
            chrono::Utc::now() + chrono::Duration::hours(1),
        )
        .unwrap();
    let total = lines
        .iter()
        .fold(Money::ZERO, |a, l| a.checked_add(l.amount).unwrap());
    (lines.len(), total)
}

#[test]
fn eight_submitters_never_pass_the_ceiling() {
    let env = Arc::new(Env::new("conc", "process"));
    let per = n();
    // 60% of the requests fit.
    let fit = per * SUBMITTERS * 6 / 10;
    let ceiling = Money::from_minor(fit as i64, 2).unwrap();
    let (t, took) = storm(&env, per, &ceiling.to_string(), 0.0);
    let ok = t.ok.load(Ordering::Relaxed);
    let denied = t.denied.load(Ordering::Relaxed);
    let total = per * SUBMITTERS;
    println!(
        "{total} requests by {SUBMITTERS} submitters in {took:?} ({:.1} ops/s): {ok} allowed, {denied} denied by budget",
        total as f64 / took.as_secs_f64()
    );
    let other = t.other.lock().unwrap().clone();
    assert!(other.is_empty(), "unexpected outcomes: {other:?}");
    let (lines, spent) = ledger_total(&env);
    // Never over the ceiling; every settle charged exactly the reservation.
    assert!(spent <= ceiling, "spent {spent} > ceiling {ceiling}");
    assert_eq!(spent, Money::from_minor(lines as i64, 2).unwrap());
    // No request was denied while the unreserved budget covered it: a deny happens only
    // when spent + reserved + 0.01 > ceiling, and every reservation settles at exactly 0.01,
    // so a wrongful deny would leave the ceiling unspent. Exactly `fit` were allowed.
    assert_eq!(ok, fit, "allowed {ok}, expected exactly {fit}");
    assert_eq!(lines, fit);
    assert_eq!(spent, ceiling);
    assert_eq!(env.live_counts(), Default::default());
}

#[test]
fn eight_submitters_with_sigkills_leak_nothing() {
    let env = Arc::new(Env::new("conck", "process"));
    let per = n();
    let fit = per * SUBMITTERS * 6 / 10;
    let ceiling = Money::from_minor(fit as i64, 2).unwrap();
    let (t, took) = storm(&env, per, &ceiling.to_string(), 0.2);
    let ok = t.ok.load(Ordering::Relaxed);
    let killed = t.killed.load(Ordering::Relaxed);
    println!(
        "with kills: {} requests in {took:?}: {ok} allowed, {} denied, {killed} SIGKILLed",
        per * SUBMITTERS,
        t.denied.load(Ordering::Relaxed)
    );
    let other = t.other.lock().unwrap().clone();
    assert!(other.is_empty(), "unexpected outcomes: {other:?}");
    // Reopen the store through a fresh process: its start runs `recover`.
    let cfg = config(&env, 99, &ceiling.to_string());
    let out = env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 120)), "{out:?}");
    let (lines, spent) = ledger_total(&env);
    assert!(spent <= ceiling, "spent {spent} > ceiling {ceiling}");
    assert_eq!(spent, Money::from_minor(lines as i64, 2).unwrap());
    // Killed runs may have settled before dying: the ledger holds at least what the
    // submitters saw succeed.
    assert!(lines >= ok, "ledger has {lines} lines, {ok} runs succeeded");
    assert_eq!(env.live_counts(), Default::default(), "leaked state");
}

/// FINDING (not fixed here: sandboxio-audit owns FileSink): concurrent `sandboxio run`
/// processes that share one audit trail fork its hash chain (FileSink keeps the chain head
/// in memory and takes no inter-process lock), and a later open fails with SBX_E1603
/// "audit chain broken", so runs fail until the trail is repaired.
#[test]
fn shared_audit_trail_under_concurrent_writers() {
    let env = Arc::new(Env::new("conca", "process"));
    let mut hs = Vec::new();
    for _ in 0..SUBMITTERS {
        let env = env.clone();
        hs.push(std::thread::spawn(move || {
            (0..10)
                .map(|_| env.run_cmd(None, &[], &["true"]).output().unwrap())
                .filter(|o| o.status.code() != Some(0))
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect::<Vec<_>>()
        }));
    }
    let failed: Vec<String> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let files = env.audit_files(&env.state().join("audit.jsonl"));
    let report = sandboxio_audit::verify(&files, None);
    assert!(failed.is_empty(), "runs failed: {failed:?}");
    assert!(report.ok, "verify: {:?}", report.first_bad);
}
