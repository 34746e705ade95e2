//! Streamed exec (NDJSON and SSE), background processes, kills, stdin over a WebSocket,
//! and cancellation when the client goes away, against the real server process.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::harness::{gone_within, marker, started, Server};

/// Reads NDJSON messages until `stop` says so; heartbeats are skipped.
fn read_until(lines: &mut impl BufRead, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = lines.read_line(&mut line).unwrap();
        assert!(n > 0, "the stream ended early after {seen:?}");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["type"] == "heartbeat" {
            continue;
        }
        let done = stop(&v);
        seen.push(v);
        if done {
            return seen;
        }
    }
}

fn stream_exec(
    s: &Server,
    key: &str,
    id: &str,
    accept: &str,
    argv: Value,
) -> reqwest::blocking::Response {
    s.client
        .post(s.url(&format!("/v1/sandboxes/{id}/exec")))
        .bearer_auth(key)
        .header("accept", accept)
        .json(&json!({ "argv": argv }))
        .send()
        .unwrap()
}

fn bytes_of(ev: &Value) -> Vec<u8> {
    let data = ev["data"].as_str().unwrap();
    if ev["encoding"] == "base64" {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap()
    } else {
        data.as_bytes().to_vec()
    }
}

#[test]
fn streamed_output_arrives_before_exit_in_order_with_bytes_and_the_record_last() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    // The command waits for a file that is uploaded only after its first line was read:
    // output that arrived before the exit, by construction rather than by timing.
    let script = r#"echo ready; while [ ! -e "$SANDBOX_INPUT/go" ]; do sleep 0.05; done
printf '\377\000x'; echo err >&2; echo two; exit 4"#;
    let r = stream_exec(
        &s,
        &key,
        &id,
        "application/x-ndjson",
        json!(["sh", "-c", script]),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let pid = r.headers()["sandboxio-process-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut lines = BufReader::new(r);
    let first = read_until(&mut lines, |v| v["type"] == "stdout");
    assert_eq!(first[0]["type"], "start");
    assert_eq!(first[0]["process_id"], pid.as_str());
    assert_eq!(bytes_of(first.last().unwrap()), b"ready\n");
    // Still running, and listed as such, while its first line is in our hands.
    let list: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/processes"))
        .json()
        .unwrap();
    let me = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == pid.as_str())
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(me["state"], "running");
    let up = s.put_bytes(
        &key,
        &format!("/v1/sandboxes/{id}/files?path=go"),
        b"1".to_vec(),
    );
    assert_eq!(up.status(), 200);
    let rest = read_until(&mut lines, |v| {
        v["type"] == "result" || v["type"] == "error"
    });
    let kinds: Vec<&str> = rest.iter().map(|v| v["type"].as_str().unwrap()).collect();
    let exit_at = kinds.iter().position(|k| *k == "exit").unwrap();
    assert_eq!(kinds.last(), Some(&"result"), "{rest:?}");
    assert_eq!(
        exit_at,
        kinds.len() - 2,
        "exit comes right before the record: {kinds:?}"
    );
    let out: Vec<u8> = rest
        .iter()
        .filter(|v| v["type"] == "stdout")
        .flat_map(bytes_of)
        .collect();
    let err: Vec<u8> = rest
        .iter()
        .filter(|v| v["type"] == "stderr")
        .flat_map(bytes_of)
        .collect();
    assert_eq!(out, b"\xff\x00xtwo\n");
    assert_eq!(err, b"err\n");
    assert_eq!(rest[exit_at]["exit"]["code"], 4);
    let last = rest.last().unwrap();
    assert_eq!(last["record"]["exit_code"], 4);
    assert_eq!(last["record"]["session_id"], id.as_str());
    assert!(
        last["result"].get("stdout").is_none(),
        "output is not sent twice"
    );
    // The stream's one record is in the trail.
    let op = last["record"]["operation_id"].as_str().unwrap();
    assert_eq!(
        s.audit().iter().filter(|e| e["operation_id"] == op).count(),
        1
    );
    // Gone from the list once it ended.
    let list: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/processes"))
        .json()
        .unwrap();
    assert!(!list.to_string().contains(&pid));
}

#[test]
fn server_sent_events_carry_the_same_messages() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let mut r = stream_exec(
        &s,
        &key,
        &id,
        "text/event-stream",
        json!(["sh", "-c", "echo a; echo b >&2"]),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    r.read_to_string(&mut text).unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|b| b.starts_with("event: "))
        .map(|b| {
            let mut it = b.lines();
            let name = it.next().unwrap().trim_start_matches("event: ").to_string();
            let data: Value =
                serde_json::from_str(it.next().unwrap().trim_start_matches("data: ")).unwrap();
            assert_eq!(data["type"], name.as_str());
            (name, data)
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"start"));
    assert_eq!(&names[names.len() - 2..], &["exit", "result"], "{names:?}");
    assert!(names.contains(&"stdout") && names.contains(&"stderr"));
}

#[test]
fn a_stream_that_needs_approval_answers_202_and_a_stopped_one_a_problem() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let r = stream_exec(&s, &key, &id, "application/x-ndjson", json!(["touch", "x"]));
    assert_eq!(r.status(), 202);
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "SBX_E1821");
    assert!(v["approval_id"].as_str().is_some());
    // Unknown sandbox: the same problem as without streaming.
    let r = stream_exec(&s, &key, "nope", "application/x-ndjson", json!(["true"]));
    assert_eq!(r.status(), 404);
}

#[test]
fn a_client_that_goes_away_cancels_its_streamed_command_and_no_process_remains() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let m = marker("sbx-drop");
    let script = format!("echo up; sleep 300; : {m}");
    let r = stream_exec(
        &s,
        &key,
        &id,
        "application/x-ndjson",
        json!(["sh", "-c", script]),
    );
    assert_eq!(r.status(), 200);
    let mut lines = BufReader::new(r);
    read_until(&mut lines, |v| v["type"] == "stdout");
    assert!(started(&m), "the command did not start");
    drop(lines);
    let left = gone_within(&m, 20);
    assert!(left.is_empty(), "processes outlived their client: {left:?}");
    // Its one record says it was cancelled.
    let mut rec = None;
    for _ in 0..100 {
        rec = s.audit().into_iter().find(|e| {
            e["event"] == "exec" && e["session_id"] == id.as_str() && e["status"] == "cancelled"
        });
        if rec.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(rec.is_some(), "no cancelled record: {:?}", s.audit());
}

#[test]
fn a_background_process_is_listed_read_and_killed_over_the_api() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let m = marker("sbx-bg");
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c", format!("echo hi; sleep 300; : {m}")], "background": true}),
    );
    assert_eq!(r.status(), 201);
    let p: Value = r.json().unwrap();
    let pid = p["id"].as_str().unwrap().to_string();
    assert_eq!(p["background"], true);
    assert!(started(&m));
    let url = format!("/v1/sandboxes/{id}/processes/{pid}");
    // Its output so far.
    let mut v = Value::Null;
    for _ in 0..100 {
        v = s.get(&key, &url).json().unwrap();
        if v["stdout"] == "hi\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(v["stdout"], "hi\n", "{v}");
    assert_eq!(v["state"], "running");
    // Another tenant cannot see or kill it.
    let other = s.key("globex", "all");
    assert_eq!(s.get(&other, &url).status(), 404);
    assert_eq!(s.delete(&other, &url).status(), 404);
    // Killed: the tree is gone and the record says cancelled.
    assert_eq!(s.delete(&key, &url).status(), 204);
    let v: Value = s.get(&key, &format!("{url}?wait=20")).json().unwrap();
    assert_eq!(v["state"], "cancelled", "{v}");
    assert_eq!(v["outcome"]["record"]["status"], "cancelled", "{v}");
    let left = gone_within(&m, 10);
    assert!(left.is_empty(), "{left:?}");
    // A finished one is forgotten by a second DELETE.
    assert_eq!(s.delete(&key, &url).status(), 204);
    assert_eq!(s.get(&key, &url).status(), 404);

    // One that ends by itself keeps its output and outcome for its caller.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c", "echo done; exit 7"], "background": true}),
    );
    assert_eq!(r.status(), 201);
    let pid = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let v: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/processes/{pid}?wait=20"))
        .json()
        .unwrap();
    assert_eq!(v["state"], "exited", "{v}");
    assert_eq!(v["stdout"], "done\n");
    assert_eq!(v["exit"]["code"], 7);
    assert_eq!(v["outcome"]["record"]["exit_code"], 7);
}

#[test]
fn delete_of_a_streamed_process_cancels_it_and_the_stream_says_so() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let m = marker("sbx-del");
    let r = stream_exec(
        &s,
        &key,
        &id,
        "application/x-ndjson",
        json!(["sh", "-c", format!("echo up; sleep 300; : {m}")]),
    );
    let pid = r.headers()["sandboxio-process-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut lines = BufReader::new(r);
    read_until(&mut lines, |v| v["type"] == "stdout");
    let del = crate::harness::client()
        .delete(s.url(&format!("/v1/sandboxes/{id}/processes/{pid}")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(del.status(), 204);
    let rest = read_until(&mut lines, |v| {
        v["type"] == "result" || v["type"] == "error"
    });
    let last = rest.last().unwrap();
    assert_eq!(last["record"]["status"], "cancelled", "{last}");
    assert!(gone_within(&m, 10).is_empty());
}

mod ws {
    use super::*;
    use tungstenite::client::IntoClientRequest;
    use tungstenite::Message;

    fn connect(
        s: &Server,
        key: &str,
        id: &str,
    ) -> tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>> {
        let url = s
            .url(&format!("/v1/sandboxes/{id}/exec/ws"))
            .replace("http://", "ws://");
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        let (ws, resp) = tungstenite::connect(req).unwrap();
        assert_eq!(resp.status(), 101);
        ws
    }

    fn next_json(
        ws: &mut tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>,
    ) -> Value {
        loop {
            match ws.read().unwrap() {
                Message::Text(t) => return serde_json::from_str(&t).unwrap(),
                Message::Close(_) => return Value::Null,
                _ => continue,
            }
        }
    }

    #[test]
    fn stdin_streams_over_a_websocket_and_output_comes_back_live() {
        let s = Server::start(&[]);
        let key = s.key("acme", "all");
        let id = s.sandbox(&key);
        let mut ws = connect(&s, &key, &id);
        ws.send(Message::text(
            json!({"argv": ["sh", "-c", "read a; echo got:$a; cat; echo end"]}).to_string(),
        ))
        .unwrap();
        assert_eq!(next_json(&mut ws)["type"], "start");
        ws.send(Message::binary(b"hello\n".to_vec())).unwrap();
        let v = next_json(&mut ws);
        assert_eq!(v["type"], "stdout", "{v}");
        assert_eq!(v["data"], "got:hello\n");
        // The program is still reading: more input, then end of input.
        ws.send(Message::text(
            json!({"type": "stdin", "data": "more\n"}).to_string(),
        ))
        .unwrap();
        let v = next_json(&mut ws);
        assert_eq!(v["data"], "more\n", "{v}");
        ws.send(Message::text(json!({"type": "eof"}).to_string()))
            .unwrap();
        let mut seen = Vec::new();
        loop {
            let v = next_json(&mut ws);
            if v.is_null() {
                break;
            }
            seen.push(v);
        }
        let last = seen.last().unwrap();
        assert_eq!(last["type"], "result", "{seen:?}");
        assert_eq!(last["record"]["exit_code"], 0);
        assert!(seen.iter().any(|v| v["data"] == "end\n"));
    }

    #[test]
    fn a_websocket_client_that_goes_away_cancels_its_command() {
        let s = Server::start(&[]);
        let key = s.key("acme", "all");
        let id = s.sandbox(&key);
        let m = marker("sbx-ws");
        let mut ws = connect(&s, &key, &id);
        ws.send(Message::text(
            json!({"argv": ["sh", "-c", format!("sleep 300; : {m}")]}).to_string(),
        ))
        .unwrap();
        assert_eq!(next_json(&mut ws)["type"], "start");
        assert!(started(&m));
        drop(ws);
        let left = gone_within(&m, 20);
        assert!(left.is_empty(), "{left:?}");
        // A request that is not JSON is refused with a code, and nothing runs.
        let mut ws = connect(&s, &key, &id);
        ws.send(Message::text("{not json")).unwrap();
        let v = next_json(&mut ws);
        assert_eq!(v["type"], "error");
        assert_eq!(v["problem"]["code"], "SBX_E1805");
    }
}

#[test]
fn a_waited_exec_hands_its_outcome_to_a_get_of_its_process_waiting_for_the_end() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    // Runs until a file is uploaded, so its process can be found and watched first.
    let script = r#"while [ ! -e "$SANDBOX_INPUT/go" ]; do sleep 0.05; done; echo done"#;
    std::thread::scope(|sc| {
        let exec = sc.spawn(|| {
            s.post(
                &key,
                &format!("/v1/sandboxes/{id}/exec"),
                &json!({"argv": ["sh", "-c", script]}),
            )
        });
        let pid = loop {
            let list: Value = s
                .get(&key, &format!("/v1/sandboxes/{id}/processes"))
                .json()
                .unwrap();
            let found = list["processes"].as_array().unwrap().iter().find_map(|p| {
                (p["kind"] == "exec" && p["state"] == "running")
                    .then(|| p["id"].as_str().unwrap().to_string())
            });
            if let Some(pid) = found {
                break pid;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let watch_path = format!("/v1/sandboxes/{id}/processes/{pid}?wait=60");
        let (server, k) = (&s, &key);
        let watch = sc.spawn(move || server.get(k, &watch_path));
        // The watcher holds the process before the command may end (its request is in).
        std::thread::sleep(Duration::from_millis(500));
        let up = s.put_bytes(
            &key,
            &format!("/v1/sandboxes/{id}/files?path=go"),
            b"1".to_vec(),
        );
        assert_eq!(up.status(), 200);
        let answer: Value = exec.join().unwrap().json().unwrap();
        assert_eq!(answer["result"]["stdout"], "done\n", "{answer}");
        let w = watch.join().unwrap();
        assert_eq!(w.status(), 200);
        let seen: Value = w.json().unwrap();
        assert_eq!(seen["state"], "exited", "{seen}");
        // The same outcome the exec was answered with, not only its state.
        assert_eq!(seen["outcome"]["result"]["stdout"], "done\n", "{seen}");
        assert_eq!(
            seen["outcome"]["record"]["operation_id"],
            answer["record"]["operation_id"]
        );
        assert_eq!(seen["operation_id"], answer["record"]["operation_id"]);
        // Answered: it is no longer listed.
        let list: Value = s
            .get(&key, &format!("/v1/sandboxes/{id}/processes"))
            .json()
            .unwrap();
        assert!(
            !list["processes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["id"] == pid.as_str()),
            "{list}"
        );
    });
}
