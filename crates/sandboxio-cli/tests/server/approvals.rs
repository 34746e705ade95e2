//! An `ask` over HTTP: 202 with the approval id, decided over the API, then it runs (or not).

use serde_json::{json, Value};

use crate::harness::{problem, Server};

fn ask(s: &Server, key: &str, id: &str) -> String {
    let r = s.post(
        key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["touch", "flag"], "rationale": "mark the run as done"}),
    );
    assert_eq!(r.status(), 202);
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "SBX_E1821");
    assert_eq!(v["layer"], "approval");
    let apr = v["approval_id"].as_str().unwrap().to_string();
    assert_eq!(
        v["wait"].as_str().unwrap(),
        format!("/v1/approvals/{apr}/outcome?timeout=60")
    );
    apr
}

#[test]
fn an_ask_is_approved_over_the_api_and_then_runs() {
    let s = Server::start(&[]);
    let agent = s.key("acme", "exec,read,files");
    let person = s.key("acme", "approve");
    let other = s.key("globex", "all");
    let id = s.sandbox(&agent);
    let apr = ask(&s, &agent, &id);

    // Pending, visible to the tenant only; the agent cannot approve its own ask.
    let r = s.get(&agent, &format!("/v1/approvals/{apr}/outcome?timeout=0"));
    assert_eq!(r.status(), 202);
    let list: Value = s.get(&person, "/v1/approvals").json().unwrap();
    let a = &list["approvals"][0];
    assert_eq!(a["id"], apr.as_str());
    assert_eq!(a["rationale"], "mark the run as done");
    assert_eq!(s.get(&other, &format!("/v1/approvals/{apr}")).status(), 404);
    assert_eq!(
        s.post(&other, &format!("/v1/approvals/{apr}/approve"), &json!({}))
            .status(),
        404
    );
    let (st, p) = problem(s.post(&agent, &format!("/v1/approvals/{apr}/approve"), &json!({})));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"));

    let r = s.post(
        &person,
        &format!("/v1/approvals/{apr}/approve"),
        &json!({"reason": "fine"}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().unwrap()["state"], "approved");

    let r = s.get(&agent, &format!("/v1/approvals/{apr}/outcome?timeout=30"));
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v["record"]["approval_id"], apr.as_str());
    assert_eq!(v["record"]["exit_code"], 0);
    assert!(
        v["record"]["approver"]
            .as_str()
            .unwrap()
            .starts_with("api key "),
        "the approver is named, not redacted: {v}"
    );
    assert_eq!(v["record"]["status"], "ok", "the approved command ran: {v}");
    assert!(
        !v["result"]["exit"].is_null(),
        "the sandbox reported an exit: {v}"
    );
    // A second decision conflicts.
    let (st, p) = problem(s.post(&person, &format!("/v1/approvals/{apr}/deny"), &json!({})));
    assert_eq!((st, p["code"].as_str().unwrap()), (409, "SBX_E1508"));
    // The decision is an operator action with its own record: the approval, who decided,
    // the tenant it belonged to; the refused second decision has one too.
    let decisions: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|e| e["event"] == "admin" && e["approval_id"] == apr.as_str())
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["tool_name"], "approve");
    assert_eq!(decisions[0]["status"], "ok");
    assert_eq!(decisions[0]["tenant_id"], "acme");
    assert!(decisions[0]["approver"]
        .as_str()
        .unwrap()
        .starts_with("api key "));
    assert_eq!(decisions[1]["tool_name"], "deny");
    assert_eq!(decisions[1]["status"], "error");
}

#[test]
fn a_denied_ask_does_not_run_and_says_why() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let apr = ask(&s, &key, &id);
    let w: Value = s
        .get(&key, &format!("/v1/approvals/{apr}/wait?timeout=0"))
        .json()
        .unwrap();
    assert_eq!(w["state"], "pending");
    let r = s.post(
        &key,
        &format!("/v1/approvals/{apr}/deny"),
        &json!({"reason": "not today"}),
    );
    assert_eq!(r.status(), 200);
    let w: Value = s
        .get(&key, &format!("/v1/approvals/{apr}/wait?timeout=5"))
        .json()
        .unwrap();
    assert_eq!(w["state"], "denied");
    let (st, p) = problem(s.get(&key, &format!("/v1/approvals/{apr}/outcome?timeout=30")));
    assert_eq!(st, 403);
    assert_eq!(p["code"], "SBX_E1554");
    assert_eq!(p["layer"], "approval");
    assert!(p["detail"].as_str().unwrap().contains("not today"), "{p}");
    assert!(
        p["record"]["exit_code"].is_null(),
        "the denied command did not run: {p}"
    );
}

/// An ask whose sandbox is paused or deleted while it waits: the wait ends at once, the
/// approval is withdrawn (no person is shown a request that will not run), and the
/// outcome says so with its own code. The approval used to stay pending (holding its
/// budget reservation) until someone answered it or it timed out.
#[test]
fn an_ask_whose_sandbox_goes_away_is_withdrawn() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    for how in ["pause", "delete"] {
        let id = s.sandbox(&key);
        let apr = ask(&s, &key, &id);
        let r = if how == "pause" {
            s.post(&key, &format!("/v1/sandboxes/{id}/pause"), &json!({}))
        } else {
            s.delete(&key, &format!("/v1/sandboxes/{id}"))
        };
        assert!(r.status().is_success(), "{how}: {}", r.status());
        let w: Value = s
            .get(&key, &format!("/v1/approvals/{apr}/wait?timeout=10"))
            .json()
            .unwrap();
        assert_ne!(w["state"], "pending", "{how}: still pending: {w}");
        let (_, p) = problem(s.get(&key, &format!("/v1/approvals/{apr}/outcome?timeout=30")));
        assert_eq!(p["code"], "SBX_E1557", "{how}: {p}");
        assert_eq!(p["record"]["status"], "cancelled", "{how}: {p}");
        // Approving it now does not run anything.
        let r = s.post(&key, &format!("/v1/approvals/{apr}/approve"), &json!({}));
        assert!(
            !r.status().is_success(),
            "{how}: a withdrawn approval was approved"
        );
    }
}

/// An approval and its outcome are seen by the tenant's keys that may read them or could
/// have asked (an exec key for a command), and by a capability token of the sandbox that
/// asked; not by a metrics key, nor by a token of another sandbox; a token's audit query
/// holds its sandbox's events only, and it has no view of the tenant's costs.
#[test]
fn an_approval_is_seen_only_by_who_may_read_it_or_asked_for_it() {
    let s = Server::start(&[]);
    let owner = s.key("acme", "all");
    let agent = s.key("acme", "exec");
    let scraper = s.key("acme", "metrics");
    let person = s.key("acme", "approve");
    let a = s.sandbox(&owner);
    let b = s.sandbox(&owner);
    let mint = |id: &str, scopes: Value| -> String {
        let r = s.post(
            &owner,
            &format!("/v1/sandboxes/{id}/tokens"),
            &json!({"scopes": scopes, "ttl": "10m"}),
        );
        assert_eq!(r.status(), 201);
        r.json::<Value>().unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let read_a = mint(&a, json!(["read"]));
    let read_b = mint(&b, json!(["read"]));
    let files_b = mint(&b, json!(["files"]));
    let apr = ask(&s, &agent, &a);
    assert_eq!(
        s.post(&person, &format!("/v1/approvals/{apr}/approve"), &json!({}))
            .status(),
        200
    );
    let outcome = format!("/v1/approvals/{apr}/outcome?timeout=30");
    assert_eq!(
        s.get(&agent, &outcome).status(),
        200,
        "the asker waits for it"
    );
    assert_eq!(s.get(&read_a, &outcome).status(), 200);
    let (st, p) = problem(s.get(&scraper, &outcome));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"));
    for other in [&read_b, &files_b] {
        let (st, p) = problem(s.get(other, &outcome));
        assert_eq!((st, p["code"].as_str().unwrap()), (404, "SBX_E1804"));
    }
    let (st, _) = problem(s.get(&read_b, &format!("/v1/approvals/{apr}")));
    assert_eq!(st, 404);
    let listed = |k: &str| -> usize {
        s.get(k, "/v1/approvals?state=all").json::<Value>().unwrap()["approvals"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!((listed(&read_a), listed(&read_b)), (1, 0));
    // The audit: a token of `b` sees nothing of `a`.
    let events: Value = s.get(&read_b, "/v1/audit?limit=1000").json().unwrap();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["session_id"] == b.as_str()),
        "{events}"
    );
    let all: Value = s.get(&owner, "/v1/audit?limit=1000").json().unwrap();
    assert!(all["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["session_id"] == a.as_str()));
    let (st, p) = problem(s.get(&read_a, "/v1/costs"));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1817"));
    // A token of the same sandbox confined to one directory sees none of its commands.
    let r = s.post(
        &owner,
        &format!("/v1/sandboxes/{a}/tokens"),
        &json!({"scopes": ["read", "files"], "dir": "pub", "ttl": "10m"}),
    );
    assert_eq!(r.status(), 201);
    let dir_a = r.json::<Value>().unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(listed(&dir_a), 0);
    let (st, _) = problem(s.get(&dir_a, &outcome));
    assert_eq!(st, 404);
    let (st, p) = problem(s.get(&dir_a, "/v1/audit"));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1817"));
}
