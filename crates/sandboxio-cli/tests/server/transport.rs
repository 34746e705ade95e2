//! The Unix socket (0600), TLS, OpenAPI, health, the concurrency limit and graceful
//! shutdown.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::processes_with;
use crate::harness::{problem, Server};

#[test]
fn the_unix_socket_is_0600_and_serves_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let mut s = Server::start(&["--socket", sock.to_str().unwrap()]);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let client = reqwest::blocking::Client::builder()
        .unix_socket(sock.clone())
        .build()
        .unwrap();
    let r = client.get("http://localhost/healthz").send().unwrap();
    assert_eq!(r.status(), 200);
    let key = s.key("acme", "all");
    let r = client
        .post("http://localhost/v1/sandboxes")
        .bearer_auth(&key)
        .json(&json!({"tier": "process"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(s.terminate().success());
    assert!(!sock.exists(), "the socket is removed at shutdown");
}

#[test]
fn openapi_health_and_readiness() {
    let s = Server::start(&[]);
    let doc: Value = s
        .client
        .get(s.url("/v1/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    for p in [
        "/v1/sandboxes",
        "/v1/sandboxes/{id}/exec",
        "/v1/sandboxes/{id}/files",
        "/v1/approvals/{id}/outcome",
        "/v1/kill",
        "/healthz",
    ] {
        assert!(
            doc["paths"][p].is_object(),
            "{p} missing from the OpenAPI document"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(
        s.client.get(s.url("/healthz")).send().unwrap().status(),
        200
    );
    assert_eq!(s.client.get(s.url("/readyz")).send().unwrap().status(), 200);
}

#[test]
fn tls_with_a_configured_certificate() {
    let have = |b: &str| {
        Command::new(b).arg("--version").output().is_ok()
            || Command::new(b).arg("version").output().is_ok()
    };
    if !have("openssl") || !have("curl") {
        eprintln!(
            "skipping tls_with_a_configured_certificate: needs the openssl and curl programs"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let t = Server::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert!(t.base.starts_with("https://"), "{}", t.base);
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cert)
        .arg(t.url("/healthz"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ok\""));
    // Plain HTTP to the TLS port is not answered as HTTP.
    let plain = t.base.replace("https://", "http://");
    assert!(t.client.get(format!("{plain}/healthz")).send().is_err());
}

#[test]
fn past_the_concurrency_limit_requests_get_503_and_the_server_recovers() {
    let s = Server::start(&["--max-concurrent", "1"]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    std::thread::scope(|sc| {
        let slow = sc.spawn(|| {
            s.post(
                &key,
                &format!("/v1/sandboxes/{id}/exec"),
                &json!({"argv": ["sleep", "5"]}),
            )
            .status()
        });
        // While the slow one runs, the next request is refused. Give the slow one a head
        // start, so that it holds the only slot (not the poll below).
        std::thread::sleep(Duration::from_millis(500));
        let mut refused = None;
        while !slow.is_finished() {
            let r = s.get(&key, "/v1/sandboxes");
            if r.status() == 503 {
                refused = Some(r);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = refused.expect("no request was refused while the limit was reached");
        let retry = r.headers().get("retry-after").is_some();
        let (st, p) = problem(r);
        assert_eq!((st, p["code"].as_str().unwrap()), (503, "SBX_E1808"));
        assert!(retry);
        assert_eq!(slow.join().unwrap(), 200);
    });
    assert_eq!(s.get(&key, "/v1/sandboxes").status(), 200);
}

#[test]
fn sigterm_lets_work_finish_up_to_the_grace_then_cancels_it_and_leaves_no_process() {
    let mut s = Server::start(&["--shutdown-grace", "1s"]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let marker = format!("sbx-grace-{}", s.pid());
    let script = format!("sleep 60 # {marker}");
    std::thread::scope(|sc| {
        let long = sc.spawn(|| {
            s.post(
                &key,
                &format!("/v1/sandboxes/{id}/exec"),
                &json!({"argv": ["sh", "-c", script]}),
            )
        });
        for _ in 0..200 {
            if !processes_with(&marker).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !processes_with(&marker).is_empty(),
            "the command did not start"
        );
        let pid = s.pid().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        // The running request is answered: cancelled, with its record.
        let r = long.join().unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().unwrap();
        assert_eq!(v["record"]["status"], "cancelled", "{v}");
    });
    assert!(s.terminate_wait().success());
    assert!(
        processes_with(&marker).is_empty(),
        "a sandboxed process outlived the server"
    );
}
