//! Cancelling a sandbox that runs a fork bomb and a double-forked daemon leaves zero
//! processes, counted from outside (issue 6). Namespace tier only, and only after a
//! preflight through the same binary shows the payload is pid-isolated.

use std::time::{Duration, Instant};

use crate::common::*;

/// Runs a probe in the namespace tier; returns why the destructive part must not run.
fn pid_isolation_refusal(env: &Env) -> Option<String> {
    let out = env
        .run_cmd(
            None,
            &["--json"],
            &["sh", "-c", "ls /proc | grep -c '^[0-9]'"],
        )
        .output()
        .unwrap();
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(_) => {
            return Some(format!(
                "the preflight printed no JSON: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let namespaces = v["enforcement"]["namespaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !namespaces.iter().any(|n| n == "pid") {
        return Some(format!(
            "no pid namespace in the enforcement report: {}",
            v["record"]["reason"]
        ));
    }
    let visible: u32 = v["stdout"]
        .as_str()
        .unwrap_or("")
        .trim()
        .parse()
        .unwrap_or(u32::MAX);
    if visible > 5 {
        return Some(format!(
            "the payload sees {visible} processes: not pid-isolated"
        ));
    }
    None
}

#[test]
fn cancelling_a_fork_bomb_and_a_daemon_leaves_zero_processes() {
    let env = Env::new("cancel", "namespace");
    if let Some(why) = pid_isolation_refusal(&env) {
        // Never run a fork bomb where the sandbox has not been seen to isolate pids.
        eprintln!("SKIP: refusing the fork bomb: {why}");
        return;
    }
    let m = &env.marker;
    // A double-forked, setsid daemon, then a fork bomb that keeps going when fork fails
    // (bounded by the pids cgroup and by the loop), then sleep. Every process carries the
    // marker in its argv.
    let script = format!(
        r#"import os, time
def child():
    try:
        os.execvp("sh", ["sh", "-c", "sleep 300; : {m}"])
    finally:
        os._exit(1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        child()
    os._exit(0)
for i in range(2000):
    try:
        if os.fork() == 0:
            child()
    except OSError:
        pass
time.sleep(300)
"#
    );
    let mut child = env
        .run_cmd(None, &["--timeout", "120s"], &["python3", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = 0;
    while seen < 50 {
        seen = procs_with(m).len();
        if Instant::now() > deadline {
            signal(child.id(), "TERM");
            panic!("the payload never started enough processes (saw {seen})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = procs_with(m).len();
    let t0 = Instant::now();
    signal(child.id(), "TERM");
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "run ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "cancelled after {:?} with {before} sandbox processes running; exit {code:?}",
        t0.elapsed()
    );
    assert_eq!(code, Some(122), "cancelled runs exit 122");
    let left = wait_no_procs(m, Duration::from_secs(2));
    assert!(
        left.is_empty(),
        "processes left after cancel:{}",
        describe_and_stop(&left)
    );
    assert_eq!(env.live_counts(), Default::default());
}
