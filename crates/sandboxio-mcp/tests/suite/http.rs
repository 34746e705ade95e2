//! MCP over streamable HTTP (`/mcp` in `sandboxio serve`): who may approve an ask through
//! elicitation, sessions bound to the key that opened them, quotas.

use std::time::Duration;

use sandboxio_gateway::credential::Scope;

use super::harness::{call, structured, Env, TestClient, User};

fn approvals(env: &Env) -> Vec<serde_json::Value> {
    env.events()
        .into_iter()
        .filter(|e| e["tool_name"] == "approve")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_the_approve_scope_cannot_approve_its_own_ask_through_elicitation() {
    let env = Env::new(Duration::from_millis(1500));
    let server = env.serve_http(|_| {}).await;
    let key = env.key("acme", &[Scope::Exec, Scope::RunCode, Scope::Files]);
    let c = TestClient::new(User::Approves);
    let asked = c.elicitations.clone();
    let client = env.connect_http(&server, &key, c).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    let d = structured(&r);
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(d["code"], "SBX_E1555", "{d}");
    assert!(d["approval_id"].as_str().is_some(), "{d}");
    assert!(asked.lock().unwrap().is_empty(), "the client was asked");
    assert!(approvals(&env).is_empty(), "{:?}", approvals(&env));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_the_approve_scope_approves_through_elicitation_and_is_named() {
    let env = Env::new(Duration::from_secs(30));
    let server = env.serve_http(|_| {}).await;
    let key = env.key("acme", &[Scope::Exec, Scope::Approve]);
    let id = key.split('_').nth(1).unwrap().to_string();
    let c = TestClient::new(User::Approves);
    let asked = c.elicitations.clone();
    let client = env.connect_http(&server, &key, c).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(asked.lock().unwrap().len(), 1);
    let a = approvals(&env);
    assert_eq!(a.len(), 1, "{a:?}");
    let who = a[0]["agent_id"].as_str().unwrap_or_default();
    assert!(
        who.contains(&format!("api key {id}")) && who.contains("elicitation"),
        "{}",
        a[0]
    );
    client.cancel().await.unwrap();
}

/// A raw `/mcp` request with the key `token` (and the session `session`, if any).
async fn post(
    url: &str,
    token: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(s) = session {
        r = r
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    r.send().await.unwrap()
}

/// Opens a session with the key `token`: its id.
async fn open_session(url: &str, token: &str) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "raw", "version": "1"}}});
    let r = post(url, token, None, init).await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let _ = r.text().await;
    let done = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(url, token, Some(&id), done).await.status(), 202);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_only_the_key_that_opened_it() {
    let env = Env::new(Duration::from_secs(30));
    let server = env.serve_http(|_| {}).await;
    let acme = env.key("acme", &[Scope::Exec, Scope::Files]);
    let acme2 = env.key("acme", &[Scope::Exec, Scope::Files]);
    let evil = env.key("evil", &[Scope::Exec, Scope::Files]);
    let url = server.mcp();
    let id = open_session(&url, &acme).await;
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let create = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "create_sandbox", "arguments": {}}});
    for other in [&evil, &acme2] {
        // Another tenant's key, or another key of the same tenant: no such session.
        for body in [&list, &create] {
            let r = post(&url, other, Some(&id), body.clone()).await;
            assert_eq!(r.status(), 404, "{:?}", r.text().await);
        }
        let r = reqwest::Client::new()
            .get(&url)
            .header("authorization", format!("Bearer {other}"))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &id)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        let r = reqwest::Client::new()
            .delete(&url)
            .header("authorization", format!("Bearer {other}"))
            .header("mcp-session-id", &id)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }
    // The owner still has it, whole.
    let r = post(&url, &acme, Some(&id), list).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("create_sandbox"));
    assert!(!env
        .events()
        .iter()
        .any(|e| e["event"] == "mcp.sandbox_create"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sandboxes_count_against_the_tenants_quota_across_sessions() {
    let env = Env::new(Duration::from_secs(30));
    let server = env.serve_http(|o| o.max_sandboxes_per_tenant = 2).await;
    let key = env.key("acme", &[Scope::Exec, Scope::Files]);
    let other = env.key("other", &[Scope::Exec, Scope::Files]);
    let a = env
        .connect_http(&server, &key, TestClient::new(User::Absent))
        .await;
    let b = env
        .connect_http(&server, &key, TestClient::new(User::Absent))
        .await;
    let create = || call("create_sandbox", serde_json::json!({}));
    let first = a.call_tool(create()).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let r = a.call_tool(create()).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    for s in [&a, &b] {
        let r = s.call_tool(create()).await.unwrap();
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert_eq!(structured(&r)["code"], "SBX_E1811", "{r:?}");
    }
    // The HTTP API's creates count the MCP sessions' sandboxes too.
    let http_create = |token: &str| {
        reqwest::Client::new()
            .post(format!("{}/v1/sandboxes", server.base))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    let r = http_create(&key).await.unwrap();
    assert_eq!(r.status(), 429, "{:?}", r.text().await);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["code"], "SBX_E1811", "{p}");
    // Another tenant has a quota of its own.
    let c = env
        .connect_http(&server, &other, TestClient::new(User::Absent))
        .await;
    let r = c.call_tool(create()).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    // A place given back.
    let id = structured(&first)["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = a
        .call_tool(call("close_sandbox", serde_json::json!({"sandbox_id": id})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    // The place given back is taken over HTTP; then MCP is refused again.
    let r = http_create(&key).await.unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let r = b.call_tool(create()).await.unwrap();
    assert_eq!(structured(&r)["code"], "SBX_E1811", "{r:?}");
    for s in [a, b, c] {
        s.cancel().await.unwrap();
    }
}

/// Creates over MCP and over `/v1` at once, many of each, against a quota of 3: the two
/// front ends check and take places under one lock, so together they never pass it (each
/// checked under its own lock before, and both could take the last place), and they never
/// wait on each other for good (the two locks taken in both orders would deadlock).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_over_mcp_and_http_at_once_never_pass_the_quota() {
    let env = Env::new(Duration::from_secs(30));
    let server = env.serve_http(|o| o.max_sandboxes_per_tenant = 3).await;
    let key = env.key("acme", &[Scope::Exec, Scope::Files]);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(std::sync::Arc::new(
            env.connect_http(&server, &key, TestClient::new(User::Absent))
                .await,
        ));
    }
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (base, key) = (server.base.clone(), key.clone());
        let c = clients[i % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let r = c
                    .call_tool(call("create_sandbox", serde_json::json!({})))
                    .await
                    .unwrap();
                r.is_error != Some(true)
            } else {
                let r = reqwest::Client::new()
                    .post(format!("{base}/v1/sandboxes"))
                    .header("authorization", format!("Bearer {key}"))
                    .header("content-type", "application/json")
                    .body("{}")
                    .send()
                    .await
                    .unwrap();
                r.status() == 201
            }
        }));
    }
    let mut made = 0;
    for t in tasks {
        if tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a create never returned")
            .unwrap()
        {
            made += 1;
        }
    }
    assert_eq!(made, 3, "the quota is 3, across both front ends");
    for c in clients {
        if let Ok(c) = std::sync::Arc::try_unwrap(c) {
            c.cancel().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_per_tenant_and_a_closed_one_gives_its_place_back() {
    let env = Env::new(Duration::from_secs(30));
    let server = env
        .serve_http_with(|_| {}, |m| m.max_sessions_per_tenant = 3)
        .await;
    let url = server.mcp();
    let acme = env.key("acme", &[Scope::Exec]);
    let other = env.key("other", &[Scope::Exec]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(open_session(&url, &acme).await);
    }
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
    let r = post(&url, &acme, None, init.clone()).await;
    assert_eq!(r.status(), 429);
    assert!(r.text().await.unwrap().contains("SBX_E1918"));
    // Another tenant is not held back.
    open_session(&url, &other).await;
    // Closing one gives its place back.
    let r = reqwest::Client::new()
        .delete(&url)
        .header("authorization", format!("Bearer {acme}"))
        .header("mcp-session-id", &ids[0])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let mut status = 0;
    for _ in 0..40 {
        status = post(&url, &acme, None, init.clone())
            .await
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200);
}
