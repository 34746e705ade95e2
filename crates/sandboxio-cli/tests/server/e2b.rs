//! The E2B-compatible API driven over HTTP directly (the Python SDK's suite is in
//! `crates/sandboxio-server/tests/e2b`): what the SDK can only hint at.

use serde_json::{json, Value};

use crate::harness::Server;

/// A server with the E2B API on, its `base` template in the process tier.
pub fn e2b_server(extra_config: &str) -> Server {
    let extra = extra_config.to_string();
    Server::start_with(&[], move |dir| {
        let p = dir.join("config.toml");
        let mut c = std::fs::read_to_string(&p).unwrap();
        c.push_str(&extra);
        c.push_str("\n[e2b]\nenabled = true\n[e2b.templates.base]\ntier = \"process\"\n");
        std::fs::write(p, c).unwrap();
    })
}

/// An E2B sandbox of the `base` template: (id, envd access token).
pub fn e2b_sandbox(s: &Server, key: &str) -> (String, String) {
    let r = s
        .client
        .post(s.url("/sandboxes"))
        .header("X-API-Key", key)
        .json(&json!({"templateID": "base"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    let v: Value = r.json().unwrap();
    (
        v["sandboxID"].as_str().unwrap().to_string(),
        v["envdAccessToken"].as_str().unwrap().to_string(),
    )
}

/// A Connect unary call to envd: (status, answer).
pub fn envd(s: &Server, sbx: &(String, String), method: &str, body: &Value) -> (u16, Value) {
    let r = s
        .client
        .post(s.url(&format!("/{method}")))
        .header("E2b-Sandbox-Id", &sbx.0)
        .header("X-Access-Token", &sbx.1)
        .header("Content-Type", "application/json")
        .json(body)
        .send()
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().unwrap_or(Value::Null))
}

#[test]
fn a_move_onto_the_same_file_under_another_spelling_keeps_it() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let file = |name: &str| format!("/v1/sandboxes/{}/files?path={name}", sbx.0);
    assert_eq!(
        s.put_bytes(&key, &file("keep.txt"), b"precious".to_vec())
            .status(),
        200
    );
    for dest in [
        "/home/user/./keep.txt",
        "/home/user//keep.txt",
        "./keep.txt",
        "keep.txt/",
        "/home/user/keep.txt",
    ] {
        let (st, v) = envd(
            &s,
            &sbx,
            "filesystem.Filesystem/Move",
            &json!({"source": "/home/user/keep.txt", "destination": dest}),
        );
        assert_eq!(st, 200, "{dest}: {v}");
        assert_eq!(v["entry"]["path"], "/home/user/keep.txt", "{dest}: {v}");
        let r = s.get(&key, &file("keep.txt"));
        assert_eq!(r.status(), 200, "{dest}: the file is gone");
        assert_eq!(r.text().unwrap(), "precious");
    }
    // A real move still moves.
    let (st, v) = envd(
        &s,
        &sbx,
        "filesystem.Filesystem/Move",
        &json!({"source": "/home/user/keep.txt", "destination": "/home/user/./moved.txt"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["entry"]["path"], "/home/user/moved.txt", "{v}");
    assert_eq!(s.get(&key, &file("keep.txt")).status(), 404);
    assert_eq!(s.get(&key, &file("moved.txt")).text().unwrap(), "precious");
}

#[test]
fn an_e2b_sandbox_gets_the_configured_limits() {
    let s = e2b_server("\n[limits]\nmemory = \"128MiB\"\noutput_size = \"3MiB\"\n");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let r = s
        .client
        .get(s.url(&format!("/sandboxes/{}", sbx.0)))
        .header("X-API-Key", &key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v["memoryMB"], 128, "{v}");
    assert_eq!(v["diskSizeMB"], 3, "{v}");
    let v: Value = s
        .get(&key, &format!("/v1/sandboxes/{}", sbx.0))
        .json()
        .unwrap();
    assert_eq!(v["limits"]["memory"], 128u64 << 20, "{v}");
}

/// `process.Process/Start` of `argv`: the streaming response (its body unread).
pub fn e2b_start(s: &Server, sbx: &(String, String), argv: &[&str]) -> reqwest::blocking::Response {
    let msg = serde_json::to_vec(&json!({
        "process": {"cmd": argv[0], "args": &argv[1..]}
    }))
    .unwrap();
    let mut body = vec![0u8];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(&msg);
    s.client
        .post(s.url("/process.Process/Start"))
        .header("E2b-Sandbox-Id", &sbx.0)
        .header("X-Access-Token", &sbx.1)
        .header("Content-Type", "application/connect+json")
        .body(body)
        .send()
        .unwrap()
}

#[test]
fn e2b_commands_count_against_the_background_quota() {
    let s = e2b_server("\n[server]\nmax_background = 2\n");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let marker = crate::harness::marker("e2bquota");
    let script = format!("sleep 30 # {marker}");
    let _a = e2b_start(&s, &sbx, &["sh", "-c", &script]);
    let _b = e2b_start(&s, &sbx, &["sh", "-c", &script]);
    // The third is refused with the quota's code, and nothing more runs.
    let c = e2b_start(&s, &sbx, &["sh", "-c", &script]);
    let text = c.text().unwrap();
    assert!(text.contains("SBX_E1852"), "{text}");
    assert!(text.contains("resource_exhausted"), "{text}");
    let listed: Value = s
        .get(&key, &format!("/v1/sandboxes/{}/processes", sbx.0))
        .json()
        .unwrap();
    let running = listed["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "running")
        .count();
    assert_eq!(running, 2, "{listed}");
    // The native API sees the same quota.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{}/exec", sbx.0),
        &json!({"argv": ["true"], "background": true}),
    );
    assert_eq!(r.status(), 429);
}

/// The messages of a Connect stream's body: (flags, JSON).
fn envelopes(mut b: &[u8]) -> Vec<(u8, Value)> {
    let mut out = Vec::new();
    while b.len() >= 5 {
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        out.push((b[0], serde_json::from_slice(&b[5..5 + len]).unwrap()));
        b = &b[5 + len..];
    }
    assert!(b.is_empty(), "a partial envelope at the end");
    out
}

#[test]
fn a_slow_reader_of_a_command_gets_all_of_its_output() {
    use base64::Engine as _;
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    const LINES: usize = 120_000;
    let code = format!("for i in range({LINES}): print(i, flush=True)");
    let r = e2b_start(&s, &sbx, &["python3", "-c", &code]);
    assert_eq!(r.status(), 200);
    // Read nothing while the command writes all of it (one write a line).
    std::thread::sleep(std::time::Duration::from_secs(12));
    let body = r.bytes().unwrap();
    let mut stdout = Vec::new();
    let mut end = Value::Null;
    for (flags, m) in envelopes(&body) {
        if flags & 0x02 != 0 {
            assert_eq!(m, json!({}), "the stream ended with an error");
            continue;
        }
        if let Some(d) = m["event"]["data"]["stdout"].as_str() {
            stdout.extend(base64::engine::general_purpose::STANDARD.decode(d).unwrap());
        }
        if !m["event"]["end"].is_null() {
            end = m["event"]["end"].clone();
        }
    }
    assert_eq!(end["exitCode"], 0, "{end}");
    let text = String::from_utf8(stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), LINES, "lines lost");
    assert!(
        lines.iter().enumerate().all(|(i, l)| *l == i.to_string()),
        "lines out of order"
    );
}

/// An ask on the E2B files route is an error an E2B client reads as one: 403 with the
/// approval id and code, never 202 (which every E2B client reads as success: a read
/// answered the error JSON as the file's content, a write lost its approval id).
#[test]
fn an_ask_on_the_e2b_files_route_is_a_403_with_its_approval() {
    let s = Server::start_with(&[], |dir| {
        let p = dir.join("config.toml");
        let mut c = std::fs::read_to_string(&p).unwrap();
        c.push_str("\n[e2b]\nenabled = true\n[e2b.templates.base]\ntier = \"process\"\n");
        std::fs::write(p, c).unwrap();
        let p = dir.join("policy.toml");
        let mut pol = std::fs::read_to_string(&p).unwrap();
        pol.push_str(
            "\n[[rule]]\nid = \"writes-ask\"\neffect = \"ask\"\nkind = \"file_write\"\nreason = \"a person approves writes\"\n",
        );
        std::fs::write(p, pol).unwrap();
    });
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let r = s
        .client
        .post(s.url("/files?path=a.txt"))
        .header("E2b-Sandbox-Id", &sbx.0)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", &sbx.1)
        .header("Content-Type", "application/octet-stream")
        .body("hello")
        .send()
        .unwrap();
    let st = r.status().as_u16();
    let v: Value = r.json().unwrap_or(Value::Null);
    assert_eq!(st, 403, "{v}");
    assert!(
        v["approval_id"].as_str().is_some_and(|a| !a.is_empty()),
        "{v}"
    );
    assert_eq!(v["sandboxio_code"], "SBX_E1821", "{v}");
}

/// `connect` as a given E2B caller (an API key or a capability token): the access token it
/// is given.
fn e2b_connect(s: &Server, id: &str, caller: &str) -> String {
    let r = s
        .client
        .post(s.url(&format!("/sandboxes/{id}/connect")))
        .header("X-API-Key", caller)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let v: Value = r.json().unwrap();
    assert_eq!(v["envdAccessToken"], v["trafficAccessToken"]);
    v["envdAccessToken"].as_str().unwrap().to_string()
}

/// Whether an E2B `Start` of `true` with this access token ran it: `Ok(())`, or the error
/// text of the stream.
fn e2b_runs(s: &Server, sbx: &(String, String)) -> Result<(), String> {
    let r = e2b_start(s, sbx, &["true"]);
    let status = r.status();
    let body = r.bytes().unwrap();
    let mut ended = false;
    for (flags, m) in envelopes(&body) {
        if flags & 0x02 != 0 && m != json!({}) {
            return Err(m.to_string());
        }
        ended |= m["event"]["end"]["exitCode"] == 0;
    }
    if status == 200 && ended {
        Ok(())
    } else {
        Err(format!("{status} {}", String::from_utf8_lossy(&body)))
    }
}

/// An access token acts as the credential it was given to, never as the key that created
/// the sandbox: a `files`-only key that connects reaches files and not commands; a
/// capability token's access token stops with the token; a token's text naming another
/// credential is refused.
#[test]
fn an_access_token_acts_as_the_credential_that_connected() {
    let s = e2b_server("");
    let owner = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &owner);
    assert_eq!(e2b_runs(&s, &sbx), Ok(()));

    let files_only = s.key("acme", "files");
    let t = e2b_connect(&s, &sbx.0, &files_only);
    assert_ne!(t, sbx.1, "the connecting key's token is its own");
    let as_files = (sbx.0.clone(), t.clone());
    let refused = e2b_runs(&s, &as_files).unwrap_err();
    assert!(refused.contains("SBX_E1803"), "{refused}");
    let (st, v) = envd(
        &s,
        &as_files,
        "filesystem.Filesystem/MakeDir",
        &json!({"path": "/home/user/made"}),
    );
    assert_eq!(st, 200, "{v}");
    // The record names the key that made the call.
    let files_id = files_only.split('_').nth(1).unwrap();
    assert!(
        s.audit().iter().any(|e| e["event"] == "http.forbidden"
            && e["reason"].as_str().unwrap_or_default().contains(files_id)),
        "no refusal naming {files_id}"
    );

    // A capability token for this sandbox with `exec`: its access token works while it
    // does, and not after it is revoked.
    let r = s.post(
        &owner,
        &format!("/v1/sandboxes/{}/tokens", sbx.0),
        &json!({"scopes": ["exec"], "ttl": "10m"}),
    );
    assert_eq!(r.status(), 201);
    let minted: Value = r.json().unwrap();
    let cap = minted["token"].as_str().unwrap();
    let as_cap = (sbx.0.clone(), e2b_connect(&s, &sbx.0, cap));
    assert_eq!(e2b_runs(&s, &as_cap), Ok(()));
    let tid = minted["id"].as_str().unwrap();
    assert_eq!(s.delete(&owner, &format!("/v1/tokens/{tid}")).status(), 204);
    let after = e2b_runs(&s, &as_cap).unwrap_err();
    assert!(after.contains("SBX_E1802"), "{after}");

    // The files-only key's token with the owner's credential id written in: not the
    // owner's token.
    let owner_id = owner.split('_').nth(1).unwrap();
    let forged = t.replacen(files_id, owner_id, 1);
    assert_ne!(forged, t);
    let (st, _) = envd(
        &s,
        &(sbx.0.clone(), forged),
        "filesystem.Filesystem/MakeDir",
        &json!({"path": "/home/user/forged"}),
    );
    assert_eq!(st, 401);
}

/// Listing and reading E2B sandboxes needs what the native API asks (read, exec, run_code
/// or files): a metrics key sees none of them.
#[test]
fn a_metrics_key_cannot_list_or_read_e2b_sandboxes() {
    let s = e2b_server("");
    let owner = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &owner);
    let scraper = s.key("acme", "metrics");
    for path in ["/sandboxes".to_string(), format!("/sandboxes/{}", sbx.0)] {
        let r = s
            .client
            .get(s.url(&path))
            .header("X-API-Key", &scraper)
            .send()
            .unwrap();
        assert_eq!(r.status(), 403, "{path}: {}", r.text().unwrap());
        let r = s
            .client
            .get(s.url(&path))
            .header("X-API-Key", &owner)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}
