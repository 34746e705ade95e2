//! Reading the output to its end after the program exits (`crate::drain`): a slow reader of
//! the events loses nothing, writers left behind by the program are killed, and a pipe held
//! open from outside the tree ends the drain with `output_incomplete` set, never silently.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use sandboxio_core::{ExecEvent, ExecRequest, ExitStatus, IsolationTier, OutputStream};
use sandboxio_sandbox::{run, run_streaming, CgroupUsage, SandboxConfig, StreamIo};
use tokio::sync::mpsc;

use super::{cfg, sh};

/// Each tier this host can run, with its config; prints why one is skipped.
pub(super) fn tiers() -> Vec<(IsolationTier, SandboxConfig)> {
    let mut v = vec![(IsolationTier::Process, cfg(CgroupUsage::Auto))];
    let host = sandboxio_sandbox::probe();
    if host.user_namespaces.available {
        v.push((IsolationTier::Namespace, cfg(CgroupUsage::Auto)));
    } else {
        eprintln!(
            "SKIP namespace tier: no user namespaces: {}",
            host.user_namespaces.detail
        );
    }
    // SAFETY: the version query takes no pointer and only returns a number.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    if abi >= 1 {
        let c = SandboxConfig {
            landlock_fallback: true,
            ..cfg(CgroupUsage::Auto)
        };
        v.push((IsolationTier::Landlock, c));
    } else {
        eprintln!("SKIP landlock tier: Landlock unavailable on this kernel");
    }
    v
}

/// Five lines, far enough apart that the pump reads (and sends) them one by one.
const SPACED: &str = "for i in 1 2 3 4 5; do echo line-$i; sleep 0.2; done";
const SPACED_OUT: &str = "line-1\nline-2\nline-3\nline-4\nline-5\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_event_reader_loses_no_output() {
    for (tier, c) in tiers() {
        let mut req = sh(SPACED);
        req.limits.timeout = Duration::from_secs(30);
        // Room for one event: the pump blocks on the second until the reader wakes up,
        // which is after the program has exited and well past the drain grace.
        let (tx, mut rx) = mpsc::channel(1);
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(3500)).await;
            let mut got = Vec::new();
            while let Some(ev) = rx.recv().await {
                if let ExecEvent::Output { stream, data, .. } = ev {
                    assert_eq!(stream, OutputStream::Stdout);
                    got.extend(data);
                }
            }
            got
        });
        let io = StreamIo {
            events: Some(tx),
            ..StreamIo::default()
        };
        let r = run_streaming(&req, tier, &c, None, io).await.unwrap();
        assert_eq!(r.exit, ExitStatus::Code(0), "{tier}: {r:?}");
        assert_eq!(r.stdout_lossy(), SPACED_OUT, "{tier}: output lost");
        assert_eq!(r.stdout_bytes, SPACED_OUT.len() as u64, "{tier}");
        assert_eq!(r.output_incomplete, None, "{tier}");
        assert_eq!(
            reader.await.unwrap(),
            SPACED_OUT.as_bytes(),
            "{tier}: events"
        );
        super::assert_no_cgroup_left(&r.sandbox_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_left_behind_by_the_program_die_and_the_output_ends() {
    for (tier, c) in tiers() {
        // A background subshell and a setsid daemon both hold stdout and would write later.
        let mut req = sh("(sleep 3; echo late-child) & \
             setsid sh -c 'sleep 3; echo late-daemon' & \
             echo early");
        req.limits.timeout = Duration::from_secs(30);
        let r = run(&req, tier, &c, None).await.unwrap();
        assert_eq!(r.stdout_lossy(), "early\n", "{tier}: {r:?}");
        assert_eq!(r.output_incomplete, None, "{tier}");
        assert!(!r.stdout_truncated, "{tier}");
    }
}

/// Waits for the pid the program wrote, then opens its stdout from this process (outside
/// the sandbox's tree) and writes a line into it.
async fn hold_stdout_of(pid_file: &Path) -> std::fs::File {
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/1"))
        .unwrap();
    f.write_all(b"from-outside\n").unwrap();
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_held_from_outside_the_tree_ends_the_drain_and_is_reported() {
    // The process tier has no boundary: a host process of the same uid can reopen the
    // program's stdout and keep it open after the program and its tree are gone.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut req = sh(&format!(
        "echo first; echo $$ > {}; sleep 1; echo second",
        pid_file.display()
    ));
    req.limits.timeout = Duration::from_secs(60);
    let c = cfg(CgroupUsage::Auto);
    let running = tokio::spawn(async move { run(&req, IsolationTier::Process, &c, None).await });
    let holder = hold_stdout_of(&pid_file).await;
    // The holder stays open until the run has returned: only the drain's grace can end it.
    let r = running.await.unwrap().unwrap();
    drop(holder);
    assert_eq!(r.exit, ExitStatus::Code(0));
    assert_eq!(r.stdout_lossy(), "first\nfrom-outside\nsecond\n", "{r:?}");
    let why = r.output_incomplete.expect("the cut must be reported");
    assert!(
        why.contains("stdout was still held open") && why.contains("outside"),
        "{why}"
    );
    // The cap was not reached: that flag keeps its own meaning.
    assert!(!r.stdout_truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_namespace_tier_the_drain_waits_up_to_the_runs_deadline() {
    let host = sandboxio_sandbox::probe();
    if !host.user_namespaces.available {
        eprintln!("SKIP: no user namespaces: {}", host.user_namespaces.detail);
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: only root can open a sandboxed process's stdout from the host");
        return;
    }
    // Here the tier guarantees the writers of the run are dead, so the drain waits for end
    // of file; a host process that holds the pipe anyway delays it only up to the run's
    // deadline (timeout + backstop grace), and the cut is reported.
    let marker = format!("drain-marker-{}", std::process::id());
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        "echo first; sleep 1; echo second",
        marker.as_str(),
    ]);
    req.limits.timeout = Duration::from_secs(2);
    let c = cfg(CgroupUsage::Auto);
    let running = tokio::spawn(async move { run(&req, IsolationTier::Namespace, &c, None).await });
    let pid = loop {
        if let Some(p) = pid_with_arg(&marker) {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // `echo` is the shell's own: once it has a child (`sleep`), "first" is in the pipe, so
    // the line written from outside comes after it.
    while !has_child(pid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut holder = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/1"))
        .unwrap();
    holder.write_all(b"from-outside\n").unwrap();
    let r = running.await.unwrap().unwrap();
    drop(holder);
    assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
    assert_eq!(r.stdout_lossy(), "first\nfrom-outside\nsecond\n");
    let why = r.output_incomplete.expect("the cut must be reported");
    assert!(why.contains("at the run's deadline"), "{why}");
}

/// Whether some process has `pid` as its parent.
fn has_child(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                // The fields after the command name (in parentheses): state, then ppid.
                let rest = s.get(s.rfind(')')? + 1..)?.to_string();
                rest.split_whitespace().nth(1)?.parse::<i32>().ok()
            })
            == Some(pid)
    })
}

/// The host pid of a process whose command line has `arg` as its last argument.
fn pid_with_arg(arg: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let last = cmd.split(|b| *b == 0).rfind(|a| !a.is_empty());
        if last == Some(arg.as_bytes()) {
            return Some(pid);
        }
    }
    None
}
