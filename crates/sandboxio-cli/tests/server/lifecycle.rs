//! A sandbox's whole life over the API, each step one operation with one record.

use serde_json::{json, Value};

use crate::harness::{problem, Server};

#[test]
fn sandbox_lifecycle_exec_files_code_extend_delete() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);

    let r = s.get(&key, &format!("/v1/sandboxes/{id}"));
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v["tenant"], "acme");
    assert_eq!(v["tier"], "process");
    let listed: Value = s.get(&key, "/v1/sandboxes").json().unwrap();
    assert!(listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["id"] == id.as_str()));

    // Exec: the result, and the record whose id the response header names.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c", "echo hello; echo err >&2; exit 3"]}),
    );
    assert_eq!(r.status(), 200);
    let op = r.headers()["sandboxio-operation-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(r.headers().contains_key("sandboxio-trace-id"));
    let v: Value = r.json().unwrap();
    assert_eq!(v["result"]["stdout"], "hello\n");
    assert_eq!(v["result"]["stderr"], "err\n");
    assert_eq!(v["record"]["exit_code"], 3);
    assert_eq!(v["record"]["operation_id"], op.as_str());
    assert_eq!(v["record"]["session_id"], id.as_str());

    // Files: upload, read back, list, stat; a program sees the upload.
    let r = s.put_bytes(
        &key,
        &format!("/v1/sandboxes/{id}/files?path=data/in.txt"),
        b"42\n".to_vec(),
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let r = s.get(&key, &format!("/v1/sandboxes/{id}/files?path=data/in.txt"));
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().unwrap().as_ref(), b"42\n");
    let l: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/files/list?path=data"))
        .json()
        .unwrap();
    assert_eq!(l["entries"][0]["name"], "in.txt");
    assert_eq!(l["entries"][0]["size"], 3);
    let st: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/files/stat?path=data"))
        .json()
        .unwrap();
    assert_eq!(st["is_dir"], true);
    let v: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["sh", "-c", "cat \"$SANDBOX_INPUT/data/in.txt\""]}),
        )
        .json()
        .unwrap();
    assert_eq!(v["result"]["stdout"], "42\n", "{v}");

    // Code, with stdin and env.
    let v: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/run_code"),
            &json!({"language": "python", "code": "import os,sys; print(int(sys.stdin.read()) + int(os.environ['N']))",
                    "stdin": "40", "env": {"N": "2"}}),
        )
        .json()
        .unwrap();
    assert_eq!(v["result"]["stdout"], "42\n", "{v}");

    // Delete a file, then it is gone.
    let r = s.delete(&key, &format!("/v1/sandboxes/{id}/files?path=data/in.txt"));
    assert_eq!(r.status(), 200);
    let r = s.get(&key, &format!("/v1/sandboxes/{id}/files?path=data/in.txt"));
    assert_eq!(r.status(), 404);

    // Extend, then delete: the sandbox and its workspace are gone.
    let before: Value = s.get(&key, &format!("/v1/sandboxes/{id}")).json().unwrap();
    let after: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/extend"),
            &json!({"by": "30m"}),
        )
        .json()
        .unwrap();
    assert!(after["expires_at"].as_str().unwrap() > before["expires_at"].as_str().unwrap());
    assert_eq!(s.delete(&key, &format!("/v1/sandboxes/{id}")).status(), 204);
    assert_eq!(s.get(&key, &format!("/v1/sandboxes/{id}")).status(), 404);

    // One record per operation, plus the server's own lifecycle records.
    let trail = s.audit();
    let op_rec = trail.iter().filter(|e| e.to_string().contains(&op)).count();
    assert!(op_rec >= 1, "the exec's record is in the trail");
    for ev in ["sandbox.create", "sandbox.delete"] {
        let rec = trail
            .iter()
            .find(|e| e["event"] == ev)
            .unwrap_or_else(|| panic!("no `{ev}` record"));
        // Who did it is named by the key's id, which is not a secret.
        assert!(
            rec["reason"].as_str().unwrap().contains(" by api key ")
                && !rec["reason"].as_str().unwrap().contains("REDACTED"),
            "{rec}"
        );
    }
}

#[test]
fn the_callers_traceparent_is_honoured_in_the_answer_and_the_record() {
    let s = Server::start(&[]);
    let key = s.key("acme", "exec");
    let id = s.sandbox(&key);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = s
        .client
        .post(s.url(&format!("/v1/sandboxes/{id}/exec")))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&json!({"argv": ["true"]}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["sandboxio-trace-id"], trace);
    let v: Value = r.json().unwrap();
    assert_eq!(v["record"]["trace_id"], trace);
}

#[test]
fn an_idle_sandbox_is_reaped_and_recorded() {
    let s = Server::start(&[]);
    let key = s.key("acme", "exec");
    let r = s.post(
        &key,
        "/v1/sandboxes",
        &json!({"tier": "process", "idle_timeout": "1s"}),
    );
    let id = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut gone = false;
    for _ in 0..100 {
        if s.get(&key, &format!("/v1/sandboxes/{id}")).status() == 404 {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(gone, "an idle sandbox was not reaped");
    // The reaper writes its record right after it closed the sandbox.
    let recorded = || {
        s.audit()
            .iter()
            .any(|e| e.to_string().contains("sandbox.reap") && e.to_string().contains(&id))
    };
    let mut seen = recorded();
    for _ in 0..50 {
        if seen {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        seen = recorded();
    }
    assert!(seen, "the reap has no record");
}

/// Standard input is bytes over the JSON API too: base64 with `stdin_encoding`, the same
/// flag the answer's output carries. Every byte value reaches the program and comes back
/// exactly; the bytes (not their spelling) are what an idempotency key binds, so the same
/// bytes sent as text replay the outcome and other bytes are refused.
#[test]
fn binary_stdin_round_trips_byte_exact_and_its_bytes_are_what_a_key_binds() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let path = format!("/v1/sandboxes/{id}/exec");
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(b"\0\xff\xfe\r\n\x1b]52;c;AAAA\x07");
    let v: Value = s
        .post(
            &key,
            &path,
            &json!({"argv": ["cat"], "stdin": b64.encode(&bytes), "stdin_encoding": "base64"}),
        )
        .json()
        .unwrap();
    let r = &v["result"];
    assert_eq!(r["exit"]["code"], 0, "{v}");
    assert_eq!(r["stdout_encoding"], "base64", "{v}");
    let back = b64.decode(r["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(back, bytes, "stdin did not come back byte for byte");
    assert_eq!(r["stdout_bytes"], bytes.len() as u64);

    // Text and base64 of the same bytes are one request for a key; other bytes are not.
    let first: Value = s
        .post(
            &key,
            &path,
            &json!({"argv": ["sh", "-c", "cat; echo \" $$\""], "stdin": "hi", "idempotency_key": "bin-1"}),
        )
        .json()
        .unwrap();
    assert_eq!(first["result"]["exit"]["code"], 0, "{first}");
    let again: Value = s
        .post(
            &key,
            &path,
            &json!({"argv": ["sh", "-c", "cat; echo \" $$\""], "stdin": b64.encode("hi"),
                    "stdin_encoding": "base64", "idempotency_key": "bin-1"}),
        )
        .json()
        .unwrap();
    assert_eq!(
        again["result"]["stdout"], first["result"]["stdout"],
        "the same bytes in base64 did not replay the outcome: {again}"
    );
    let (st, p) = problem(s.post(
        &key,
        &path,
        &json!({"argv": ["sh", "-c", "cat; echo \" $$\""], "stdin": b64.encode(b"hi\xff"),
                "stdin_encoding": "base64", "idempotency_key": "bin-1"}),
    ));
    assert_eq!(p["code"], "SBX_E1505", "{st}: {p}");
}

#[test]
fn an_extension_or_idle_timeout_past_the_longest_lifetime_is_refused_and_the_lifetime_still_ends() {
    let s = Server::start(&[]);
    let key = s.key("acme", "exec,files,read");
    let r = s.post(
        &key,
        "/v1/sandboxes",
        &json!({"tier": "process", "lifetime": "30s"}),
    );
    assert_eq!(r.status(), 201);
    let v: Value = r.json().unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    let created = v["created_at"].as_str().unwrap().to_string();
    let end = v["expires_at"].as_str().unwrap().to_string();

    // Past what any date can hold (this panicked the handler and left the sandbox without
    // an end), past the longest lifetime, or nothing: the caller's mistake, 422.
    for by in ["5000000000000h", "25h", "0s"] {
        let (st, p) = problem(s.post(
            &key,
            &format!("/v1/sandboxes/{id}/extend"),
            &json!({"by": by}),
        ));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (422, "SBX_E1810"),
            "{by}: {p}"
        );
        assert!(p["detail"].as_str().unwrap().contains("by"), "{p}");
    }
    let v: Value = s.get(&key, &format!("/v1/sandboxes/{id}")).json().unwrap();
    assert_eq!(
        v["expires_at"].as_str().unwrap(),
        end,
        "its end did not move"
    );

    // Within the longest lifetime: extended, and capped at 24 h from creation.
    for _ in 0..2 {
        let r = s.post(
            &key,
            &format!("/v1/sandboxes/{id}/extend"),
            &json!({"by": "23h"}),
        );
        assert_eq!(r.status(), 200);
    }
    let v: Value = s.get(&key, &format!("/v1/sandboxes/{id}")).json().unwrap();
    let at = |x: &str| chrono::DateTime::parse_from_rfc3339(x).unwrap();
    assert_eq!(
        at(v["expires_at"].as_str().unwrap()) - at(&created),
        chrono::Duration::hours(24),
        "{v}"
    );

    // An idle timeout has the same bound.
    let (st, p) = problem(s.post(
        &key,
        "/v1/sandboxes",
        &json!({"tier": "process", "idle_timeout": "5000000000000h"}),
    ));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("idle_timeout"),
        "{p}"
    );
    assert_eq!(
        s.post(
            &key,
            "/v1/sandboxes",
            &json!({"tier": "process", "idle_timeout": "24h"}),
        )
        .status(),
        201
    );

    // A far `since` in the audit query is all of it, not a panic.
    assert_eq!(s.get(&key, "/v1/audit?since=100000000000h").status(), 200);
}
