//! Who may hold the places among the requests the server works on at once: a client
//! without a credential cannot take them with slow bodies, one tenant cannot take more than
//! its share (nor every long-poll), and operator actions keep a place of their own. The
//! refusals are recorded at a bounded rate, never with the credential presented.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{problem, Server};

/// A request whose headers and first body byte are sent, the rest never: it waits for
/// its body until the connection is dropped.
fn slow(s: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let mut c = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n{");
    c.write_all(req.as_bytes()).unwrap();
    c
}

/// The status line of what the server answered on `c` (waiting at most 60 s).
fn answered(c: &mut TcpStream) -> String {
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Waits (at most 60 s) until one of `held` is answered: its status line. The others are
/// still waiting (each request here waits for a body or a decision that does not come).
fn first_answer(held: &[TcpStream]) -> String {
    for c in held {
        c.set_nonblocking(true).unwrap();
    }
    for _ in 0..600 {
        for mut c in held {
            let mut buf = [0u8; 256];
            if let Ok(n) = c.read(&mut buf) {
                if n > 0 {
                    return String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    String::new()
}

/// Waits (at most 60 s) until `probe` answers `status`; the last answer's code.
fn until(status: u16, mut probe: impl FnMut() -> reqwest::blocking::Response) -> (u16, Value) {
    let mut last = (0, Value::Null);
    for _ in 0..600 {
        let r = probe();
        let st = r.status().as_u16();
        let body: Value = r.json().unwrap_or(Value::Null);
        if st == status {
            return (st, body);
        }
        last = (st, body);
        std::thread::sleep(Duration::from_millis(100));
    }
    last
}

fn e2b_server(extra: &[&str]) -> Server {
    Server::start_with(extra, |dir| {
        let p = dir.join("config.toml");
        let mut c = std::fs::read_to_string(&p).unwrap();
        c.push_str("\n[e2b]\nenabled = true\n[e2b.templates.base]\ntier = \"process\"\n");
        std::fs::write(p, c).unwrap();
    })
}

#[test]
fn clients_without_a_credential_cannot_take_the_places_with_slow_bodies() {
    let s = e2b_server(&["--max-concurrent", "4"]);
    let key = s.key("acme", "read");
    let admin = s.key("ops", "admin");
    // Far more slow bodies than there are places: to the sign-in (its key is in the body)
    // and to E2B's create, with no credential and with a wrong one.
    let mut held = Vec::new();
    for _ in 0..12 {
        held.push(slow(&s, "POST", "/dashboard/signin", &[]));
    }
    let fake = format!("sbxk_{}_{}", "0".repeat(16), "1".repeat(64));
    let mut e2b = Vec::new();
    for i in 0..12 {
        let h: &[(&str, &str)] = if i % 2 == 0 {
            &[]
        } else {
            &[("X-API-Key", fake.as_str())]
        };
        e2b.push(slow(&s, "POST", "/sandboxes", h));
    }
    // E2B's create checks the key from the headers and answers without the body.
    for c in &mut e2b {
        let line = answered(c);
        assert!(
            line.contains(" 401"),
            "E2B create without a valid key: {line:?}"
        );
    }
    // Sign-ins past the small pool of their own (8) are turned away at once; the others
    // wait for their bodies.
    for c in &held {
        c.set_nonblocking(true).unwrap();
    }
    let mut refused = 0;
    for _ in 0..600 {
        for c in held.iter_mut() {
            let mut buf = [0u8; 256];
            if let Ok(n) = c.read(&mut buf) {
                if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 503") {
                    refused += 1;
                }
            }
        }
        if refused >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(refused >= 1, "sign-ins past the pool must be refused");
    // Tenants and the operator are served all along.
    for _ in 0..3 {
        let r = s.get(&key, "/v1/sandboxes");
        assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    }
    let r = s.post(&admin, "/v1/kill", &json!({"reason": "drill"}));
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    assert_eq!(s.delete(&admin, "/v1/kill").status(), 200);
    // And so is a dashboard sign-in that sends its key in the header, as the page does:
    // the pool the slow bodies fill is only for keys sent in a body.
    let r = s.post(&key, "/dashboard/signin", &json!({}));
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    drop(held);
}

#[test]
fn a_body_without_a_credential_must_come_at_once() {
    let s = Server::start(&[]);
    // A sign-in whose body never completes is answered 408 once its time is up.
    let mut c = slow(&s, "POST", "/dashboard/signin", &[]);
    let line = answered(&mut c);
    assert!(line.contains(" 408"), "{line:?}");
    // And recorded, like the server's other busy refusals.
    let path = s.state().join("audit.jsonl");
    let mut found = false;
    for _ in 0..200 {
        let trail = std::fs::read_to_string(&path).unwrap_or_default();
        if trail
            .lines()
            .any(|l| l.contains("\"http.busy\"") && l.contains("SBX_E1819"))
        {
            found = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(found, "no record of the refused sign-in body");
}

#[test]
fn one_tenant_holds_at_most_its_share_and_the_kill_switch_keeps_a_place() {
    let s = Server::start(&["--max-concurrent", "8"]);
    let a = s.key("ta", "exec,files,read");
    let a_read = s.key("ta", "read");
    let b = s.key("tb", "exec,files,read");
    let c = s.key("tc", "read");
    let admin = s.key("ops", "admin");
    let sa = s.sandbox(&a);
    let sb = s.sandbox(&b);
    let upload = |key: &str, id: &str, i: usize| {
        slow(
            &s,
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=up{i}"),
            &[("Authorization", &format!("Bearer {key}"))],
        )
    };
    // Tenant A's slow uploads: it gets half of the places (4), no more. One of five is
    // refused; the other four hold their places.
    let mut held: Vec<TcpStream> = (0..5).map(|i| upload(&a, &sa, i)).collect();
    let line = first_answer(&held);
    assert!(line.contains(" 429"), "{line:?}");
    let (st, p) = problem(s.get(&a, "/v1/sandboxes"));
    assert_eq!((st, p["code"].as_str()), (429, Some("SBX_E1818")), "{p}");
    let r = s.get(&a_read, "/v1/sandboxes");
    assert_eq!(
        r.status(),
        429,
        "a read-only key of the same tenant shares its share"
    );
    assert_eq!(r.headers()["retry-after"], "1");
    // Another tenant is still served, and takes the other half.
    assert_eq!(s.get(&b, "/v1/sandboxes").status(), 200);
    let more: Vec<TcpStream> = (0..5).map(|i| upload(&b, &sb, i)).collect();
    let line = first_answer(&more);
    assert!(line.contains(" 503"), "{line:?}");
    held.extend(more);
    let (st, p) = problem(s.get(&c, "/v1/sandboxes"));
    assert_eq!((st, p["code"].as_str()), (503, Some("SBX_E1808")), "{p}");
    // Every place is taken: the operator's kill switch still works, both ways.
    let r = s.post(&admin, "/v1/kill", &json!({"reason": "drill"}));
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let r = s.delete(&admin, "/v1/kill");
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    drop(held);
    // Once the uploads are gone, everyone is served again.
    let (st, _) = until(200, || s.get(&c, "/v1/sandboxes"));
    assert_eq!(st, 200);
    // Each refusal left a record, without any key's secret.
    let audit = s.audit();
    for code in ["SBX_E1818", "SBX_E1808"] {
        assert!(
            audit
                .iter()
                .any(|e| e["event"] == "http.busy" && e["error_code"] == code),
            "no http.busy record with {code}"
        );
    }
}

#[test]
fn long_polls_are_bounded_per_tenant() {
    let s = Server::start(&["--max-concurrent", "8"]);
    let a = s.key("ta", "exec,read");
    let a_read = s.key("ta", "read");
    let b = s.key("tb", "read");
    let id = s.sandbox(&a);
    let r = s.post(
        &a,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["touch", "x"]}),
    );
    assert_eq!(r.status(), 202, "{}", r.text().unwrap());
    let approval = r.json::<Value>().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    // One long-poll of A's waits (its bound with 8 places is one): of two, one is
    // refused, and so is the next.
    let path = format!("/v1/approvals/{approval}/wait?timeout=60");
    let polls: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
            c.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {a_read}\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
            c
        })
        .collect();
    let line = first_answer(&polls);
    assert!(line.contains(" 429"), "{line:?}");
    let (st, p) = problem(s.get(&a_read, &path));
    assert_eq!((st, p["code"].as_str()), (429, Some("SBX_E1818")), "{p}");
    assert!(p["detail"].as_str().unwrap().contains("long-polls"), "{p}");
    // Another tenant is not held up by it (404: it cannot see A's approval).
    let (st, _) = problem(s.get(&b, &path));
    assert_eq!(st, 404);
    drop(polls);
}

#[test]
fn refused_credentials_and_quotas_are_recorded_at_a_bounded_rate() {
    let mut s = Server::start(&["--max-sandboxes", "1"]);
    let key = s.key("acme", "exec,read");
    let fake = format!("sbxk_{}_{}", "0123456789abcdef", "5".repeat(64));
    for _ in 0..30 {
        let (st, p) = problem(s.get(&fake, "/v1/sandboxes"));
        assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1802"));
    }
    let r = s.client.get(s.url("/v1/sandboxes")).send().unwrap();
    assert_eq!(r.status(), 401);
    s.sandbox(&key);
    let r = s.post(&key, "/v1/sandboxes", &json!({"tier": "process"}));
    let retry = r.headers().get("retry-after").is_some();
    let (st, p) = problem(r);
    assert_eq!((st, p["code"].as_str().unwrap()), (429, "SBX_E1811"));
    // A quota frees when a sandbox goes, not after a time: no Retry-After.
    assert!(!retry, "the sandbox quota's 429 carries no Retry-After");
    s.terminate();
    let audit = s.audit();
    let unauth: Vec<&Value> = audit
        .iter()
        .filter(|e| e["event"] == "http.unauthenticated")
        .collect();
    // Ten one by one, then one summary standing for the rest (written at shutdown, when
    // the window had not ended).
    let one_by_one = unauth
        .iter()
        .filter(|e| e["labels"]["refusals"].is_null())
        .count();
    assert_eq!(one_by_one, 10, "{unauth:#?}");
    let summed: u64 = unauth
        .iter()
        .filter_map(|e| e["labels"]["refusals"].as_str())
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(summed, 21, "{unauth:#?}");
    assert!(unauth.iter().all(|e| e["tenant_id"].is_null()));
    assert!(audit.iter().any(|e| e["event"] == "http.quota"
        && e["error_code"] == "SBX_E1811"
        && e["tenant_id"] == "acme"));
    // The presented secret is nowhere in the trail.
    let trail = std::fs::read_to_string(s.state().join("audit.jsonl")).unwrap();
    assert!(!trail.contains(&"5".repeat(64)));
}
