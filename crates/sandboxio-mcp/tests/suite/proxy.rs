//! The proxy against a real upstream (`examples/mcp_upstream.rs`, an rmcp server) run in
//! a sandbox over stdio, and over streamable HTTP on loopback: namespaced listing, an
//! allowed call, a call denied by an argument rule, an ask approved through elicitation,
//! redaction of arguments and results, `list_changed`, a changed description refused until
//! trusted, SIGKILL and restart, a hang cut at its timeout while another upstream answers,
//! an upstream that cannot start. Each call leaves exactly one `tool_call` record.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandboxio_mcp::McpOptions;

use super::harness::{call, structured, Env, TestClient, User};

pub(super) const WAIT: Duration = Duration::from_secs(30);
pub(super) const TOKEN: &str = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8";

pub(super) const POLICY: &str = r#"
[[rule]]
id = "upstream-tools"
effect = "allow"
kind = "tool_call"
tool = ["up__*", "slow__*", "web__*", "dead__*"]
reason = "the test upstreams' tools"

[[rule]]
id = "no-etc"
effect = "deny"
kind = "tool_call"
tool = "*__read"
args = [{ pointer = "/path", glob = "/etc/**" }]
reason = "reading /etc through an upstream is not allowed"
examples = [{ args = { kind = "tool_call", tool = "up__read", arguments = { path = "/etc/passwd" } } }]

[[rule]]
id = "asks-need-a-person"
effect = "ask"
kind = "tool_call"
tool = "*__echo"
args = [{ pointer = "/text", regex = "^ask:" }]
reason = "texts starting with ask: need a person"
"#;

/// The test upstream, built so it is never older than this test.
pub(super) fn upstream_bin() -> PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let bin = dir.join("examples").join("mcp_upstream");
    ONCE.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
        let mut build = std::process::Command::new(cargo);
        // What cargo sets for a test run (the package's own variables, library paths)
        // would make this build's fingerprints differ from `cargo build`'s and rebuild
        // the crate's dependencies every time: build as from a shell.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR")
                || k == "LD_LIBRARY_PATH"
                || k == "RUST_RECURSION_COUNT"
            {
                build.env_remove(k);
            }
        }
        let ok = build
            .args([
                "build",
                "-q",
                "-p",
                "sandboxio-mcp",
                "--example",
                "mcp_upstream",
            ])
            .arg("--manifest-path")
            .arg(manifest)
            .status()
            .unwrap();
        assert!(ok.success(), "building the test upstream failed");
    });
    assert!(bin.exists(), "no upstream at {}", bin.display());
    bin
}

pub(super) fn stdio_upstream(name: &str, timeout: &str) -> String {
    format!(
        "[[mcp.upstream]]\nname = \"{name}\"\ncommand = [\"{}\"]\ntier = \"process\"\ncall_timeout = \"{timeout}\"\n",
        upstream_bin().display()
    )
}

pub(super) fn proxy_env(extra: &str) -> Env {
    Env::with(
        WAIT,
        &format!("{}{extra}", stdio_upstream("up", "20s")),
        POLICY,
    )
}

/// Records of `tool_call` operations on `tool`.
pub(super) fn tool_records(env: &Env, tool: &str) -> Vec<serde_json::Value> {
    env.events()
        .into_iter()
        .filter(|e| e["event"] == "tool_call" && e["tool_name"] == tool)
        .collect()
}

fn text_of(r: &rmcp::model::CallToolResult) -> String {
    serde_json::to_string(&r.content).unwrap()
}

async fn upstream_pid(client: &rmcp::service::RunningService<rmcp::RoleClient, TestClient>) -> i32 {
    let r = client
        .call_tool(call("up__pid", serde_json::json!({})))
        .await
        .unwrap();
    let t = r.content[0].as_text().unwrap().text.clone();
    t.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_are_namespaced_and_an_allowed_call_is_one_recorded_operation() {
    let env = proxy_env("");
    let client = env.connect(TestClient::new(User::Absent)).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"up__echo".to_string()), "{names:?}");
    assert!(names.contains(&"exec".to_string()), "{names:?}");
    let r = client
        .call_tool(call("up__echo", serde_json::json!({"text": "hi"})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text_of(&r).contains("echo: hi"), "{r:?}");
    assert_eq!(structured(&r)["text"], "hi");
    let recs = tool_records(&env, "up__echo");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["status"], "ok");
    assert_eq!(recs[0]["arguments"]["text"], "hi");
    assert_eq!(recs[0]["labels"]["mcp.upstream"], "up");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_rule_denies_one_call_and_allows_another() {
    let env = proxy_env("");
    let allowed = env.dir.path().join("notes.txt");
    std::fs::write(&allowed, "a note").unwrap();
    let client = env.connect(TestClient::new(User::Absent)).await;
    let denied = client
        .call_tool(call(
            "up__read",
            serde_json::json!({"path": "/etc/hostname"}),
        ))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true), "{denied:?}");
    let d = structured(&denied);
    assert_eq!(d["layer"], "policy", "{d}");
    assert_eq!(d["code"], "SBX_E1550", "{d}");
    assert!(d["rules"].to_string().contains("no-etc"), "{d}");
    // The same tool with another path runs.
    let ok = client
        .call_tool(call(
            "up__read",
            serde_json::json!({"path": allowed.display().to_string()}),
        ))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert!(text_of(&ok).contains("a note"), "{ok:?}");
    // An array where a string is expected cannot dodge the deny.
    let sneaky = client
        .call_tool(call(
            "up__read",
            serde_json::json!({"path": ["/etc/hostname"]}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&sneaky)["code"], "SBX_E1550", "{sneaky:?}");
    let recs = tool_records(&env, "up__read");
    assert_eq!(recs.len(), 3, "one record per call: {recs:?}");
    assert_eq!(
        recs.iter().filter(|r| r["decision"] == "deny").count(),
        2,
        "{recs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_results_and_arguments_are_redacted() {
    let env = proxy_env("");
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call("up__leak", serde_json::json!({})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let shown = serde_json::to_string(&r).unwrap();
    assert!(
        !shown.contains(TOKEN),
        "the token reached the client: {shown}"
    );
    assert!(shown.contains("token "), "{shown}");
    let echoed = client
        .call_tool(call(
            "up__echo",
            serde_json::json!({"text": format!("my key {TOKEN}")}),
        ))
        .await
        .unwrap();
    let shown = serde_json::to_string(&echoed).unwrap();
    assert!(!shown.contains(TOKEN), "{shown}");
    let trail = std::fs::read_to_string(env.trail()).unwrap();
    assert!(!trail.contains(TOKEN), "the token reached the trail");
    let recs = tool_records(&env, "up__echo");
    assert_eq!(recs.len(), 1);
    let arg = recs[0]["arguments"]["text"].as_str().unwrap();
    assert!(
        arg.starts_with("my key ") && arg != format!("my key {TOKEN}"),
        "{arg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_on_an_argument_is_approved_through_elicitation() {
    // The operator lets this (person-operated) client answer asks.
    let env = Env::with(
        WAIT,
        &format!(
            "[mcp]\nelicitation_approvals = true\n{}",
            stdio_upstream("up", "20s")
        ),
        POLICY,
    );
    let client = env.connect(TestClient::new(User::Approves)).await;
    let r = client
        .call_tool(call("up__echo", serde_json::json!({"text": "ask: may I"})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text_of(&r).contains("echo: ask: may I"), "{r:?}");
    let client2 = env.connect(TestClient::new(User::Declines)).await;
    let d = client2
        .call_tool(call("up__echo", serde_json::json!({"text": "ask: again"})))
        .await
        .unwrap();
    assert_eq!(d.is_error, Some(true), "{d:?}");
    assert_eq!(structured(&d)["layer"], "approval", "{d:?}");
    let recs = tool_records(&env, "up__echo");
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs
        .iter()
        .any(|r| r["approver"].as_str().unwrap_or("").contains("elicitation")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_is_forwarded_and_a_changed_description_is_refused_until_trusted() {
    let env = proxy_env("");
    let opts = McpOptions::from_runtime(&env.runtime).unwrap();
    let proxy = opts.proxy.clone().unwrap();
    let tc = TestClient::new(User::Absent);
    let seen = tc.list_changed.clone();
    let client = env.connect_with(opts, tc).await;
    let before = client.list_all_tools().await.unwrap();
    assert!(!before.iter().any(|t| t.name == "up__extra"));
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "before"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    // The upstream changes its list (and echo's description) and says so.
    client
        .call_tool(call("up__mutate", serde_json::json!({})))
        .await
        .unwrap();
    let t0 = Instant::now();
    while seen.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < WAIT, "no list_changed reached the client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = client.list_all_tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "up__extra"), "{after:?}");
    let echo = after.iter().find(|t| t.name == "up__echo").unwrap();
    let desc = echo.description.as_deref().unwrap_or_default();
    assert!(
        desc.starts_with(sandboxio_mcp::proxy::CHANGED_MARK),
        "{desc}"
    );
    // The rug pull: the changed tool is refused, with a record.
    let refused = client
        .call_tool(call("up__echo", serde_json::json!({"text": "after"})))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(structured(&refused)["code"], "SBX_E1911", "{refused:?}");
    // A person approves the new description (as `sandboxio mcp trust` does, through the
    // pins file); the next call runs.
    let pins = sandboxio_mcp::proxy::pins::Pins::open(&env.state()).unwrap();
    assert!(pins.approve("up__echo").unwrap().is_some());
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "trusted"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    let recs = tool_records(&env, "up__echo");
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_eq!(recs[1]["error_code"], "SBX_E1911");
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_upstream_fails_its_call_in_flight_and_is_restarted() {
    let env = proxy_env("");
    let opts = McpOptions::from_runtime(&env.runtime).unwrap();
    let proxy = opts.proxy.clone().unwrap();
    let client = std::sync::Arc::new(env.connect_with(opts, TestClient::new(User::Absent)).await);
    let pid = upstream_pid(&client).await;
    // A call in flight when the upstream is SIGKILLed fails with a clear code.
    let c2 = client.clone();
    let hanging = tokio::spawn(async move {
        c2.call_tool(call("up__hang", serde_json::json!({"seconds": 60})))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The upstream's own process, by the pid it reported (the process tier shares the
    // host's pid namespace).
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let r = tokio::time::timeout(WAIT, hanging).await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["code"], "SBX_E1909", "{r:?}");
    // The next call starts it again and succeeds.
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "again"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    let new_pid = upstream_pid(&client).await;
    assert_ne!(new_pid, pid);
    assert_eq!(proxy.upstreams()[0].starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_upstream_is_cut_at_its_timeout_while_another_answers() {
    let env = Env::with(
        WAIT,
        &format!(
            "{}{}",
            stdio_upstream("up", "20s"),
            stdio_upstream("slow", "1s")
        ),
        POLICY,
    );
    let client = std::sync::Arc::new(env.connect(TestClient::new(User::Absent)).await);
    client.list_all_tools().await.unwrap();
    let c2 = client.clone();
    let slow = tokio::spawn(async move {
        c2.call_tool(call("slow__hang", serde_json::json!({"seconds": 600})))
            .await
            .unwrap()
    });
    // While `slow` hangs, `up` answers.
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "still here"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert!(
        !slow.is_finished(),
        "the hang ended before the other call was answered"
    );
    let r = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["code"], "SBX_E1910", "{r:?}");
    // The upstream that hung still answers quick calls afterwards.
    let again = client
        .call_tool(call("slow__echo", serde_json::json!({"text": "x"})))
        .await
        .unwrap();
    assert_ne!(again.is_error, Some(true), "{again:?}");
    let recs = tool_records(&env, "slow__hang");
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["error_code"], "SBX_E1910");
}

/// An upstream that answers nothing at all (two calls in a row time out with nothing
/// answered between them) is taken for hung: stopped, and started again on the next call,
/// which it answers. It stayed hung for every call until the proxy restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_answers_nothing_is_started_again() {
    let env = Env::with(WAIT, &stdio_upstream("up", "1s"), POLICY);
    let opts = McpOptions::from_runtime(&env.runtime).unwrap();
    let proxy = opts.proxy.clone().unwrap();
    let client = env.connect_with(opts, TestClient::new(User::Absent)).await;
    let pid = upstream_pid(&client).await;
    let hang = || call("up__hang", serde_json::json!({"seconds": 600}));
    let first = client.call_tool(hang()).await.unwrap();
    assert_eq!(structured(&first)["code"], "SBX_E1910", "{first:?}");
    assert!(!text_of(&first).contains("started again"), "{first:?}");
    assert_eq!(
        proxy.upstreams()[0].starts(),
        1,
        "one slow call is not a hang"
    );
    let second = client.call_tool(hang()).await.unwrap();
    assert_eq!(structured(&second)["code"], "SBX_E1910", "{second:?}");
    assert!(text_of(&second).contains("started again"), "{second:?}");
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "back"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert_ne!(upstream_pid(&client).await, pid, "a new process");
    assert_eq!(proxy.upstreams()[0].starts(), 2);
}

/// An answer longer than the upstream's `max_message` fails its call at once, saying so
/// (`SBX_E1912`), and the upstream is started again; it was dropped by the transport and
/// the call waited out its timeout as if the upstream had hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_max_message_fails_its_call_at_once() {
    let env = Env::with(
        WAIT,
        &format!("{}max_message = \"4KiB\"\n", stdio_upstream("up", "600s")),
        POLICY,
    );
    let opts = McpOptions::from_runtime(&env.runtime).unwrap();
    let proxy = opts.proxy.clone().unwrap();
    let client = env.connect_with(opts, TestClient::new(User::Absent)).await;
    let big = "x".repeat(8 * 1024);
    // Within the test's bound, far under the call's 600 s timeout.
    let r = tokio::time::timeout(
        WAIT,
        client.call_tool(call("up__echo", serde_json::json!({ "text": big }))),
    )
    .await
    .expect("the call waited for its timeout")
    .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["code"], "SBX_E1912", "{r:?}");
    assert!(text_of(&r).contains("max_message"), "{r:?}");
    let ok = client
        .call_tool(call("up__echo", serde_json::json!({"text": "small"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert_eq!(proxy.upstreams()[0].starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_cannot_start_is_left_out_and_its_calls_fail_clearly() {
    let env = Env::with(
        WAIT,
        &format!(
            "{}[[mcp.upstream]]\nname = \"dead\"\ncommand = [\"/nonexistent/mcp-server\"]\ntier = \"process\"\nstart_timeout = \"5s\"\n",
            stdio_upstream("up", "20s")
        ),
        POLICY,
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "up__echo"));
    assert!(!tools.iter().any(|t| t.name.starts_with("dead__")));
    let r = client
        .call_tool(call("dead__anything", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["code"], "SBX_E1908", "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_on_loopback_is_proxied() {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(upstream_bin())
        .arg("--http")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("listening ").unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let env = Env::with(
        WAIT,
        &format!("[[mcp.upstream]]\nname = \"web\"\nurl = \"{url}\"\ncall_timeout = \"10s\"\n"),
        POLICY,
    );
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call("web__echo", serde_json::json!({"text": "over http"})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(text_of(&r).contains("echo: over http"), "{r:?}");
    let denied = client
        .call_tool(call(
            "web__read",
            serde_json::json!({"path": "/etc/passwd"}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&denied)["code"], "SBX_E1550");
    assert_eq!(tool_records(&env, "web__echo").len(), 1);
    let _ = child.kill();
    let _ = child.wait();
}
