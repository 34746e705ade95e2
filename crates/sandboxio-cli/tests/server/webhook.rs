//! The approval webhook against a real loopback receiver: every ask is POSTed, signed with
//! HMAC-SHA256 under a secret from the environment, retried with backoff until the
//! receiver takes it; a receiver that never answers leaves a failed record. The secret
//! never reaches the trail.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::Server;

const SECRET: &str = "whsec-test-3f9a1c77e2";
const ENV: &str = "SBX_TEST_WEBHOOK_SECRET";

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().to_vec()
}

/// Whether `header` (`t=..,v1=..`) signs `body` under `secret`.
fn verifies(header: &str, body: &[u8], secret: &str) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", x)) => t = Some(x.to_string()),
            Some(("v1", x)) => v1 = Some(x.to_string()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let mut msg = format!("{t}.").into_bytes();
    msg.extend_from_slice(body);
    hex::encode(hmac(secret.as_bytes(), &msg)) == v1
}

struct Delivery {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Delivery {
    fn header(&self, name: &str) -> String {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// Reads one request from `conn`, answers it (500 while `fail` is set, else 200) and
/// returns it; `None` when nothing (or no whole request) came.
fn serve_one<S: Read + Write>(conn: &mut S, fail: bool) -> Option<Delivery> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    let status = if fail {
        "500 Internal Server Error"
    } else {
        "200 OK"
    };
    let conn = r.into_inner();
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    let _ = conn.flush();
    Some(Delivery { headers, body })
}

/// A receiver on loopback: answers 500 to the first `fail_first` requests, then 200.
/// With `tls`, it speaks HTTPS with that certificate (a failed handshake is no delivery).
fn receiver_with(
    fail_first: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (String, mpsc::Receiver<Delivery>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}/hook", l.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut n = 0;
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            let got = match &tls {
                Some(cfg) => {
                    let Ok(sc) = rustls::ServerConnection::new(cfg.clone()) else {
                        continue;
                    };
                    let mut s = rustls::StreamOwned::new(sc, conn);
                    serve_one(&mut s, n < fail_first)
                }
                None => {
                    let mut conn = conn;
                    serve_one(&mut conn, n < fail_first)
                }
            };
            if let Some(d) = got {
                n += 1;
                let _ = tx.send(d);
            }
        }
    });
    (url, rx)
}

fn receiver(fail_first: usize) -> (String, mpsc::Receiver<Delivery>) {
    receiver_with(fail_first, None)
}

/// A throwaway CA (its PEM) and a certificate it signed for `localhost` and 127.0.0.1,
/// as a TLS server configuration.
fn https_identity() -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "sandboxio webhook test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone()], key)
        .unwrap();
    (ca_cert.pem(), Arc::new(cfg))
}

fn server(url: &str, attempts: u32) -> Server {
    server_trusting(url, attempts, None)
}

/// A server whose webhook trusts only the CA in `ca_pem` (written beside its config).
fn server_trusting(url: &str, attempts: u32, ca_pem: Option<&str>) -> Server {
    let ca_line = |d: &std::path::Path| match ca_pem {
        Some(pem) => {
            let p = d.join("webhook-ca.pem");
            std::fs::write(&p, pem).unwrap();
            format!("ca_file = \"{}\"\n", p.display())
        }
        None => String::new(),
    };
    let env = format!("{ENV}={SECRET}");
    Server::start_wrapped(&["env", &env], &[], |d| {
        let section = format!(
            "\n[server.approval_webhook]\nurl = \"{url}\"\nsecret_env = \"{ENV}\"\ntimeout = \"2s\"\nattempts = {attempts}\n{}",
            ca_line(d)
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("config.toml"))
            .unwrap();
        f.write_all(section.as_bytes()).unwrap();
    })
}

/// Asks for approval (the test policy asks before `touch`); the approval id.
fn ask(s: &Server, key: &str) -> String {
    let id = s.sandbox(key);
    let r = s.post(
        key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["touch", "x"]}),
    );
    assert_eq!(r.status(), 202);
    r.json::<Value>().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn webhook_record(s: &Server, approval: &str) -> Value {
    for _ in 0..300 {
        if let Some(r) = s
            .audit()
            .into_iter()
            .find(|e| e["event"] == "approval.webhook" && e.to_string().contains(approval))
        {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no webhook record for {approval}");
}

#[test]
fn each_ask_is_posted_signed_and_retried_until_the_receiver_takes_it() {
    let (url, got) = receiver(2);
    let s = server(&url, 4);
    let key = s.key("acme", "all");
    let approval = ask(&s, &key);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            got.recv_timeout(Duration::from_secs(20))
                .expect("a delivery"),
        );
    }
    let delivery = seen[0].header("sandboxio-delivery");
    assert!(!delivery.is_empty());
    for d in &seen {
        let sig = d.header("sandboxio-signature");
        assert!(verifies(&sig, &d.body, SECRET), "bad signature {sig}");
        assert!(!verifies(&sig, &d.body, "another-secret"));
        let mut tampered = d.body.clone();
        tampered[0] ^= 1;
        assert!(
            !verifies(&sig, &tampered, SECRET),
            "a changed body still verifies"
        );
        assert_eq!(
            d.header("sandboxio-delivery"),
            delivery,
            "one delivery, retried"
        );
        let v: Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(v["event"], "approval.pending");
        assert_eq!(v["approval"]["id"], approval.as_str());
        assert_eq!(v["approval"]["tenant"], "acme");
        assert_eq!(v["approve"], format!("/v1/approvals/{approval}/approve"));
    }
    assert!(
        got.recv_timeout(Duration::from_secs(2)).is_err(),
        "delivered again after a 200"
    );
    let rec = webhook_record(&s, &approval);
    assert_eq!(rec["status"], "ok", "{rec}");
    assert!(
        rec["reason"].as_str().unwrap().contains("attempt 3"),
        "{rec}"
    );
    let trail = std::fs::read_to_string(s.state().join("audit.jsonl")).unwrap();
    assert!(!trail.contains(SECRET), "the secret reached the trail");
}

#[test]
fn a_receiver_that_never_answers_leaves_a_failed_record() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = server(&format!("http://127.0.0.1:{port}/hook"), 2);
    let key = s.key("acme", "all");
    let approval = ask(&s, &key);
    let rec = webhook_record(&s, &approval);
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error_code"], "SBX_E1854", "{rec}");
    assert!(
        rec["reason"].as_str().unwrap().contains("after 2 attempts"),
        "{rec}"
    );
    // The ask itself still waits for a person.
    let r = s.get(&key, &format!("/v1/approvals/{approval}"));
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().unwrap()["state"], "pending");
}

#[test]
fn over_https_the_receivers_certificate_is_verified_and_the_signature_checks() {
    let (ca_pem, tls) = https_identity();
    let (url, got) = receiver_with(0, Some(tls));
    let s = server_trusting(&url, 2, Some(&ca_pem));
    let key = s.key("acme", "all");
    let approval = ask(&s, &key);
    let d = got
        .recv_timeout(Duration::from_secs(30))
        .expect("a delivery over https");
    let sig = d.header("sandboxio-signature");
    assert!(verifies(&sig, &d.body, SECRET), "bad signature {sig}");
    let v: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(v["approval"]["id"], approval.as_str());
    let rec = webhook_record(&s, &approval);
    assert_eq!(rec["status"], "ok", "{rec}");
}

#[test]
fn over_https_a_certificate_from_another_ca_is_refused_and_nothing_is_delivered() {
    let (_, tls) = https_identity();
    // The server trusts a CA that did not sign the receiver's certificate.
    let (other_ca, _) = https_identity();
    let (url, got) = receiver_with(0, Some(tls));
    let s = server_trusting(&url, 2, Some(&other_ca));
    let key = s.key("acme", "all");
    let approval = ask(&s, &key);
    let rec = webhook_record(&s, &approval);
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error_code"], "SBX_E1854", "{rec}");
    let reason = rec["reason"].as_str().unwrap();
    assert!(reason.contains("TLS"), "{rec}");
    assert!(
        got.recv_timeout(Duration::from_millis(200)).is_err(),
        "a delivery reached a receiver whose certificate was not trusted"
    );
}

#[test]
fn plain_http_to_another_host_is_refused_at_start() {
    let d = tempfile::tempdir().unwrap();
    let config = d.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[server.approval_webhook]\nurl = \"http://hooks.example.com/h\"\nsecret_env = \"{ENV}\"\n"),
    )
    .unwrap();
    let out = std::process::Command::new(crate::harness::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(d.path().join("state"))
        .env(ENV, SECRET)
        .env_remove("SBX_STATE_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SBX_E1853") && err.contains("loopback"),
        "{err}"
    );
}
