//! SIGTERM to `sandboxio run` (issue 6): exits within about a second, leaves no processes
//! and no cgroups behind.

use std::time::{Duration, Instant};

use crate::common::*;

/// Starts `sh -c script` under `sandboxio run` and waits until `procs` processes carry the
/// env's marker (the CLI and the payload's shells).
fn start(env: &Env, script: &str, procs: usize) -> std::process::Child {
    let child = env
        .run_cmd(None, &[], &["sh", "-c", script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs_with(&env.marker).len() < procs {
        assert!(Instant::now() < deadline, "the payload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Sends `sig` and waits (at most 10 s) for the CLI's exit: its code and how long it took.
fn exit_after(child: &mut std::process::Child, sig: &str) -> (Option<i32>, Duration) {
    let t0 = Instant::now();
    signal(child.id(), sig);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "run ignored SIG{sig}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    (code, t0.elapsed())
}

#[test]
fn sigterm_exits_promptly_and_leaves_nothing() {
    let env = Env::new("term", "process");
    let cg_before = cgroup_dirs();
    // `sh -c 'sleep 100 & sleep 100'`, with each sleep under a shell that carries the marker
    // (a bare `sleep` argv could not be found from outside once reparented).
    let m = &env.marker;
    let script = format!("sh -c 'sleep 100; : {m}' & sh -c 'sleep 100; : {m}'; : {m}");
    // CLI + outer sh + the two inner shells.
    let mut child = start(&env, &script, 4);
    // This run's cgroups, by the names its payload sits in (other tests running at the same
    // time create and remove cgroups of their own, which say nothing about this run).
    let ours: Vec<String> = procs_with(&env.marker)
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| {
                    l.split_once("/sandboxio/")
                        .map(|(_, rest)| rest.to_string())
                })
                .filter_map(|rest| rest.split('/').next().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .filter(|id| !id.is_empty())
        .collect();
    let (code, took) = exit_after(&mut child, "TERM");
    println!("SIGTERM: run exited after {took:?} with code {code:?}");
    assert_eq!(code, Some(122));
    assert!(took < Duration::from_secs(3), "too slow: {took:?}");
    let left = wait_no_procs(&env.marker, Duration::from_secs(1));
    assert!(left.is_empty(), "left:{}", describe_and_stop(&left));
    let cg = new_cgroups(&cg_before, Duration::from_secs(1));
    let cg: Vec<_> = cg
        .into_iter()
        .filter(|d| {
            ours.iter()
                .any(|id| d.to_string_lossy().contains(id.as_str()))
        })
        .filter(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .map(|p| p.trim().is_empty())
                .unwrap_or(true)
        })
        .collect();
    assert!(cg.is_empty(), "empty cgroups left behind: {cg:?}");
    assert_eq!(env.live_counts(), Default::default());
}

/// SIGHUP (the caller's terminal went away) cancels the run like SIGTERM: recorded as
/// cancelled, nothing left running. Its default action used to kill the CLI outright (a
/// `--tty` run left the terminal in raw mode, and the run was recorded only at the next
/// start, as interrupted).
#[test]
fn sighup_cancels_the_run_and_records_it() {
    let env = Env::new("hup", "process");
    let m = &env.marker;
    let script = format!("sleep 100; : {m}");
    let mut child = start(&env, &script, 2);
    let (code, _) = exit_after(&mut child, "HUP");
    assert_eq!(code, Some(122), "cancelled");
    let left = wait_no_procs(&env.marker, Duration::from_secs(1));
    assert!(left.is_empty(), "left:{}", describe_and_stop(&left));
    let trail = std::fs::read_to_string(env.state().join("audit.jsonl")).unwrap();
    assert!(
        trail.contains("\"status\":\"cancelled\"") && trail.contains("received SIGHUP"),
        "no cancelled record: {trail}"
    );
    assert_eq!(env.live_counts(), Default::default());
}
