//! Resource subscriptions through the proxy and pins of prompts and resources, against
//! the test upstream (`examples/mcp_upstream.rs`, an rmcp server run over stdio in the
//! process tier) and an `rmcp` client that receives the updates: each subscribe and
//! unsubscribe is one `tool_call` operation decided by policy and recorded; a changed
//! prompt or resource is refused (`SBX_E1911`, one record) until `sandboxio mcp trust`.

#![allow(deprecated)] // resources/subscribe is part of the 2025-11-25 revision spoken here

use std::time::{Duration, Instant};

use rmcp::model::{
    GetPromptRequestParams, ReadResourceRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::RunningService;
use rmcp::RoleClient;
use sandboxio_mcp::McpOptions;

use super::harness::{call, refused, Env, TestClient, User};
use super::proxy::{stdio_upstream, tool_records, POLICY, WAIT};

const OFFERS_POLICY: &str = r#"
[[rule]]
id = "upstream-offers"
effect = "allow"
kind = "tool_call"
tool = ["up__resources/read", "up__resources/subscribe", "up__resources/unsubscribe", "up__prompts/get"]
reason = "the test upstream's resources and prompts"

[[rule]]
id = "no-other-subscriptions"
effect = "deny"
kind = "tool_call"
tool = "up__resources/subscribe"
args = [{ pointer = "/uri", equals = "mem://other" }]
reason = "only the note may be watched"
"#;

const NOTE: &str = "sandboxio://up/mem%3A%2F%2Fnote";

fn env() -> Env {
    Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!("{POLICY}\n{OFFERS_POLICY}"),
    )
}

async fn note(client: &RunningService<RoleClient, TestClient>, text: &str) -> String {
    let r = client
        .call_tool(call("up__note", serde_json::json!({ "text": text })))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    serde_json::to_string(&r.content).unwrap()
}

async fn read_note(client: &RunningService<RoleClient, TestClient>) -> String {
    let r = client
        .read_resource(ReadResourceRequestParams::new(NOTE))
        .await
        .unwrap();
    serde_json::to_string(&r.contents).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_client_receives_the_upstreams_updates_and_each_subscribe_is_decided_and_recorded(
) {
    let env = env();
    let tc = TestClient::new(User::Absent);
    let updated = tc.updated.clone();
    let client = env.connect(tc).await;
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(
        caps.resources.as_ref().and_then(|r| r.subscribe),
        Some(true),
        "{caps:?}"
    );
    let listed = client.list_all_resources().await.unwrap();
    assert!(listed.iter().any(|r| r.uri == NOTE), "{listed:?}");

    client
        .subscribe(SubscribeRequestParams::new(NOTE))
        .await
        .unwrap();
    // The upstream changes the note and says so; the proxy passes it to this client.
    let told = note(&client, "second draft").await;
    assert!(told.contains("1 subscriber(s) told"), "{told}");
    let t0 = Instant::now();
    while updated.lock().unwrap().is_empty() {
        assert!(
            t0.elapsed() < WAIT,
            "no notifications/resources/updated reached the client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(updated.lock().unwrap().clone(), vec![NOTE.to_string()]);
    assert!(read_note(&client).await.contains("second draft"));

    // A subscription policy denies: refused with the denial, never reaches the upstream.
    let other = "sandboxio://up/mem%3A%2F%2Fother";
    let (code, sbx) = refused(
        client
            .subscribe(SubscribeRequestParams::new(other))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32001);
    assert!(sbx.starts_with("SBX_E"), "{sbx}");

    // Unsubscribed (the last subscriber): the upstream is told and stops sending.
    client
        .unsubscribe(UnsubscribeRequestParams::new(NOTE))
        .await
        .unwrap();
    let told = note(&client, "third draft").await;
    assert!(told.contains("0 subscriber(s) told"), "{told}");

    let subs = tool_records(&env, "up__resources/subscribe");
    assert_eq!(subs.len(), 2, "{subs:?}");
    assert_eq!(subs[0]["decision"], "allow");
    assert_eq!(subs[0]["arguments"]["uri"], "mem://note");
    assert_eq!(subs[1]["decision"], "deny");
    assert_eq!(subs[1]["arguments"]["uri"], "mem://other");
    let unsubs = tool_records(&env, "up__resources/unsubscribe");
    assert_eq!(unsubs.len(), 1, "{unsubs:?}");
    assert_eq!(unsubs[0]["decision"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_prompt_or_resource_is_refused_until_trusted_and_the_trust_is_recorded() {
    let env = env();
    let opts = McpOptions::from_runtime(&env.runtime).unwrap();
    let client = env.connect_with(opts, TestClient::new(User::Absent)).await;
    let greet = || {
        let mut p = GetPromptRequestParams::new("up__greet");
        p.arguments = Some(
            serde_json::json!({"name": "Ada"})
                .as_object()
                .unwrap()
                .clone(),
        );
        p
    };
    // First sight: pinned and trusted.
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "up__greet"), "{prompts:?}");
    client.list_all_resources().await.unwrap();
    client.get_prompt(greet()).await.unwrap();
    read_note(&client).await;

    // The upstream swaps both descriptions.
    client
        .call_tool(call("up__mutate", serde_json::json!({})))
        .await
        .unwrap();
    let prompts = client.list_all_prompts().await.unwrap();
    let p = prompts.iter().find(|p| p.name == "up__greet").unwrap();
    let desc = p.description.as_deref().unwrap_or_default();
    assert!(
        desc.starts_with(sandboxio_mcp::proxy::offer_pins::CHANGED_OFFER_MARK),
        "{desc}"
    );
    let resources = client.list_all_resources().await.unwrap();
    let r = resources.iter().find(|r| r.uri == NOTE).unwrap();
    assert!(r
        .description
        .as_deref()
        .unwrap_or_default()
        .starts_with(sandboxio_mcp::proxy::offer_pins::CHANGED_OFFER_MARK));

    // The rug pull: refused with SBX_E1911, each with one record.
    let (code, sbx) = refused(client.get_prompt(greet()).await.unwrap_err());
    assert_eq!((code, sbx.as_str()), (-32001, "SBX_E1911"));
    let (code, sbx) = refused(
        client
            .read_resource(ReadResourceRequestParams::new(NOTE))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, sbx.as_str()), (-32001, "SBX_E1911"));
    let (_, sbx) = refused(
        client
            .subscribe(SubscribeRequestParams::new(NOTE))
            .await
            .unwrap_err(),
    );
    assert_eq!(sbx, "SBX_E1911");

    // A person approves them (`sandboxio mcp trust`), recorded; then they are served.
    for pin in ["prompt:up__greet", &format!("resource:{NOTE}")] {
        let before = sandboxio_mcp::proxy::trust(&env.runtime, pin, "tester", None)
            .await
            .unwrap();
        assert!(before.changed(), "{pin}");
    }
    client.get_prompt(greet()).await.unwrap();
    read_note(&client).await;

    let gets = tool_records(&env, "up__prompts/get");
    let codes: Vec<_> = gets.iter().map(|r| r["error_code"].clone()).collect();
    assert_eq!(gets.len(), 3, "{gets:?}");
    assert_eq!(codes[1], "SBX_E1911", "{gets:?}");
    assert_eq!(gets[2]["decision"], "allow");
    let reads = tool_records(&env, "up__resources/read");
    assert_eq!(reads.len(), 3, "{reads:?}");
    assert_eq!(reads[1]["error_code"], "SBX_E1911", "{reads:?}");
    let trusts: Vec<_> = env
        .events()
        .into_iter()
        .filter(|e| e["event"] == "mcp.trust")
        .collect();
    assert_eq!(trusts.len(), 2, "{trusts:?}");
    assert!(trusts
        .iter()
        .all(|t| t["approver"] == "tester" && t["tool_name"] != ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_survives_a_restart_of_the_upstream() {
    let env = env();
    let tc = TestClient::new(User::Absent);
    let updated = tc.updated.clone();
    let client = env.connect(tc).await;
    client.list_all_resources().await.unwrap();
    client
        .subscribe(SubscribeRequestParams::new(NOTE))
        .await
        .unwrap();
    let pid = |c: &RunningService<RoleClient, TestClient>| {
        let c = c.peer().clone();
        async move {
            let r = c
                .call_tool(call("up__pid", serde_json::json!({})))
                .await
                .ok()?;
            r.content
                .first()?
                .as_text()?
                .text
                .trim()
                .parse::<i32>()
                .ok()
        }
    };
    let first = pid(&client).await.unwrap();
    // The upstream's own process (the process tier shares the host's pid namespace).
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Calls fail until the proxy has seen it die; the next one starts it again.
    let t0 = Instant::now();
    loop {
        match pid(&client).await {
            Some(p) if p != first => break,
            _ => {
                assert!(t0.elapsed() < WAIT, "the upstream was not restarted");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // The new process was subscribed again before it was used: the update reaches us.
    let told = note(&client, "after the restart").await;
    assert!(told.contains("1 subscriber(s) told"), "{told}");
    let t0 = Instant::now();
    while updated.lock().unwrap().is_empty() {
        assert!(t0.elapsed() < WAIT, "no update after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One subscribe operation in all: the proxy's renewal is not a new decision.
    assert_eq!(tool_records(&env, "up__resources/subscribe").len(), 1);
}
