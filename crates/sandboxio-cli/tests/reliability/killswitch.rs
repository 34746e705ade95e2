//! Kill switch (issue 4): `sandboxio kill` from another process stops a running sandbox
//! promptly, and the switch survives a restart until `resume`.

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn kill_switch_stops_a_running_sandbox_and_survives_restart() {
    let env = Env::new("kill", "process");
    let script = format!("sleep 30 # {}", env.marker);
    let mut child = env
        .run_cmd(None, &[], &["sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the payload runs (the CLI itself and the payload carry the marker).
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs_with(&env.marker).len() < 2 {
        assert!(Instant::now() < deadline, "the payload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = env
        .cmd("kill", None)
        .args(["--reason", "test stop"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let t0 = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "run did not stop");
        std::thread::sleep(Duration::from_millis(5));
    };
    let latency = t0.elapsed();
    println!("kill switch: run exited {latency:?} after `sandboxio kill` returned (code {code:?})");
    assert_eq!(code, Some(122), "a kill-switched run exits 122 (cancelled)");
    assert!(latency < Duration::from_secs(3), "too slow: {latency:?}");
    let left = wait_no_procs(&env.marker, Duration::from_secs(1));
    assert!(left.is_empty(), "left:{}", describe_and_stop(&left));

    // Survives a restart: a new process is denied until `resume`.
    let out = env.run_cmd(None, &[], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(120), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("kill switch"));
    let st = env.cmd("resume", None).output().unwrap();
    assert!(st.status.success());
    let out = env.run_cmd(None, &[], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(env.live_counts(), Default::default());
}
