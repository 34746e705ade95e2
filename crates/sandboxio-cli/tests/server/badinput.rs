//! Bad input gets a clear, coded answer, changes nothing, and the server keeps serving.

use serde_json::{json, Value};

use crate::harness::{problem, Server};

#[test]
fn bad_input_is_refused_with_a_code_and_the_server_keeps_serving() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let exec = s.url(&format!("/v1/sandboxes/{id}/exec"));
    let send = |body: Vec<u8>| {
        s.client
            .post(&exec)
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
    };
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{\"argv\": [\"true\"".to_vec(), 400, "SBX_E1805"),
        (b"".to_vec(), 400, "SBX_E1805"),
        (
            b"{\"argv\": [\"true\"], \"rm_rf\": true}".to_vec(),
            422,
            "SBX_E1806",
        ),
        (b"{\"argv\": \"true\"}".to_vec(), 422, "SBX_E1806"),
        (b"{\"argv\": []}".to_vec(), 422, "SBX_E1005"),
        (b"{\"argv\": [\"\"]}".to_vec(), 422, "SBX_E1005"),
        (
            b"{\"argv\": [\"true\"], \"timeout\": \"forever\"}".to_vec(),
            422,
            "SBX_E1806",
        ),
        (
            b"{\"argv\": [\"true\"], \"idempotency_key\": \"has space\"}".to_vec(),
            422,
            "SBX_E1810",
        ),
        // An environment no program can have: refused as bad input (not a sandbox
        // failure), before any state changes (the chain's refusal is recorded).
        (
            b"{\"argv\": [\"true\"], \"env\": {\"A\": \"x\\u0000y\"}}".to_vec(),
            422,
            "SBX_E1005",
        ),
        (
            b"{\"argv\": [\"true\"], \"env\": {\"A=B\": \"x\"}}".to_vec(),
            422,
            "SBX_E1005",
        ),
        (
            b"{\"argv\": [\"true\"], \"env\": {\"\": \"x\"}}".to_vec(),
            422,
            "SBX_E1005",
        ),
        // Binary stdin: base64 that is not, an encoding without stdin, an unknown one.
        (
            b"{\"argv\": [\"true\"], \"stdin\": \"!!\", \"stdin_encoding\": \"base64\"}".to_vec(),
            422,
            "SBX_E1810",
        ),
        (
            b"{\"argv\": [\"true\"], \"stdin_encoding\": \"base64\"}".to_vec(),
            422,
            "SBX_E1810",
        ),
        (
            b"{\"argv\": [\"true\"], \"stdin\": \"x\", \"stdin_encoding\": \"rot13\"}".to_vec(),
            422,
            "SBX_E1806",
        ),
    ];
    for (body, status, code) in cases {
        let shown = String::from_utf8_lossy(&body).into_owned();
        let before = s.audit().len();
        let (st, p) = problem(send(body));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (status, code),
            "{shown}: {p}"
        );
        // A body the server cannot read never reaches the chain (the chain's own refusal
        // of a readable but invalid operation, SBX_E1005, is recorded).
        if code != "SBX_E1005" {
            let audit = s.audit();
            assert_eq!(
                audit.len(),
                before,
                "{shown} was recorded: {:?}",
                &audit[before..]
            );
        }
    }
    // A tier this build cannot run: refused at create, not at every exec after it.
    for tier in ["microvm", "remote"] {
        let (st, p) = problem(s.post(&key, "/v1/sandboxes", &json!({ "tier": tier })));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (422, "SBX_E1810"),
            "{tier}: {p}"
        );
    }
    // The same environment given to a new sandbox: refused there.
    let (st, p) = problem(s.post(&key, "/v1/sandboxes", &json!({"env": {"A=B": "x"}})));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");
    // One argument longer than execve takes: refused as bad input (it was a 500 from the
    // sandbox with a bare errno); the longest it takes runs.
    let arg =
        |n: usize| json!({"argv": ["sh", "-c", "printf %s \"$1\" | wc -c", "sh", "x".repeat(n)]});
    let (st, p) = problem(s.post(&key, &format!("/v1/sandboxes/{id}/exec"), &arg(32 * 4096)));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1005"), "{p}");
    assert!(p["detail"].as_str().unwrap().contains("longer than"), "{p}");
    let v: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/exec"),
            &arg(32 * 4096 - 1),
        )
        .json()
        .unwrap();
    assert_eq!(
        v["result"]["stdout"].as_str().unwrap().trim(),
        "131071",
        "{v}"
    );
    // A program that is not there, or not executable: the request's fault (422, with the
    // system's reason), not a server error.
    for argv in ["no-such-program", "/no/such/path", "/etc/passwd"] {
        let (st, p) = problem(s.post(
            &key,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({ "argv": [argv] }),
        ));
        assert_eq!(st, 422, "{argv}: {p}");
        // The code says which step refused it (it differs by tier).
        let code = p["code"].as_str().unwrap();
        assert!(
            ["SBX_E1421", "SBX_E1422", "SBX_E1468"].contains(&code),
            "{argv}: {p}"
        );
        assert!(p["detail"].as_str().unwrap().contains(argv), "{argv}: {p}");
    }
    // Oversized: more than the 1 MiB JSON limit.
    let mut big = b"{\"argv\": [\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 2 << 20));
    big.extend(b"\"]}");
    let (st, p) = problem(send(big));
    assert_eq!((st, p["code"].as_str().unwrap()), (413, "SBX_E1807"));

    // Path traversal in the file API: refused, with a code and a record.
    for path in ["../../etc/passwd", "/etc/passwd", "a/../../x"] {
        let url = format!("/v1/sandboxes/{id}/files?path={}", urlencode(path));
        let (st, p) = problem(s.get(&key, &url));
        assert_eq!(st, 403, "{path}: {p}");
        assert!(p["record"].is_object(), "{path}: the refusal is recorded");
        let (st, _) = problem(s.put_bytes(&key, &url, b"x".to_vec()));
        assert_eq!(st, 403, "{path}");
    }
    // Unknown route and unknown query field.
    let (st, p) = problem(s.get(&key, "/v1/nothing-here"));
    assert_eq!((st, p["code"].as_str().unwrap()), (404, "SBX_E1815"));

    let r = s
        .client
        .patch(s.url("/v1/sandboxes"))
        .bearer_auth(&key)
        .send()
        .unwrap();
    let (st, p) = problem(r);
    assert_eq!((st, p["code"].as_str().unwrap()), (405, "SBX_E1816"));

    // Still serving.
    assert_eq!(
        s.client.get(s.url("/healthz")).send().unwrap().status(),
        200
    );
    let v: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["echo", "ok"]}),
        )
        .json()
        .unwrap();
    assert_eq!(v["result"]["stdout"], "ok\n");
    assert!(!std::path::Path::new("/etc/passwd.x").exists());
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A malformed query string or path parameter, and a request the MCP transport refuses, are
/// answered as coded problems like every other refusal (they were axum's and rmcp's plain
/// text), and a query value that is not UTF-8 is refused instead of read with U+FFFD in
/// place of its bytes (which named another, existing file).
#[test]
fn malformed_urls_and_transport_refusals_are_coded_problems() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    // A file whose name is U+FFFD, which the lossy decoding of `%ff` used to name.
    let replacement = format!("/v1/sandboxes/{id}/files?path=%EF%BF%BD");
    assert_eq!(
        s.put_bytes(&key, &replacement, b"other".to_vec()).status(),
        200
    );
    let (st, p) = problem(s.get(&key, &format!("/v1/sandboxes/{id}/files?path=%ff")));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");
    assert!(p["detail"].as_str().unwrap().contains("`path`"), "{p}");

    for q in [
        "files",
        "files?path=a&path=b",
        "files?bogus=1",
        "files?path=a%",
    ] {
        let (st, p) = problem(s.get(&key, &format!("/v1/sandboxes/{id}/{q}")));
        if q.ends_with('%') {
            // A stray `%` is kept as it is: the name `a%`, which does not exist.
            assert_eq!(st, 404, "{q}: {p}");
            continue;
        }
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (422, "SBX_E1810"),
            "{q}: {p}"
        );
    }
    let (st, p) = problem(s.get(&key, "/v1/approvals?limit=abc"));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");
    let (st, p) = problem(s.post(&key, "/v1/sandboxes/%ff/exec", &json!({"argv": ["true"]})));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");
    // The routes whose sandbox the scope guard reads from the path (it answered 500).
    for path in [
        "/v1/sandboxes/%ff/contexts".to_string(),
        format!("/v1/sandboxes/{id}/contexts/%C0%AF/run"),
    ] {
        let (st, p) = problem(s.post(&key, &path, &json!({"code": "1"})));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (422, "SBX_E1810"),
            "{path}: {p}"
        );
    }
    // A WebSocket route asked without the handshake.
    let (st, p) = problem(s.get(&key, &format!("/v1/sandboxes/{id}/exec/ws")));
    assert_eq!((st, p["code"].as_str().unwrap()), (422, "SBX_E1810"), "{p}");

    // The MCP transport's refusals: no `Accept` for both answers, then no JSON body.
    let mcp = |accept: &str, ct: &str| {
        s.client
            .post(s.url("/mcp"))
            .bearer_auth(&key)
            .header("accept", accept)
            .header("content-type", ct)
            .body("x")
            .send()
            .unwrap()
    };
    let (st, p) = problem(mcp("text/plain", "application/json"));
    assert_eq!((st, p["code"].as_str().unwrap()), (406, "SBX_E1920"), "{p}");
    let (st, p) = problem(mcp("application/json, text/event-stream", "text/plain"));
    assert_eq!((st, p["code"].as_str().unwrap()), (415, "SBX_E1920"), "{p}");
    // JSON that is not a JSON-RPC message (the body is `x`): a bad request.
    let (st, p) = problem(mcp(
        "application/json, text/event-stream",
        "application/json",
    ));
    assert_eq!((st, p["code"].as_str().unwrap()), (400, "SBX_E1920"), "{p}");

    // Nothing was changed: the U+FFFD file still holds what was written.
    let r = s.get(&key, &replacement);
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().unwrap().as_ref(), b"other");
}
