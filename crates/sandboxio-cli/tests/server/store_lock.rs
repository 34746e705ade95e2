//! SQLite off the async workers: while another process holds the state database's write
//! lock (a slow disk or a long transaction looks the same to the server), operations wait
//! for it on the blocking pool, and the server keeps answering everything else.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::harness::Server;

/// Takes the write lock of the database named by argv[1], says so, and keeps it until its
/// standard input closes.
const LOCKER: &str = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN IMMEDIATE")
c.execute("CREATE TABLE IF NOT EXISTS held_by_test (x)")
print("locked", flush=True)
sys.stdin.read()
c.execute("ROLLBACK")
"#;

/// The server runs on 2 async workers; more operations than that wait for the lock.
const WAITING: usize = 4;

#[test]
fn health_answers_while_operations_wait_for_the_store_lock() {
    if Command::new("python3")
        .args(["-c", "import sqlite3"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        println!("skipped: python3 with sqlite3 is needed to hold the database lock from another process");
        return;
    }
    let s = Arc::new(Server::start(&[]));
    let key = s.key("acme", "all");
    let ids: Vec<String> = (0..WAITING).map(|_| s.sandbox(&key)).collect();

    let mut locker = Command::new("python3")
        .arg("-c")
        .arg(LOCKER)
        .arg(s.state().join("state.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(locker.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");

    // One operation per sandbox: each reaches the store's write lock and waits there.
    let finished = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = ids
        .iter()
        .map(|id| {
            let (s, key, id, finished) = (s.clone(), key.clone(), id.clone(), finished.clone());
            std::thread::spawn(move || {
                let r = s.post(
                    &key,
                    &format!("/v1/sandboxes/{id}/exec"),
                    &json!({"argv": ["true"]}),
                );
                finished.fetch_add(1, Ordering::SeqCst);
                r.status().as_u16()
            })
        })
        .collect();
    // Give the requests time to reach the store (none can finish while the lock is held).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "an operation finished while another process held the write lock"
    );

    // The server still answers: no async worker is stuck in SQLite. (Inline store calls
    // would hold both workers until the lock's 30 s busy timeout.)
    let health = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
        .get(s.url("/healthz"))
        .send();
    let still_waiting = finished.load(Ordering::SeqCst) == 0;
    // Release the lock before asserting, so a failure does not leave the requests hanging.
    drop(locker.stdin.take());
    let _ = locker.wait();
    let health =
        health.expect("the server did not answer /healthz while operations waited for the store");
    assert_eq!(health.status(), 200);
    assert!(
        still_waiting,
        "the health answer came only after the lock was released"
    );

    // With the lock released, every waiting operation runs.
    for h in hs {
        assert_eq!(h.join().unwrap(), 200);
    }
}
