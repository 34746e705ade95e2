//! Execs starting at once (`--max-starting`, `[server] start_hold`): beyond the bound they
//! wait their turn, first come first served, and then all complete; a client that goes away
//! while it waits starts nothing and leaves no operation.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{gone_within, marker, processes_with, started, Server};

/// One place for execs starting, held for as long as the exec runs.
fn one_place() -> Server {
    Server::start_with(&["--max-starting", "1"], |dir| {
        let p = dir.join("config.toml");
        let mut c = std::fs::read_to_string(&p).unwrap();
        c.push_str("\n[server]\nstart_hold = \"1h\"\n");
        std::fs::write(&p, c).unwrap();
    })
}

/// A background `sleep` holding the only place; its process url.
fn hold_the_place(s: &Server, key: &str, id: &str, m: &str) -> String {
    let r = s.post(
        key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c", format!("sleep 300; : {m}")], "background": true}),
    );
    assert_eq!(r.status(), 201);
    let p: Value = r.json().unwrap();
    assert!(started(m), "the first command did not start");
    format!("/v1/sandboxes/{id}/processes/{}", p["id"].as_str().unwrap())
}

/// A waited exec of `sh -c SCRIPT` in sandbox `id`, sent from its own thread (it queues):
/// its status and answer.
fn queued_exec(
    s: &Server,
    key: &str,
    id: &str,
    script: String,
) -> std::thread::JoinHandle<(u16, Value)> {
    let url = s.url(&format!("/v1/sandboxes/{id}/exec"));
    let key = key.to_string();
    std::thread::spawn(move || {
        let r = crate::harness::client()
            .post(url)
            .bearer_auth(key)
            .json(&json!({"argv": ["sh", "-c", script]}))
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    })
}

#[test]
fn execs_beyond_the_bound_wait_their_turn_then_all_complete() {
    let s = one_place();
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let m = marker("sbx-hold");
    let first = hold_the_place(&s, &key, &id, &m);
    let waiting: Vec<_> = (0..4)
        .map(|i| (i, queued_exec(&s, &key, &id, format!("echo {i}"))))
        .collect();
    // While the first holds the only place, none of them runs.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        waiting.iter().all(|(_, t)| !t.is_finished()),
        "an exec ran while the only place was held"
    );
    assert_eq!(s.delete(&key, &first).status(), 204);
    for (i, t) in waiting {
        let (status, v) = t.join().unwrap();
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["result"]["stdout"], format!("{i}\n"), "{v}");
    }
    assert!(gone_within(&m, 10).is_empty());
}

#[test]
fn a_client_that_goes_away_while_waiting_for_its_turn_starts_nothing() {
    let s = one_place();
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let m = marker("sbx-hold");
    let first = hold_the_place(&s, &key, &id, &m);
    // A waited exec that queues behind it, from a client that then goes away.
    let gone = marker("sbx-queued");
    let body =
        json!({"argv": ["sh", "-c", format!("echo {gone}; sleep 300; : {gone}")]}).to_string();
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut c = TcpStream::connect(&addr).unwrap();
    write!(
        c,
        "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    drop(c);
    std::thread::sleep(Duration::from_millis(500));
    // The place is given back; the next exec runs, and the one that went away never does.
    assert_eq!(s.delete(&key, &first).status(), 204);
    let v: Value = s.get(&key, &format!("{first}?wait=20")).json().unwrap();
    assert_eq!(v["state"], "cancelled", "{v}");
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["echo", "after"]}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().unwrap()["result"]["stdout"], "after\n");
    std::thread::sleep(Duration::from_millis(500));
    assert!(processes_with(&gone).is_empty(), "the queued exec started");
    // Two exec operations in this sandbox (the first, cancelled, and the last), none for
    // the request that went away.
    let execs: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|e| e["event"] == "exec" && e["session_id"] == id.as_str())
        .collect();
    assert_eq!(execs.len(), 2, "{execs:?}");
    assert!(
        !execs.iter().any(|e| e.to_string().contains(&gone)),
        "{execs:?}"
    );
    assert!(gone_within(&m, 10).is_empty());
}

#[test]
fn a_queued_exec_leaves_the_queue_when_its_sandbox_is_paused_or_deleted() {
    let s = one_place();
    let key = s.key("acme", "all");
    // The only place is held by a command in another sandbox, for the whole test.
    let holder = s.sandbox(&key);
    let m = marker("sbx-hold");
    let first = hold_the_place(&s, &key, &holder, &m);
    for (action, refused) in [("pause", 409), ("delete", 404)] {
        let id = s.sandbox(&key);
        let queued = marker("sbx-queued");
        let waiting = queued_exec(
            &s,
            &key,
            &id,
            format!("echo {queued}; sleep 300; : {queued}"),
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !waiting.is_finished(),
            "an exec ran while the only place was held"
        );
        let r = match action {
            "pause" => s.post(&key, &format!("/v1/sandboxes/{id}/pause"), &json!({})),
            _ => s.delete(&key, &format!("/v1/sandboxes/{id}")),
        };
        assert!(r.status().is_success(), "{action}: {}", r.status());
        // It leaves the queue with the sandbox's refusal while the place is still held
        // (the holder runs for an hour): waited for, not timed.
        for _ in 0..200 {
            if waiting.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            waiting.is_finished(),
            "{action}: the queued exec still waits for the place"
        );
        let (status, v) = waiting.join().unwrap();
        assert_eq!(status, refused, "{action}: {v}");
        assert!(processes_with(&queued).is_empty(), "{action}: it started");
        let held: Value = s.get(&key, &first).json().unwrap();
        assert_eq!(held["state"], "running", "{held}");
    }
    assert_eq!(s.delete(&key, &first).status(), 204);
    assert!(gone_within(&m, 10).is_empty());
}
