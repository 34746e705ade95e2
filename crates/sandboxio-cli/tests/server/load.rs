//! The bounded load test at a size CI affords: many sandboxes at once, each running
//! several commands, every answer a 200 with exactly its own output, zero errors. It runs
//! while another sandboxio process sweeps the same work root from a private pid
//! namespace: the cause of the one HTTP 500 the full-size load test once showed (a
//! sweeper that could not see the server's pid judged its live workspaces dead and
//! removed one before its program started: `SBX_E1428`).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::harness::{Server, BIN};

const SANDBOXES: usize = 20;
const COMMANDS: usize = 10;

/// Whether this host lets us make a pid and mount namespace (root, `unshare`).
fn can_unshare() -> Result<(), String> {
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--mount", "true"])
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("no unshare program ({e})"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `sandboxio run` in a private pid namespace, sweeping at its start: the server's work
/// root (same config), a temporary directory of the test's own and a private `/dev/shm`
/// (so it never judges anyone else's directories). `true` when it ran.
fn sweep_from_another_pid_namespace(s: &Server) -> bool {
    let d = s.dir.path();
    let tmp = d.join("sweeper-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let script = format!(
        "mount -t tmpfs none /dev/shm && exec {BIN} run --tier process --state-dir {} --config {} --policy {} -- true",
        d.join("sweeper-state").display(),
        d.join("config.toml").display(),
        d.join("policy.toml").display(),
    );
    Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--mount",
            "sh",
            "-c",
            &script,
        ])
        .env("TMPDIR", &tmp)
        .env_remove("SBX_STATE_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success())
}

#[test]
fn load_test_is_error_free_with_exact_outputs_while_another_pid_namespace_sweeps() {
    if let Err(why) = can_unshare() {
        eprintln!("skipping the load test's sweeper: cannot make a pid namespace here ({why})");
        return;
    }
    let s = Arc::new(Server::start(&[
        "--max-sandboxes",
        "64",
        "--max-concurrent",
        "128",
    ]));
    let key = s.key("acme", "all");
    let stop = Arc::new(AtomicBool::new(false));
    let sweeps = Arc::new(AtomicUsize::new(0));
    let sweeper = {
        let (s, stop, sweeps) = (s.clone(), stop.clone(), sweeps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if sweep_from_another_pid_namespace(&s) {
                    sweeps.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let ok = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..SANDBOXES)
        .map(|i| {
            let (s, key, errors, ok) = (s.clone(), key.clone(), errors.clone(), ok.clone());
            std::thread::spawn(move || {
                let r = s.post(&key, "/v1/sandboxes", &json!({"tier": "process"}));
                if r.status() != 201 {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("create: {}", r.text().unwrap()));
                    return;
                }
                let id = r.json::<Value>().unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                for j in 0..COMMANDS {
                    let want = format!("{i}-{j}\n");
                    let r = s.post(
                        &key,
                        &format!("/v1/sandboxes/{id}/exec"),
                        &json!({"argv": ["sh", "-c", format!("echo {i}-{j}")]}),
                    );
                    let status = r.status();
                    let body: Value = r.json().unwrap_or(Value::Null);
                    if status == 200 && body["result"]["stdout"] == want.as_str() {
                        ok.fetch_add(1, Ordering::SeqCst);
                    } else {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("{i}-{j}: HTTP {status}: {body}"));
                    }
                }
                assert_eq!(s.delete(&key, &format!("/v1/sandboxes/{id}")).status(), 204);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    sweeper.join().unwrap();
    let errors = errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "{} of {} commands failed; first: {:?}",
        errors.len(),
        SANDBOXES * COMMANDS,
        &errors[..errors.len().min(3)]
    );
    assert_eq!(ok.load(Ordering::SeqCst), SANDBOXES * COMMANDS);
    // The sweeper really ran beside the load (else this proves nothing about it).
    assert!(
        sweeps.load(Ordering::SeqCst) >= 1,
        "the sweeper never completed a run"
    );
}
