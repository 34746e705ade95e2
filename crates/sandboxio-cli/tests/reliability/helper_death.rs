//! The sandbox helper SIGKILLed while its program runs (the supervisor gone, not the CLI):
//! the program must not run on unsupervised, and the run must be charged and recorded as
//! what it was (it ran, then its sandbox failed), not as a run that never started. And
//! with the CLI killed too, nobody left to kill the program's cgroup: the program dies
//! with its helper (the parent-death signal, which a change of ids clears, armed again).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A tenth of a cent a CPU second plus a cent a call: every run's reservation is above 0.
const BUDGET: &str = "[limits]\ntimeout = \"60s\"\n\n[budget]\nper_tenant = \"100\"\n\n\
                      [budget.rate_card]\ncpu_second = \"0.001\"\ngib_second = \"0\"\n\
                      per_call = \"0.01\"\n";

/// The pid of `cli`'s child that is the sandbox helper, once the program (carrying the
/// marker) runs.
fn helper_of(cli: &Child, marker: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "the program never started");
        let running = procs_with(marker)
            .into_iter()
            .filter(|p| *p != cli.id())
            .count();
        if running > 0 {
            let mut kids = Vec::new();
            if let Ok(rd) = std::fs::read_dir(format!("/proc/{}/task", cli.id())) {
                for t in rd.flatten() {
                    let text =
                        std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                    kids.extend(
                        text.split_whitespace()
                            .filter_map(|p| p.parse::<u32>().ok()),
                    );
                }
            }
            if let Some(h) = kids.into_iter().find(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("__sandboxio-helper"))
                    .unwrap_or(false)
            }) {
                return h;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start(env: &Env, config: &std::path::Path, key: &str) -> Child {
    // Long enough that only a kill ends it while the test looks.
    let script = format!("sleep 30; : {}", env.marker);
    env.run_cmd(
        Some(config),
        &["--json", "--idempotency-key", key],
        &["sh", "-c", &script],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

#[test]
fn a_killed_helper_takes_its_program_along_and_the_run_is_charged() {
    for tier in ["namespace", "process"] {
        let env = Env::new(&format!("hdeath-{tier}"), tier);
        let config = env.write_config("budget.toml", BUDGET);
        let cli = start(&env, &config, "k1");
        let helper = helper_of(&cli, &env.marker);
        signal(helper, "KILL");
        let out = cli.wait_with_output().unwrap();
        let left = wait_no_procs(&env.marker, Duration::from_secs(5));
        assert!(
            left.is_empty(),
            "{tier}: the program outlived its helper: {}",
            describe_and_stop(&left)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{tier}: no JSON ({e}): {} / {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let rec = &v["record"];
        assert_eq!(rec["status"], "error", "{tier}: {rec}");
        assert_eq!(rec["error_code"], "SBX_E1415", "{tier}: {rec}");
        let reason = rec["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("failed during the run") && reason.contains("was killed"),
            "{tier}: the record must say the program ran: {reason}"
        );
        // Unmeasured, it is charged what was reserved for it, and the ledger holds it.
        let reserved = rec["cost_reserved"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(!reserved.is_empty() && reserved != "0", "{tier}: {rec}");
        assert_eq!(
            rec["cost_settled"].as_str(),
            Some(reserved.as_str()),
            "{tier}: {rec}"
        );
        let store = env.store();
        use sandboxio_gateway::store::Store as _;
        let lines = store
            .ledger(
                chrono::Utc::now() - chrono::Duration::hours(1),
                chrono::Utc::now() + chrono::Duration::hours(1),
            )
            .unwrap();
        assert_eq!(lines.len(), 1, "{tier}: {lines:?}");
        assert_eq!(lines[0].amount.to_string(), reserved, "{tier}");
        assert_eq!(
            env.live_counts(),
            Default::default(),
            "{tier}: nothing left reserved"
        );
    }
}

#[test]
fn with_its_cli_and_its_helper_killed_the_program_dies_too() {
    // No cgroup kill is left to end it (the CLI that would is gone): only the parent-death
    // signal, armed again after the ids changed (the namespace's init, the process tier's
    // program). The program is one process carrying the marker (the process tier promises
    // no more than its direct child without the CLI's cgroup kill).
    for tier in ["namespace", "process"] {
        let env = Env::new(&format!("hdeath-both-{tier}"), tier);
        let config = env.write_config("budget.toml", BUDGET);
        let script = format!("import time; time.sleep(30)  # {}", env.marker);
        let mut cli = env
            .run_cmd(Some(&config), &["--json"], &["python3", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let helper = helper_of(&cli, &env.marker);
        // Stopped first, so that it can neither see the helper die nor, dying, make the
        // helper stop the run (its own parent-death signal): the helper dies alone.
        signal(cli.id(), "STOP");
        signal(helper, "KILL");
        // The CLI carries the marker in its argv too: only the others count.
        let deadline = Instant::now() + Duration::from_secs(5);
        let orphaned = loop {
            let left: Vec<u32> = procs_with(&env.marker)
                .into_iter()
                .filter(|p| *p != cli.id())
                .collect();
            if left.is_empty() || Instant::now() >= deadline {
                break left;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        signal(cli.id(), "KILL");
        let _ = cli.wait();
        assert!(
            orphaned.is_empty(),
            "{tier}: the program outlived its helper: {}",
            describe_and_stop(&orphaned)
        );
    }
}
