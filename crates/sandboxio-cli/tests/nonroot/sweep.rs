//! Workspaces and staging directories left by a supervisor killed at a random moment are
//! swept by the next start, as root and as an unprivileged user; those of live processes
//! are not touched.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::harness::*;

fn roots() -> Vec<PathBuf> {
    let mut r = vec![
        PathBuf::from("/tmp"),
        PathBuf::from("/dev/shm"),
        std::env::temp_dir(),
    ];
    r.sort();
    r.dedup();
    r
}

/// The owner pid written into a sandboxio directory name (`sandboxio-[ns-]<pid>.<start>-`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("sandboxio-ns-")
        .or_else(|| name.strip_prefix("sandboxio-"))?;
    rest.split_once('.')?.0.parse().ok()
}

/// Our directories under the work roots owned by one of `pids`.
fn owned_by(pids: &BTreeSet<u32>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots() {
        let Ok(rd) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner_pid(&name).is_some_and(|p| pids.contains(&p)) && e.path().is_dir() {
                out.push(e.path());
            }
        }
    }
    out
}

/// `pid` and every descendant (from the ppid fields in /proc).
fn tree(pid: u32) -> BTreeSet<u32> {
    let mut parent_of = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = after.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut set = BTreeSet::from([pid]);
    loop {
        let before = set.len();
        for (p, pp) in &parent_of {
            if set.contains(pp) {
                set.insert(*p);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// Starts and SIGKILLs `rounds` runs; returns the killed pids (with their descendants) and
/// the directories they owned at the moment of the kill.
fn kill_runs(user: &User, rounds: usize) -> (BTreeSet<u32>, Vec<PathBuf>) {
    let mut killed = BTreeSet::new();
    let mut seen = Vec::new();
    for round in 0..rounds {
        let mut child = user
            .cli(&["run", "--timeout", "30s", "--", "/bin/sleep", "20"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start sandboxio");
        let pid = child.id();
        if round == 0 {
            // Once for sure in the middle of a run: as soon as its workspace exists.
            let start = Instant::now();
            while owned_by(&BTreeSet::from([pid])).is_empty()
                && start.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        } else {
            std::thread::sleep(Duration::from_millis(rand::random::<u64>() % 400));
        }
        let procs = tree(pid);
        seen.extend(owned_by(&procs));
        killed.extend(procs);
        child.kill().expect("SIGKILL the CLI");
        child.wait().expect("reap the CLI");
    }
    // The helpers die of their parent-death signal; wait until the whole trees are gone.
    let start = Instant::now();
    while killed.iter().any(|p| alive(*p)) && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = killed.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        left.is_empty(),
        "processes of killed runs still alive: {left:?}"
    );
    (killed, seen)
}

#[test]
fn workspaces_of_killed_supervisors_are_swept_by_the_next_start() {
    let mut users = vec![User::new(current_uid())];
    if let Some(u) = as_nobody() {
        users.push(u);
    }
    for user in users {
        let (killed, seen) = kill_runs(&user, 5);
        assert!(
            !seen.is_empty(),
            "no run was killed while it had a workspace: the test proves nothing (roots {:?})",
            roots()
        );
        // Any other start (a concurrent test) may sweep them first; what counts is that
        // none is left once the next start has run.
        let left = owned_by(&killed);
        // A live run of another supervisor must survive the sweep.
        let mut live = user
            .cli(&["run", "--timeout", "30s", "--", "/bin/sleep", "20"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start sandboxio");
        let live_pid = BTreeSet::from([live.id()]);
        let start = Instant::now();
        while owned_by(&live_pid).is_empty() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let live_dirs = owned_by(&live_pid);
        assert!(!live_dirs.is_empty(), "the live run made no workspace");

        let o = output(user.cli(&["run", "--", "/usr/bin/true"]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        let after = owned_by(&killed);
        assert!(
            after.is_empty(),
            "uid {}: the next start left workspaces of killed supervisors: {after:?} (before: \
             {left:?})",
            user.uid
        );
        for d in &seen {
            assert!(!d.exists(), "{} survived the next start", d.display());
        }
        for d in &live_dirs {
            assert!(d.exists(), "the sweep removed a live run's {}", d.display());
        }
        let _ = live.kill();
        let _ = live.wait();
        eprintln!(
            "uid {}: {} directories of {} killed processes existed at the kills, {} were \
             still there before the next start; none after",
            user.uid,
            seen.len(),
            killed.len(),
            left.len()
        );
    }
}

#[test]
fn a_configured_work_root_is_swept_too() {
    let user = User::new(current_uid());
    let root = tempfile::Builder::new()
        .prefix("sbx-workroot-")
        .tempdir()
        .expect("work root");
    user.config(&format!(
        "[sandbox]\nwork_root = \"{}\"\n",
        root.path().display()
    ));
    let (_, seen) = kill_runs(&user, 1);
    let in_root: Vec<_> = seen.iter().filter(|d| d.starts_with(root.path())).collect();
    // The workspace of the killed run lives under the configured root.
    let leftovers = |p: &std::path::Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("sandboxio-"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = leftovers(root.path());
    assert!(
        !before.is_empty() || !in_root.is_empty(),
        "the killed run left nothing under the configured work root"
    );
    let o = output(user.cli(&["run", "--", "/usr/bin/true"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let after = leftovers(root.path());
    assert!(
        after.is_empty(),
        "left under the configured work root: {after:?}"
    );
}
