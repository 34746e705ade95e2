//! The sandbox helper killed under an unprivileged user (uid 65534: no cgroup of its own,
//! so no cgroup kill can end the run), with the CLI stopped so that it cannot react either:
//! the program must die with its helper, by the namespace init's parent-death signal.
//! (As root the init's change of ids clears that signal, which is why it is armed again:
//! `reliability/helper_death.rs` proves that; here the init is root of its namespace from
//! the start, and this test guards the one way left to end an unprivileged run.)

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::*;

/// Pids (other than `except`) whose command line holds `marker`.
fn procs_with(marker: &str, except: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == except || pid == std::process::id() {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(marker) {
            out.push(pid);
        }
    }
    out
}

/// The CLI's child that is the sandbox helper, once the program runs.
fn helper_of(cli: u32, marker: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "the program never started");
        if !procs_with(marker, cli).is_empty() {
            let mut kids = Vec::new();
            for t in std::fs::read_dir(format!("/proc/{cli}/task"))
                .unwrap()
                .flatten()
            {
                let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                kids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
            let helper = kids.into_iter().find(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("__sandboxio-helper"))
                    .unwrap_or(false)
            });
            if let Some(h) = helper {
                return h;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

#[test]
fn a_killed_helper_takes_its_program_along_for_an_unprivileged_user() {
    let Some(user) = as_nobody() else { return };
    let marker = format!(
        "sbx-nonroot-hdeath-{}",
        user.state().file_name().unwrap().to_string_lossy()
    );
    let script = format!("import time; time.sleep(30)  # {marker}");
    let mut cli = user
        .cli(&["run", "--", "python3", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let helper = helper_of(cli.id(), &marker);
    signal(cli.id(), "STOP");
    signal(helper, "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left = procs_with(&marker, cli.id());
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    signal(cli.id(), "KILL");
    let _ = cli.wait();
    assert!(
        left.is_empty(),
        "the program outlived its helper: pids {left:?}"
    );
}
