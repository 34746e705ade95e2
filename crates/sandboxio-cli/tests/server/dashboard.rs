//! The dashboard's security, against the real server: nothing without a session, the
//! session cookie's attributes, CSRF refused (and recorded), a read-only key's buttons
//! refused (and recorded), the kill switch's button through the gateway.

use reqwest::blocking::Response;
use serde_json::{json, Value};

use crate::harness::{problem, Server};

/// A browser signed in with `key`: its cookie and CSRF token.
pub struct Browser {
    pub cookie: String,
    pub csrf: String,
}

pub fn sign_in(s: &Server, key: &str) -> Browser {
    let r = s
        .client
        .post(s.url("/dashboard/signin"))
        .json(&json!({ "key": key }))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let set = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "cookie without {attr}: {set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    let v: Value = r.json().unwrap();
    Browser {
        cookie,
        csrf: v["csrf"].as_str().unwrap().to_string(),
    }
}

impl Browser {
    pub fn get(&self, s: &Server, path: &str) -> Response {
        s.client
            .get(s.url(path))
            .header("cookie", &self.cookie)
            .send()
            .unwrap()
    }
    /// A state-changing request; `csrf` is the token sent (if any).
    pub fn send(
        &self,
        s: &Server,
        method: reqwest::Method,
        path: &str,
        csrf: Option<&str>,
        body: &Value,
    ) -> Response {
        let mut b = s
            .client
            .request(method, s.url(path))
            .header("cookie", &self.cookie)
            .json(body);
        if let Some(t) = csrf {
            b = b.header("x-csrf-token", t);
        }
        b.send().unwrap()
    }
}

fn kill_engaged(s: &Server, key: &str) -> bool {
    let v: Value = s.get(key, "/v1/kill").json().unwrap();
    v["engaged"].as_bool().unwrap()
}

fn events_named(s: &Server, event: &str) -> Vec<Value> {
    s.audit()
        .into_iter()
        .filter(|e| e["event"] == event)
        .collect()
}

#[test]
fn no_page_data_or_action_without_a_session() {
    let s = Server::start(&[]);
    let admin = s.key("acme", "all");
    // The page is the sign-in form, with no token and no data.
    let page = s.client.get(s.url("/")).send().unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let html = page.text().unwrap();
    assert!(html.contains("id=\"signin\""), "{html}");
    assert!(!html.contains("csrf-token"), "{html}");
    // Data and actions answer 401, even to a bearer key (the dashboard takes sessions).
    for path in ["/dashboard/api/snapshot", "/dashboard/api/events"] {
        let (st, p) = problem(s.client.get(s.url(path)).send().unwrap());
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (401, "SBX_E1840"),
            "{path}"
        );
        let (st, _) = problem(s.get(&admin, path));
        assert_eq!(st, 401, "{path} with a bearer key");
    }
    let forged = "sbx_dashboard=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    for (method, path) in [
        (reqwest::Method::POST, "/dashboard/api/kill"),
        (reqwest::Method::DELETE, "/dashboard/api/kill"),
        (
            reqwest::Method::POST,
            "/dashboard/api/approvals/apr_x/approve",
        ),
        (reqwest::Method::POST, "/dashboard/signout"),
    ] {
        let r = s
            .client
            .request(method.clone(), s.url(path))
            .header("cookie", forged)
            .header("x-csrf-token", "whatever")
            .json(&json!({"reason": "no session"}))
            .send()
            .unwrap();
        let (st, p) = problem(r);
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (401, "SBX_E1840"),
            "{method} {path}"
        );
    }
    assert!(
        !kill_engaged(&s, &admin),
        "nothing was engaged without a session"
    );
    // A wrong key and a capability token cannot sign in.
    let r = s
        .client
        .post(s.url("/dashboard/signin"))
        .json(&json!({"key": "sbxk_nope_nope"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
}

#[test]
fn csrf_is_refused_and_recorded_and_the_kill_button_goes_through_the_gateway() {
    let s = Server::start(&[]);
    let admin = s.key("acme", "all");
    let b = sign_in(&s, &admin);
    // The page now carries this session's token.
    let html = b.get(&s, "/").text().unwrap();
    assert!(html.contains(&format!("content=\"{}\"", b.csrf)), "{html}");
    let body = json!({"reason": "csrf test"});
    for token in [None, Some("0".repeat(64).as_str()), Some("")] {
        let (st, p) = problem(b.send(
            &s,
            reqwest::Method::POST,
            "/dashboard/api/kill",
            token,
            &body,
        ));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (403, "SBX_E1841"),
            "{token:?}"
        );
    }
    assert!(
        !kill_engaged(&s, &admin),
        "a request without the token changed nothing"
    );
    let refused = events_named(&s, "dashboard.csrf");
    assert_eq!(refused.len(), 3, "each refusal is recorded");
    assert_eq!(refused[0]["decision"], "deny");
    // Another session's token does not work either.
    let other = sign_in(&s, &admin);
    let (st, _) = problem(b.send(
        &s,
        reqwest::Method::POST,
        "/dashboard/api/kill",
        Some(&other.csrf),
        &body,
    ));
    assert_eq!(st, 403);

    // With the token: engaged through the gateway's admin operation, with its record.
    let r = b.send(
        &s,
        reqwest::Method::POST,
        "/dashboard/api/kill",
        Some(&b.csrf),
        &json!({"reason": "from the dashboard"}),
    );
    assert_eq!(r.status(), 200);
    assert!(kill_engaged(&s, &admin));
    let snap: Value = b.get(&s, "/dashboard/api/snapshot").json().unwrap();
    assert_eq!(snap["kill"]["engaged"], true);
    assert_eq!(snap["kill"]["reason"], "from the dashboard");
    let r = b.send(
        &s,
        reqwest::Method::DELETE,
        "/dashboard/api/kill",
        Some(&b.csrf),
        &json!({}),
    );
    assert_eq!(r.status(), 200);
    assert!(!kill_engaged(&s, &admin));
    let trail = s.audit();
    let admin_records: Vec<&Value> = trail.iter().filter(|e| e["event"] == "admin").collect();
    assert!(
        admin_records.len() >= 2,
        "kill and resume are admin records: {admin_records:?}"
    );
    assert!(
        admin_records
            .iter()
            .any(|e| e.to_string().contains("from the dashboard")),
        "{admin_records:?}"
    );
    // Signing out ends the session.
    let r = b.send(
        &s,
        reqwest::Method::POST,
        "/dashboard/signout",
        Some(&b.csrf),
        &json!({}),
    );
    assert_eq!(r.status(), 204);
    assert_eq!(b.get(&s, "/dashboard/api/snapshot").status(), 401);
}

#[test]
fn a_read_only_key_sees_the_dashboard_but_its_buttons_are_refused_and_recorded() {
    let s = Server::start(&[]);
    let admin = s.key("acme", "all");
    let agent = s.key("acme", "exec,read,files");
    let reader = s.key("acme", "read");
    // Something to show and something to approve.
    let id = s.sandbox(&agent);
    let r = s.post(
        &agent,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["true"]}),
    );
    assert_eq!(r.status(), 200);
    let r = s.post(
        &agent,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["touch", "f"]}),
    );
    assert_eq!(r.status(), 202);
    let apr = r.json::<Value>().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_string();

    let b = sign_in(&s, &reader);
    let snap: Value = b.get(&s, "/dashboard/api/snapshot").json().unwrap();
    assert_eq!(snap["tenant"], "acme");
    assert_eq!(snap["throughput"]["last_hour"]["success"], 1, "{snap}");
    assert_eq!(snap["approvals"][0]["id"], apr.as_str(), "{snap}");
    assert_eq!(snap["approvals"][0]["kind"], "exec");

    let forbidden_before = events_named(&s, "http.forbidden").len();
    let (st, p) = problem(b.send(
        &s,
        reqwest::Method::POST,
        "/dashboard/api/kill",
        Some(&b.csrf),
        &json!({"reason": "let me"}),
    ));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"));
    let (st, p) = problem(b.send(
        &s,
        reqwest::Method::POST,
        &format!("/dashboard/api/approvals/{apr}/approve"),
        Some(&b.csrf),
        &json!({}),
    ));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"));
    assert!(!kill_engaged(&s, &admin));
    let w: Value = s
        .get(&admin, &format!("/v1/approvals/{apr}"))
        .json()
        .unwrap();
    assert_eq!(
        w["state"], "pending",
        "the refused approval changed nothing"
    );
    let forbidden = events_named(&s, "http.forbidden");
    assert_eq!(
        forbidden.len(),
        forbidden_before + 2,
        "both refusals are recorded"
    );
    let reader_id = reader.split('_').nth(1).unwrap();
    assert!(
        forbidden.last().unwrap().to_string().contains(reader_id),
        "the record names the key: {forbidden:?}"
    );
    // The same denials are listed on the page, with their reasons.
    let snap: Value = b.get(&s, "/dashboard/api/snapshot").json().unwrap();
    assert!(
        snap["denials"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["event"] == "http.forbidden"
                && d["reason"]
                    .as_str()
                    .unwrap()
                    .contains("lacks the `admin` scope")),
        "{}",
        snap["denials"]
    );
}

#[test]
fn revoking_the_key_ends_its_dashboard_sessions() {
    let s = Server::start(&[]);
    let key = s.key("acme", "read");
    let b = sign_in(&s, &key);
    assert_eq!(b.get(&s, "/dashboard/api/snapshot").status(), 200);
    s.revoke(&key);
    let (st, p) = problem(b.get(&s, "/dashboard/api/snapshot"));
    assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1840"));
    let html = b.get(&s, "/").text().unwrap();
    assert!(html.contains("id=\"signin\""), "back to the sign-in page");
}

/// The dashboard shows the tenant's approvals, denials and running work: only a key that
/// may read them (read, approve or admin) signs in; the others are refused and recorded.
#[test]
fn only_a_key_that_may_read_signs_in() {
    let s = Server::start(&[]);
    for scopes in ["metrics", "exec", "files", "run_code"] {
        let key = s.key("acme", scopes);
        let r = s
            .client
            .post(s.url("/dashboard/signin"))
            .json(&json!({ "key": key }))
            .send()
            .unwrap();
        assert!(r.headers().get("set-cookie").is_none(), "{scopes}");
        let (st, p) = problem(r);
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (403, "SBX_E1803"),
            "{scopes}"
        );
    }
    assert_eq!(events_named(&s, "http.forbidden").len(), 4);
    for scopes in ["read", "approve", "admin"] {
        let b = sign_in(&s, &s.key("acme", scopes));
        assert_eq!(
            b.get(&s, "/dashboard/api/snapshot").status(),
            200,
            "{scopes}"
        );
    }
}

/// An open event stream ends once its session is signed out.
#[test]
fn the_event_stream_ends_when_its_session_is_signed_out() {
    use std::io::Read as _;
    let s = Server::start(&[]);
    let b = sign_in(&s, &s.key("acme", "read"));
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let mut stream = client
        .get(s.url("/dashboard/api/events"))
        .header("cookie", &b.cookie)
        .send()
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut first = [0u8; 64];
    let n = stream.read(&mut first).unwrap();
    assert!(
        String::from_utf8_lossy(&first[..n]).contains("snapshot"),
        "{}",
        String::from_utf8_lossy(&first[..n])
    );
    let out = b.send(
        &s,
        reqwest::Method::POST,
        "/dashboard/signout",
        Some(&b.csrf),
        &json!({}),
    );
    assert_eq!(out.status(), 204);
    // The rest of the stream: at most the event in flight, then its end (well before the
    // 60 s client timeout and the server's request timeout).
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let events = String::from_utf8_lossy(&rest)
        .matches("event: snapshot")
        .count();
    assert!(events <= 1, "{events} snapshots after signing out");
}
