//! A hostile client against the E2B-compatible API (and the native calls it shares code
//! with): a template's command limit, label bounds and reserved names, revocation of an
//! open stream, multipart uploads, `connect` of a paused sandbox, `/health` without a key.

use std::io::Read;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::e2b::{e2b_sandbox, e2b_server, e2b_start};
use crate::harness::{gone_within, marker, started, Server};

/// `POST /v2/sandboxes` with `body`: (status, answer).
fn e2b_create(s: &Server, key: &str, body: &Value) -> (u16, Value) {
    let r = s
        .client
        .post(s.url("/v2/sandboxes"))
        .header("X-API-Key", key)
        .json(body)
        .send()
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().unwrap_or(Value::Null))
}

/// The tenant's E2B sandboxes.
fn e2b_list(s: &Server, key: &str) -> Vec<Value> {
    let r = s
        .client
        .get(s.url("/v2/sandboxes"))
        .header("X-API-Key", key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Vec<Value>>().unwrap()
}

/// The tenant's native sandboxes.
fn native_list(s: &Server, key: &str) -> Vec<Value> {
    let v: Value = s.get(key, "/v1/sandboxes").json().unwrap();
    v["sandboxes"]
        .as_array()
        .or_else(|| v.as_array())
        .cloned()
        .unwrap_or_default()
}

/// Reads a streamed body on a thread: its chunks as they come, then `None` at its end.
fn reader(mut r: reqwest::blocking::Response) -> mpsc::Receiver<Option<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(n) => {
                    if tx.send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Waits (at most `secs`) for `needle` in what `rx` delivers; all of it so far.
fn wait_for(rx: &mpsc::Receiver<Option<Vec<u8>>>, got: &mut Vec<u8>, needle: &str, secs: u64) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !String::from_utf8_lossy(got).contains(needle) {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(b)) => got.extend(b),
            Ok(None) => panic!(
                "the stream ended before {needle:?}: {}",
                String::from_utf8_lossy(got)
            ),
            Err(_) => panic!(
                "no {needle:?} within {secs} s: {}",
                String::from_utf8_lossy(got)
            ),
        }
    }
}

/// How long the stream takes to end (at most `secs`; `None`: it did not).
fn ends_within(
    rx: &mpsc::Receiver<Option<Vec<u8>>>,
    got: &mut Vec<u8>,
    secs: u64,
) -> Option<Duration> {
    let t = Instant::now();
    let end = t + Duration::from_secs(secs);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(b)) => got.extend(b),
            Ok(None) => return Some(t.elapsed()),
            Err(_) => return None,
        }
    }
}

/// `[e2b.templates.X] timeout` is each command's limit over
/// `process.Process/Start` too, whatever time limit the SDK sends (the smaller wins).
#[test]
fn a_templates_command_limit_holds_for_commands_started_over_envd() {
    let s = e2b_server("\n[e2b.templates.small]\ntier = \"process\"\ntimeout = \"2s\"\n");
    let key = s.key("acme", "exec,run_code,files,read");
    let (st, v) = e2b_create(&s, &key, &json!({"templateID": "small"}));
    assert_eq!(st, 201, "{v}");
    let sbx = (
        v["sandboxID"].as_str().unwrap().to_string(),
        v["envdAccessToken"].as_str().unwrap().to_string(),
    );
    let msg = serde_json::to_vec(&json!({
        "process": {"cmd": "sh", "args": ["-c", "sleep 6; echo finished"]}
    }))
    .unwrap();
    let mut body = vec![0u8];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(&msg);
    for limit in [None, Some("60000")] {
        let t = Instant::now();
        let mut req = s
            .client
            .post(s.url("/process.Process/Start"))
            .header("E2b-Sandbox-Id", &sbx.0)
            .header("X-Access-Token", &sbx.1)
            .header("Content-Type", "application/connect+json");
        if let Some(ms) = limit {
            req = req.header("Connect-Timeout-Ms", ms);
        }
        let r = req.body(body.clone()).send().unwrap();
        assert_eq!(r.status(), 200);
        let text = String::from_utf8_lossy(&r.bytes().unwrap()).into_owned();
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "{limit:?}: the command ran {took:?} past the template's 2 s: {text}"
        );
        assert!(text.contains("time limit"), "{limit:?}: {text}");
    }
}

/// Labels (E2B metadata, native labels) are bounded; over the bounds the create
/// is refused with its code and no sandbox is made.
#[test]
fn labels_over_their_bounds_are_refused_and_nothing_is_created() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let many: serde_json::Map<String, Value> = (0..1000)
        .map(|i| (format!("k{i:04}"), json!("v".repeat(900))))
        .collect();
    let long_key = json!({ "k".repeat(300): "v" });
    let long_value = json!({"k": "v".repeat(5000)});
    let total: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("k{i:02}"), json!("v".repeat(1000))))
        .collect();
    for labels in [
        Value::Object(many),
        long_key,
        long_value,
        Value::Object(total),
        json!({"": "empty"}),
    ] {
        refused_both_ways(&s, &key, &labels, "SBX_E1856", "bounds");
    }
    assert!(e2b_list(&s, &key).is_empty());
    assert!(native_list(&s, &key).is_empty(), "a sandbox was made");
    // Within the bounds: accepted.
    let ok: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("team{i}"), json!("x".repeat(100))))
        .collect();
    let (st, v) = e2b_create(&s, &key, &json!({"templateID": "base", "metadata": ok}));
    assert_eq!(st, 201, "{v}");
}

/// Creating a sandbox with `labels` is refused with 400 and `code`, as E2B metadata and
/// as native labels.
fn refused_both_ways(s: &Server, key: &str, labels: &Value, code: &str, what: &str) {
    let (st, v) = e2b_create(s, key, &json!({"templateID": "base", "metadata": labels}));
    assert_eq!(st, 400, "{what}: {v}");
    assert_eq!(v["sandboxio_code"], code, "{what}: {v}");
    let r = s.post(
        key,
        "/v1/sandboxes",
        &json!({"tier": "process", "labels": labels}),
    );
    let (st, v) = crate::harness::problem(r);
    assert_eq!(st, 400, "{what}: {v}");
    assert_eq!(v["code"], code, "{what}: {v}");
}

/// The labels the system sets itself (and the cost report reads) cannot be set
/// by a client: a tenant cannot put its charges into another tenant's report.
#[test]
fn reserved_label_names_are_refused() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    for name in [
        "tenant_id",
        "category",
        "sandbox_session",
        "e2b_template",
        "e2b_pid",
        "code_context",
        "refusals",
        "egress.parent_operation",
    ] {
        refused_both_ways(&s, &key, &json!({ name: "victimcorp" }), "SBX_E1857", name);
    }
    assert!(e2b_list(&s, &key).is_empty());
    assert!(native_list(&s, &key).is_empty(), "a sandbox was made");
}

/// Revoking a key ends its open E2B command stream at once, and the command it
/// started is ended too.
#[test]
fn revoking_a_key_ends_its_e2b_command_stream_and_the_command() {
    let s = e2b_server("");
    let owner = s.key("acme", "exec,run_code,files,read");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let m = marker("revoked-e2b");
    let script = format!("for i in $(seq 1 60); do echo tick $i; sleep 0.5; done # {m}");
    let r = e2b_start(&s, &sbx, &["sh", "-c", &script]);
    assert_eq!(r.status(), 200);
    let rx = reader(r);
    let mut got = Vec::new();
    assert!(started(&m));
    // "tick 2", base64 in the stream: read until some output came.
    wait_for(&rx, &mut got, "stdout", 30);
    s.revoke(&key);
    let took = ends_within(&rx, &mut got, 10);
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(4)),
        "the stream went on after the revocation ({took:?}): {text}"
    );
    assert!(text.contains("SBX_E1802"), "{text}");
    let left = gone_within(&m, 10);
    assert!(left.is_empty(), "the command outlived its key: {left:?}");
    // Another key of the tenant still works in the sandbox.
    let r = s.get(&owner, &format!("/v1/sandboxes/{}", sbx.0));
    assert_eq!(r.status(), 200);
}

/// Native: a streamed exec of a key revoked meanwhile ends promptly, and so does
/// its command.
#[test]
fn revoking_a_key_ends_its_native_exec_stream() {
    let s = Server::start(&[]);
    let key = s.key("acme", "exec,run_code,files,read");
    let id = s.sandbox(&key);
    let m = marker("revoked-native");
    let script = format!("for i in $(seq 1 60); do echo tick $i; sleep 0.5; done # {m}");
    let r = s
        .client
        .post(s.url(&format!("/v1/sandboxes/{id}/exec")))
        .bearer_auth(&key)
        .header("accept", "application/x-ndjson")
        .json(&json!({"argv": ["sh", "-c", &script], "timeout": "60s"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let rx = reader(r);
    let mut got = Vec::new();
    wait_for(&rx, &mut got, "tick 2", 30);
    s.revoke(&key);
    let took = ends_within(&rx, &mut got, 10);
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(4)),
        "the stream went on after the revocation ({took:?}): {text}"
    );
    assert!(text.contains("SBX_E1802"), "{text}");
    let left = gone_within(&m, 10);
    assert!(left.is_empty(), "the command outlived its key: {left:?}");
}

fn upload_multipart(s: &Server, sbx: &(String, String), body: &'static [u8]) -> (u16, Value) {
    let r = s
        .client
        .post(s.url("/files"))
        .header("E2b-Sandbox-Id", &sbx.0)
        .header("X-Access-Token", &sbx.1)
        .header("Content-Type", "multipart/form-data; boundary=XB")
        .body(body)
        .send()
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().unwrap_or(Value::Null))
}

fn e2b_read(s: &Server, sbx: &(String, String), path: &str) -> (u16, Vec<u8>) {
    let r = s
        .client
        .get(s.url(&format!(
            "/files?path={}",
            path.replace('%', "%25").replace(';', "%3B").replace('=', "%3D")
        )))
        .header("E2b-Sandbox-Id", &sbx.0)
        .header("X-Access-Token", &sbx.1)
        .send()
        .unwrap();
    (r.status().as_u16(), r.bytes().unwrap().to_vec())
}

/// A multipart upload is all or nothing for bad input (a bad part is refused
/// before any part is written), and a quoted `filename` is read whole.
#[test]
fn a_multipart_upload_with_a_bad_part_writes_nothing_and_names_are_read_whole() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let bad: &[u8] = b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"mp1.txt\"\r\n\r\nfirst\r\n--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../etc/evil\"\r\n\r\nsecond\r\n--XB--\r\n";
    let (st, v) = upload_multipart(&s, &sbx, bad);
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["sandboxio_code"], "SBX_E2505", "{v}");
    assert_eq!(e2b_read(&s, &sbx, "mp1.txt").0, 404, "a part was written");

    let quoted: &[u8] = b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a;b=c.txt\"\r\n\r\nquoted\r\n--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d\\\\e.txt\"\r\n\r\nslash\r\n--XB--\r\n";
    let (st, v) = upload_multipart(&s, &sbx, quoted);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v[0]["name"], "a;b=c.txt", "{v}");
    assert_eq!(v[1]["name"], "d\\e.txt", "{v}");
    assert_eq!(e2b_read(&s, &sbx, "a;b=c.txt"), (200, b"quoted".to_vec()));
    assert_eq!(e2b_read(&s, &sbx, "a").0, 404);

    // Two `filename`s in one part: which one is meant is not guessed.
    let twice: &[u8] = b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.txt\"; filename=\"y.txt\"\r\n\r\nz\r\n--XB--\r\n";
    let (st, v) = upload_multipart(&s, &sbx, twice);
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["sandboxio_code"], "SBX_E2506", "{v}");
    assert_eq!(e2b_read(&s, &sbx, "x.txt").0, 404);
    assert_eq!(e2b_read(&s, &sbx, "y.txt").0, 404);
}

/// `connect` with a bad `timeout` is refused before it resumes anything.
#[test]
fn connect_with_a_bad_timeout_leaves_a_paused_sandbox_paused() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let post = |path: &str, body: &Value| {
        s.client
            .post(s.url(path))
            .header("X-API-Key", &key)
            .json(body)
            .send()
            .unwrap()
    };
    let r = post(&format!("/sandboxes/{}/pause", sbx.0), &json!({}));
    assert_eq!(r.status(), 204);
    for bad in [json!(-1), json!(0), json!(10_000_000)] {
        let r = post(
            &format!("/sandboxes/{}/connect", sbx.0),
            &json!({ "timeout": bad }),
        );
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().unwrap();
        assert_eq!(v["sandboxio_code"], "SBX_E2508", "{v}");
        let v: Value = s
            .client
            .get(s.url(&format!("/sandboxes/{}", sbx.0)))
            .header("X-API-Key", &key)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v["state"], "paused", "{bad}: {v}");
    }
}

/// Without a token, `/health` answers the same for a sandbox that exists and one
/// that does not.
#[test]
fn health_without_a_token_does_not_tell_whether_a_sandbox_exists() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let health = |id: &str, token: Option<&str>| {
        let mut r = s.client.get(s.url("/health")).header("E2b-Sandbox-Id", id);
        if let Some(t) = token {
            r = r.header("X-Access-Token", t);
        }
        let r = r.send().unwrap();
        let st = r.status().as_u16();
        let v: Value = r.json().unwrap_or(Value::Null);
        (st, v["sandboxio_code"].clone())
    };
    let unknown = "0123456789abcdef0123456789abcdef";
    let existing = health(&sbx.0, None);
    assert_eq!(existing.0, 401);
    assert_eq!(health(unknown, None), existing);
    assert_eq!(health(unknown, Some("sbxe_forged")), existing);
    assert_eq!(health(&sbx.0, Some("sbxe_forged")), existing);
    // The holder of the sandbox's token still learns that it is gone (E2B's `is_running`).
    assert_eq!(health(&sbx.0, Some(&sbx.1)).0, 204);
    let r = s
        .client
        .delete(s.url(&format!("/sandboxes/{}", sbx.0)))
        .header("X-API-Key", &key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(health(&sbx.0, Some(&sbx.1)).0, 502);
}
