//! Attacks of a hostile tester on the proxy, each tried for real against the test upstream
//! (`examples/mcp_upstream.rs`, hostile on purpose: lenient tool names, any prompt name,
//! changes beyond descriptions, endless pages) run over stdio in the process tier, through
//! a real runtime: the refusal is asserted, and where it matters that the upstream was
//! never reached.

#![allow(deprecated)] // resources/subscribe is part of the 2025-11-25 revision spoken here

use rmcp::model::{ReadResourceRequestParams, SubscribeRequestParams};
use rmcp::service::RunningService;
use rmcp::RoleClient;

use super::harness::{call, refused, Env, TestClient, User};
use super::proxy::{stdio_upstream, tool_records, POLICY, WAIT};

const OFFERS_POLICY: &str = r#"
[[rule]]
id = "upstream-offers"
effect = "allow"
kind = "tool_call"
tool = ["up__resources/read", "up__resources/subscribe", "up__resources/unsubscribe", "up__prompts/get"]
reason = "the test upstream's resources and prompts"
"#;

/// The documented deny rule on a resource URI the URI tests attack.
const NO_PRIVATE: &str = r#"
[[rule]]
id = "no-private"
effect = "deny"
kind = "tool_call"
tool = "up__resources/read"
args = [{ pointer = "/uri", glob = "file:///data/private/**" }]
reason = "not the private directory"
"#;

fn env() -> Env {
    Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!("{POLICY}\n{OFFERS_POLICY}"),
    )
}

async fn mutate(client: &RunningService<RoleClient, TestClient>) {
    let r = client
        .call_tool(call("up__mutate", serde_json::json!({})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
}

/// Waits until the proxy has listed the upstream again after `mutate` (its new tool
/// `extra` is listed).
async fn relisted(client: &RunningService<RoleClient, TestClient>) -> Vec<rmcp::model::Tool> {
    let t0 = std::time::Instant::now();
    loop {
        let tools = client.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "up__extra") {
            return tools;
        }
        assert!(t0.elapsed() < WAIT, "the upstream was not listed again");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn read(
    client: &RunningService<RoleClient, TestClient>,
    uri: &str,
) -> Result<String, (i32, String)> {
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(|r| serde_json::to_string(&r.contents).unwrap())
        .map_err(refused)
}

/// A changed resource, refused under its listed URI, is refused under every other
/// spelling of the same namespaced URI (lower-case escapes, raw characters, an escaped
/// unreserved letter), for reads and subscriptions alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_resource_is_refused_under_every_spelling_of_its_uri() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    let listed = client.list_all_resources().await.unwrap();
    let note = listed[0].uri.clone();
    assert_eq!(note, "sandboxio://up/mem%3A%2F%2Fnote");
    read(&client, &note).await.unwrap();
    mutate(&client).await;
    client.list_all_resources().await.unwrap();
    for spelling in [
        note.clone(),
        "sandboxio://up/mem%3a%2f%2fnote".to_string(),
        "sandboxio://up/mem://note".to_string(),
        "sandboxio://up/%6Dem%3A%2F%2Fnot%65".to_string(),
    ] {
        let got = read(&client, &spelling).await;
        assert_eq!(got, Err((-32001, "SBX_E1911".into())), "{spelling}");
        let sub = client
            .subscribe(SubscribeRequestParams::new(spelling.clone()))
            .await
            .map_err(refused);
        assert_eq!(sub, Err((-32001, "SBX_E1911".into())), "{spelling}");
    }
    let reads = tool_records(&env, "up__resources/read");
    assert!(
        reads[1..].iter().all(|r| r["error_code"] == "SBX_E1911"),
        "{reads:?}"
    );
}

/// A changed resource template refuses reads and subscriptions of its expansions until
/// it is trusted; URIs it cannot expand to are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_template_refuses_its_expansions_until_trusted() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    let templates = client.list_all_resource_templates().await.unwrap();
    let t = templates[0].uri_template.clone();
    assert_eq!(t, "sandboxio://up/mem%3A%2F%2Fnotes%2F{name}");
    let zzz = t.replace("{name}", "zzz");
    assert!(read(&client, &zzz).await.unwrap().contains("note zzz"));
    mutate(&client).await;
    let templates = client.list_all_resource_templates().await.unwrap();
    assert!(templates[0]
        .description
        .as_deref()
        .unwrap_or_default()
        .starts_with(sandboxio_mcp::proxy::offer_pins::CHANGED_OFFER_MARK));
    for uri in [
        zzz.clone(),
        "sandboxio://up/mem://notes/other".to_string(),
        t.replace("{name}", "a%2Fb"),
    ] {
        assert_eq!(
            read(&client, &uri).await,
            Err((-32001, "SBX_E1911".into())),
            "{uri}"
        );
    }
    let sub = client
        .subscribe(SubscribeRequestParams::new(zzz.clone()))
        .await
        .map_err(refused);
    assert_eq!(sub, Err((-32001, "SBX_E1911".into())));
    // A person approves the template: its expansions are served again.
    let pin = format!("template:{t}");
    sandboxio_mcp::proxy::trust(&env.runtime, &pin, "tester", None)
        .await
        .unwrap();
    assert!(read(&client, &zzz).await.unwrap().contains("note zzz"));
}

/// A name the upstream did not list (a case or space variant its lenient lookup takes for
/// a listed tool, an invisible character, a NUL) is refused as unknown (-32602,
/// `SBX_E1902`) and never reaches the upstream, so the pin of a changed tool and an
/// exact-name deny rule cannot be dodged. Prompts alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_outside_the_upstreams_listing_are_unknown_and_never_forwarded() {
    let env = Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!(
            "{POLICY}\n{OFFERS_POLICY}\n[[rule]]\nid = \"no-leak\"\neffect = \"deny\"\nkind = \"tool_call\"\ntool = \"up__leak\"\nreason = \"no leaks\"\n"
        ),
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    let denied = client
        .call_tool(call("up__leak", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true), "{denied:?}");
    for name in [
        "up__Leak",
        "up__leak ",
        "up__leak\u{200b}",
        "up__leak\u{0}",
        "up__LEAK\n",
        "up__nonexistent",
    ] {
        let e = client
            .call_tool(call(name, serde_json::json!({})))
            .await
            .map_err(refused);
        assert_eq!(e.err(), Some((-32602, "SBX_E1902".into())), "{name:?}");
    }
    // The rug pull, then the changed tool under a variant name.
    mutate(&client).await;
    relisted(&client).await;
    let r = client
        .call_tool(call("up__echo", serde_json::json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(super::harness::structured(&r)["code"], "SBX_E1911", "{r:?}");
    for name in ["up__echo ", "up__Echo"] {
        let e = client
            .call_tool(call(name, serde_json::json!({"text": "x"})))
            .await
            .map_err(refused);
        assert_eq!(e.err(), Some((-32602, "SBX_E1902".into())), "{name:?}");
    }
    // Nothing but the listed names was recorded (so nothing else was forwarded).
    let calls: Vec<_> = env
        .events()
        .into_iter()
        .filter(|e| e["event"] == "tool_call")
        .map(|e| e["tool_name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        calls
            .iter()
            .all(|n| ["up__leak", "up__mutate", "up__echo"].contains(&n.as_str())),
        "{calls:?}"
    );
    // A prompt name the upstream did not list is unknown too.
    client.list_all_prompts().await.unwrap();
    for name in ["up__greet ", "up__Greet", "up__nope"] {
        let e = client
            .get_prompt(rmcp::model::GetPromptRequestParams::new(name))
            .await
            .map_err(refused);
        assert_eq!(e.err(), Some((-32602, "SBX_E1916".into())), "{name:?}");
    }
    assert!(tool_records(&env, "up__prompts/get").is_empty());
}

/// Pins cover annotations and the output schema; while a change is unapproved the agent
/// is shown the approved definition, never the new text; a tool that appears after the
/// upstream's first listing is withheld and refused until a person approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rug_pulls_beyond_descriptions_and_new_tools_are_refused_and_never_shown() {
    use sandboxio_mcp::proxy::{CHANGED_MARK, NEW_MARK};
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    mutate(&client).await;
    let tools = relisted(&client).await;
    let find = |n: &str| tools.iter().find(|t| t.name == n).unwrap().clone();
    // The description changed: shown as approved, the new text withheld.
    let echo = find("up__echo");
    let d = echo.description.as_deref().unwrap_or_default();
    assert!(d.starts_with(CHANGED_MARK), "{d}");
    assert!(d.ends_with("Echo the text back."), "{d}");
    assert!(!d.contains("id_rsa"), "{d}");
    // Only the annotations changed: marked, the approved annotations shown, refused.
    let read = find("up__read");
    assert!(read
        .description
        .as_deref()
        .unwrap_or_default()
        .starts_with(CHANGED_MARK));
    assert_eq!(
        read.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    // Only an output schema appeared: marked, shown without it.
    let leak = find("up__leak");
    assert!(leak.output_schema.is_none(), "{leak:?}");
    // The new tool: withheld, marked.
    let extra = find("up__extra");
    let d = extra.description.as_deref().unwrap_or_default();
    assert!(d.starts_with(NEW_MARK), "{d}");
    assert!(!d.contains("added later"), "{d}");
    for name in ["up__read", "up__leak", "up__extra"] {
        let r = client
            .call_tool(call(name, serde_json::json!({"path": "/nonexistent"})))
            .await
            .unwrap();
        assert_eq!(
            super::harness::structured(&r)["code"],
            "SBX_E1911",
            "{name}: {r:?}"
        );
    }
    // A person approves the new tool: its definition is shown and it is callable.
    let pin = sandboxio_mcp::proxy::pins::Pins::open(&env.state())
        .unwrap()
        .get("up__extra")
        .unwrap();
    assert!(pin.unapproved());
    sandboxio_mcp::proxy::trust(&env.runtime, "up__extra", "tester", Some(&pin.seen))
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let extra = tools.iter().find(|t| t.name == "up__extra").unwrap();
    assert_eq!(extra.description.as_deref(), Some("A tool added later."));
    let r = client
        .call_tool(call("up__extra", serde_json::json!({})))
        .await
        .unwrap();
    assert_ne!(super::harness::structured(&r)["code"], "SBX_E1911", "{r:?}");
}

/// `trust --digest` approves only the definition the person read: if the upstream swapped
/// it since `mcp pins`, nothing is approved (`SBX_E1921`) and calls stay refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_with_a_stale_digest_approves_nothing() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    let pins = sandboxio_mcp::proxy::pins::Pins::open(&env.state()).unwrap();
    // The person reads the pin while it is one definition...
    let read_by_person = pins.get("up__echo").unwrap().seen;
    // ...the upstream swaps it before the person approves.
    mutate(&client).await;
    let t0 = std::time::Instant::now();
    let changed = || {
        sandboxio_mcp::proxy::pins::Pins::open(&env.state())
            .unwrap()
            .get("up__echo")
            .unwrap()
            .changed()
    };
    while !changed() {
        client.list_all_tools().await.unwrap();
        assert!(t0.elapsed() < WAIT, "the change was never seen");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let e = sandboxio_mcp::proxy::trust(&env.runtime, "up__echo", "tester", Some(&read_by_person))
        .await
        .err()
        .unwrap();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1921", "{e}");
    let r = client
        .call_tool(call("up__echo", serde_json::json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(super::harness::structured(&r)["code"], "SBX_E1911", "{r:?}");
    assert!(env.events().iter().all(|e| e["event"] != "mcp.trust"));
}

/// A deny rule on a resource URI holds for every spelling an upstream would take for the
/// same resource (case of the scheme, `localhost`, `file:/`, escaped letters, dot
/// segments); policy decides on the normal form and the upstream is sent exactly that.
/// A URI that decodes to something ambiguous is refused (`SBX_E1922`) before policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_rules_hold_for_every_equivalent_spelling() {
    let env = Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!(
            "{POLICY}\n{OFFERS_POLICY}\n{NO_PRIVATE}\n{}",
            r#"
[[rule]]
id = "no-private-notes"
effect = "deny"
kind = "tool_call"
tool = "up__resources/read"
args = [{ pointer = "/uri", glob = "mem://notes/private*" }]
reason = "not the private notes"
"#
        ),
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    let wrap = |u: &str| sandboxio_mcp::proxy::uri::wrap("up", u);
    for u in [
        "file:///data/private/k",
        "file://localhost/data/private/k",
        "file:///data/%70rivate/k",
        "FILE:///data/private/k",
        "file:/data/private/k",
        "file:///data/public/../private/k",
        "MEM://notes/%70rivate",
        "mem://notes/x/../private",
    ] {
        let got = read(&client, &wrap(u)).await;
        assert_eq!(got, Err((-32001, "SBX_E1550".into())), "{u}");
    }
    // Policy and upstream agree: the upstream is sent the normal form.
    let got = read(&client, &wrap("MEM://notes/public/../%61"))
        .await
        .unwrap();
    assert!(got.contains("note a"), "{got}");
    let recs = tool_records(&env, "up__resources/read");
    assert_eq!(recs.last().unwrap()["arguments"]["uri"], "mem://notes/a");
    assert!(recs[..recs.len() - 1]
        .iter()
        .all(|r| r["decision"] == "deny"));
    // Ambiguous: refused, not decided, not forwarded.
    for u in [
        "file:///data/private%2Fk",
        "file:///data\\private",
        "mem://notes/a%00",
    ] {
        let got = read(&client, &wrap(u)).await;
        assert_eq!(got, Err((-32602, "SBX_E1922".into())), "{u}");
    }
    assert_eq!(tool_records(&env, "up__resources/read").len(), recs.len());
}

/// An upstream whose `tools/list` never ends (large pages, a next cursor on each) has its
/// listing cut at the bound and failed (`SBX_E1912`), at once, rather than gathered into
/// the proxy's memory until the start timeout; its calls fail clearly meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_listing_is_cut_at_its_bound() {
    let env = Env::with(
        WAIT,
        &format!(
            "{}start_timeout = \"90s\"\nenv = {{ MCP_UPSTREAM_PAGES = \"endless\" }}\n",
            stdio_upstream("up", "90s")
        ),
        POLICY,
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    let t0 = std::time::Instant::now();
    let tools = tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .expect("the listing was not cut: it ran until the start timeout")
        .unwrap();
    assert!(t0.elapsed() < WAIT);
    assert!(
        !tools.iter().any(|t| t.name.starts_with("up__")),
        "{}",
        tools.len()
    );
    let r = tokio::time::timeout(
        WAIT,
        client.call_tool(call("up__t0_0", serde_json::json!({}))),
    )
    .await
    .expect("the call waited for the start timeout")
    .unwrap();
    assert_eq!(super::harness::structured(&r)["code"], "SBX_E1912", "{r:?}");
    assert!(
        super::harness::structured(&r)["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("too large"),
        "{r:?}"
    );
}

async fn answer(r: &mut tokio::io::BufReader<tokio::io::DuplexStream>) -> serde_json::Value {
    use tokio::io::AsyncBufReadExt as _;
    let mut line = String::new();
    tokio::time::timeout(WAIT, r.read_line(&mut line))
        .await
        .expect("no answer")
        .unwrap();
    serde_json::from_str(&line).unwrap()
}

/// A stdio session spoken raw (JSON lines), initialized and with the tools listed: its
/// writer and reader.
async fn raw_session(
    env: &Env,
) -> (
    tokio::io::DuplexStream,
    tokio::io::BufReader<tokio::io::DuplexStream>,
) {
    use tokio::io::AsyncWriteExt as _;
    let opts = sandboxio_mcp::McpOptions::from_runtime(&env.runtime).unwrap();
    let (mut w, server_r) = tokio::io::duplex(1 << 16);
    let (server_w, r) = tokio::io::duplex(1 << 16);
    tokio::spawn(sandboxio_mcp::stdio::serve_io(
        opts,
        sandboxio_core::Principal::tenant("acme"),
        server_r,
        server_w,
    ));
    let mut r = tokio::io::BufReader::new(r);
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ] {
        w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    assert_eq!(answer(&mut r).await["id"], 1);
    assert_eq!(answer(&mut r).await["id"], 2);
    (w, r)
}

/// A second request with an id already in flight is answered `-32600` and not run: the
/// upstream is called once, and each request gets exactly one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_already_in_flight_is_refused_and_not_run() {
    use tokio::io::AsyncWriteExt as _;
    let env = env();
    let (mut w, mut r) = raw_session(&env).await;
    let hang = |s: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"up__hang","arguments":{{"seconds":{s}}}}}}}"#
        )
    };
    w.write_all(format!("{}\n{}\n", hang(2), hang(3)).as_bytes())
        .await
        .unwrap();
    let first = answer(&mut r).await;
    assert_eq!(first["id"], 7, "{first}");
    assert_eq!(first["error"]["code"], -32600, "{first}");
    let second = answer(&mut r).await;
    assert_eq!(second["id"], 7, "{second}");
    assert!(
        second["result"]["content"].to_string().contains("woke up"),
        "{second}"
    );
    // The id is free again once answered.
    w.write_all(format!("{}\n", hang(0)).as_bytes())
        .await
        .unwrap();
    let third = answer(&mut r).await;
    assert!(third.get("result").is_some(), "{third}");
    let recs = tool_records(&env, "up__hang");
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0]["arguments"]["seconds"], 2);
}

/// The documented `no-secrets` rule (docs/MCP.md) covers the directory itself, which a
/// filesystem server would list, as well as what is under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_secrets_rule_covers_the_directory_itself() {
    let env = Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!(
            "{POLICY}\n{}",
            r#"
[[rule]]
id = "no-secrets"
effect = "deny"
kind = "tool_call"
tool = "up__*"
args = [{ pointer = "/path", glob = "{/data/secrets,/data/secrets/**}" }]
reason = "not the secrets directory"
"#
        ),
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    for path in [
        "/data/secrets",
        "/data/secrets/",
        "/data/secrets/k",
        "/data/./secrets",
    ] {
        let r = client
            .call_tool(call("up__read", serde_json::json!({ "path": path })))
            .await
            .unwrap();
        assert_eq!(
            super::harness::structured(&r)["code"],
            "SBX_E1550",
            "{path}: {r:?}"
        );
    }
    let docs = include_str!("../../../../docs/MCP.md");
    assert!(
        docs.contains(r#"glob = "{/data/secrets,/data/secrets/**}""#),
        "the documented rule is not the one tested"
    );
}

/// Prompts, resources and templates first seen after their upstream's first listing are
/// treated as new tools are: listed with none of their text (marked), and getting or
/// reading them is refused (`SBX_E1911`) and never forwarded until a person trusts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_prompts_resources_and_templates_are_withheld_and_refused_until_trusted() {
    use sandboxio_mcp::proxy::offer_pins::NEW_OFFER_MARK;
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    client.list_all_prompts().await.unwrap();
    client.list_all_resources().await.unwrap();
    client.list_all_resource_templates().await.unwrap();
    mutate(&client).await;
    relisted(&client).await;
    let withheld = |d: Option<&str>| {
        let d = d.unwrap_or_default();
        assert!(d.starts_with(NEW_OFFER_MARK), "{d}");
        assert!(!d.contains("NEWCOMER"), "{d}");
    };
    let prompts = client.list_all_prompts().await.unwrap();
    let p = prompts.iter().find(|p| p.name == "up__greet_v2").unwrap();
    withheld(p.description.as_deref());
    let resources = client.list_all_resources().await.unwrap();
    let new = sandboxio_mcp::proxy::uri::wrap("up", "mem://new");
    let r = resources.iter().find(|r| r.uri == new).unwrap();
    withheld(r.description.as_deref());
    let templates = client.list_all_resource_templates().await.unwrap();
    let t = templates
        .iter()
        .find(|t| t.uri_template == "sandboxio://up/mem%3A%2F%2Ft%2F{x}")
        .unwrap();
    withheld(t.description.as_deref());
    let got = client
        .get_prompt(rmcp::model::GetPromptRequestParams::new("up__greet_v2"))
        .await
        .map(|_| ())
        .map_err(refused);
    assert_eq!(got, Err((-32001, "SBX_E1911".into())));
    assert_eq!(read(&client, &new).await, Err((-32001, "SBX_E1911".into())));
    let zz = t.uri_template.replace("{x}", "zz");
    assert_eq!(read(&client, &zz).await, Err((-32001, "SBX_E1911".into())));
    assert!(tool_records(&env, "up__resources/read")
        .iter()
        .all(|r| r["error_code"] == "SBX_E1911"));
    // Trusted: served.
    let pin = sandboxio_mcp::proxy::offer_pins::resource_pin(&new);
    sandboxio_mcp::proxy::trust(&env.runtime, &pin, "tester", None)
        .await
        .unwrap();
    assert!(read(&client, &new)
        .await
        .unwrap()
        .contains("content of mem://new"));
}

/// The pin of a resource or template the upstream lists in a spelling that is not
/// normal (`MEM:`, an escaped letter) is keyed by the normal form, the form reads are
/// decided on: once it changed, reading it is refused under every spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_resource_listed_in_an_odd_spelling_is_refused_under_every_spelling() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_resources().await.unwrap();
    client.list_all_resource_templates().await.unwrap();
    let wrap = |u: &str| sandboxio_mcp::proxy::uri::wrap("up", u);
    assert!(read(&client, &wrap("mem://odd"))
        .await
        .unwrap()
        .contains("mem://odd"));
    mutate(&client).await;
    client.list_all_resources().await.unwrap();
    client.list_all_resource_templates().await.unwrap();
    for u in [
        "MEM://%6Fdd",
        "mem://odd",
        "mem://%6fdd",
        "MEM://t%70l/x",
        "mem://tpl/x",
        "mem://tpl/../tpl/y",
    ] {
        assert_eq!(
            read(&client, &wrap(u)).await,
            Err((-32001, "SBX_E1911".into())),
            "{u}"
        );
    }
    let sub = client
        .subscribe(SubscribeRequestParams::new(wrap("mem://odd")))
        .await
        .map_err(refused);
    assert_eq!(sub, Err((-32001, "SBX_E1911".into())));
}

/// A tool whose `_meta` or icons changed is changed: refused until trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_meta_or_icons_changed_is_refused() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    mutate(&client).await;
    let tools = relisted(&client).await;
    let crash = tools.iter().find(|t| t.name == "up__crash").unwrap();
    assert!(crash.icons.is_none(), "{crash:?}");
    let r = client
        .call_tool(call("up__crash", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(super::harness::structured(&r)["code"], "SBX_E1911", "{r:?}");
}

/// The URI spellings real parsers resolve to a denied path are either one normal form
/// with it (`%20` and a space, `%C3%A4` and `ä`: decided and sent decoded) or refused as
/// ambiguous (`SBX_E1922`: a `file:` host, user or port other than `localhost`, a
/// relative `file:` path, no scheme), never forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_equivalents_of_parsers_are_one_form_or_refused() {
    let env = Env::with(
        WAIT,
        &stdio_upstream("up", "20s"),
        &format!(
            "{POLICY}\n{OFFERS_POLICY}\n{NO_PRIVATE}\n{}",
            r#"
[[rule]]
id = "no-my-docs"
effect = "deny"
kind = "tool_call"
tool = "up__resources/read"
args = [{ pointer = "/uri", glob = "file:///data/my docs/**" }]
reason = "not my docs"

[[rule]]
id = "no-geheim"
effect = "deny"
kind = "tool_call"
tool = "up__resources/read"
args = [{ pointer = "/uri", glob = "file:///data/geheimnisse-ä/**" }]
reason = "not the secrets"
"#
        ),
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    let wrap = |u: &str| sandboxio_mcp::proxy::uri::wrap("up", u);
    for u in [
        "file:///data/my docs/k",
        "file:///data/my%20docs/k",
        "file:///data/geheimnisse-ä/k",
        "file:///data/geheimnisse-%C3%A4/k",
        "file:///data/geheimnisse-%c3%a4/k",
    ] {
        assert_eq!(
            read(&client, &wrap(u)).await,
            Err((-32001, "SBX_E1550".into())),
            "{u}"
        );
    }
    let decided = tool_records(&env, "up__resources/read").len();
    for u in [
        "file://127.0.0.1/data/private/k",
        "file://localhost:/data/private/k",
        "file://user@localhost/data/private/k",
        "file://evil.example/data/private/k",
        "/data/private/k",
        "//localhost/data/private/k",
        "file:data/private/k",
    ] {
        assert_eq!(
            read(&client, &wrap(u)).await,
            Err((-32602, "SBX_E1922".into())),
            "{u}"
        );
    }
    assert_eq!(tool_records(&env, "up__resources/read").len(), decided);
    // What policy saw is what the upstream is sent: the decoded form.
    let got = read(&client, &wrap("mem://notes/a%20%C3%A4"))
        .await
        .unwrap();
    assert!(got.contains("note a ä"), "{got}");
    let recs = tool_records(&env, "up__resources/read");
    assert_eq!(recs.last().unwrap()["arguments"]["uri"], "mem://notes/a ä");
}

/// The pins file stays bounded by the upstreams' current listings: an item the upstream
/// no longer lists loses its pin (and is new, so withheld, if it comes back), and the
/// latest definition is kept apart only while it differs from the approved one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_of_items_gone_from_the_listing_are_dropped() {
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    let pins = || sandboxio_mcp::proxy::pins::Pins::open(&env.state()).unwrap();
    assert!(pins().get("up__retired").is_some());
    mutate(&client).await;
    relisted(&client).await;
    let all = pins().list();
    assert!(!all.contains_key("up__retired"), "{:?}", all.keys());
    assert!(all.keys().all(|k| !k.starts_with("listed:")));
    let same = all.get("up__pid").unwrap();
    assert!(same.seen_item.is_none() && same.approved_item.is_some());
    let changed = all.get("up__echo").unwrap();
    assert!(changed.seen_item.is_some() && changed.approved_item.is_some());
}

/// A cancelled request's id stays reserved until its handler has ended: reusing it at
/// once is answered `-32600` (or, if the cancelled call already ended, run as a request
/// of its own), never answered with the cancelled call's result nor cancelled by the
/// proxy; the cancelled call itself gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_reused_right_after_its_cancellation_is_not_confused() {
    use tokio::io::AsyncWriteExt as _;
    let env = env();
    let (mut w, mut r) = raw_session(&env).await;
    let echo = |text: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"up__echo","arguments":{{"text":"{text}"}}}}}}"#
        )
    };
    let hang = |s: f64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"up__hang","arguments":{{"seconds":{s}}}}}}}"#
        )
    };
    w.write_all(format!("{}\n", hang(2.0)).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"x"}}"#;
    w.write_all(format!("{cancel}\n{}\n", hang(0.5)).as_bytes())
        .await
        .unwrap();
    let got = answer(&mut r).await;
    assert_eq!(got["id"], 7, "{got}");
    let refused = got["error"]["code"] == -32600;
    assert!(
        refused || got["result"]["content"].to_string().contains("woke up"),
        "the reuse was answered with another call's answer: {got}"
    );
    // Once the cancelled call has ended, the id is free; nothing else is answered.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    w.write_all(format!("{}\n", echo("C")).as_bytes())
        .await
        .unwrap();
    let got = answer(&mut r).await;
    assert_eq!(got["id"], 7, "{got}");
    assert!(got["result"]["content"].to_string().contains('C'), "{got}");
}

/// The refusals made before the chain (an ambiguous URI, an unknown tool or prompt or
/// resource) echo what the client sent only as the records would have it: a credential
/// in the name or URI is redacted in the error (and so in the log line of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_chain_redact_what_they_echo() {
    const TOKEN: &str = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8";
    let env = env();
    let client = env.connect(TestClient::new(User::Absent)).await;
    client.list_all_tools().await.unwrap();
    let wrap = |u: &str| sandboxio_mcp::proxy::uri::wrap("up", u);
    let texts = [
        client
            .read_resource(ReadResourceRequestParams::new(wrap(&format!(
                "file:///x%5c?token={TOKEN}"
            ))))
            .await
            .err()
            .unwrap()
            .to_string(),
        client
            .read_resource(ReadResourceRequestParams::new(format!(
                "sandboxio://nope/{TOKEN}"
            )))
            .await
            .err()
            .unwrap()
            .to_string(),
        client
            .call_tool(call(&format!("up__{TOKEN}"), serde_json::json!({})))
            .await
            .err()
            .unwrap()
            .to_string(),
        client
            .get_prompt(rmcp::model::GetPromptRequestParams::new(format!(
                "up__{TOKEN}"
            )))
            .await
            .err()
            .unwrap()
            .to_string(),
    ];
    for t in texts {
        assert!(!t.contains(TOKEN), "{t}");
        assert!(t.contains("SBX_E19") || t.contains("no "), "{t}");
    }
}
