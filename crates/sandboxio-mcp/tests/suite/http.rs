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
