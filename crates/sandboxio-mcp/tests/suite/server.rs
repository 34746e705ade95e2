//! The tools over MCP: list, calls, a denial, asks (a person, elicitation accepted and
//! declined), cancellation, progress and bad input; each call leaves exactly one record.

use std::time::Duration;

use rmcp::model::{NumberOrString, ProgressToken, RequestParamsMeta};

use super::harness::{call, structured, Env, TestClient, User};

const WAIT: Duration = Duration::from_secs(30);

/// The operator lets this (person-operated) stdio client answer asks.
const ELICIT: &str = "[mcp]\nelicitation_approvals = true\n";

fn records_of<'a>(events: &'a [serde_json::Value], op: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| {
            e["operation_id"] == op && !e["event"].as_str().unwrap_or("").ends_with(".intent")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_has_every_tool_with_schemas_and_annotations() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for want in [
        "create_sandbox",
        "close_sandbox",
        "exec",
        "run_code",
        "read_file",
        "write_file",
        "list_files",
    ] {
        assert!(
            names.contains(&want.to_string()),
            "{want} missing from {names:?}"
        );
    }
    let exec = tools.iter().find(|t| t.name == "exec").unwrap();
    let a = exec.annotations.clone().unwrap();
    assert_eq!(a.destructive_hint, Some(true));
    assert!(exec.output_schema.is_some());
    let read = tools.iter().find(|t| t.name == "read_file").unwrap();
    assert_eq!(read.annotations.clone().unwrap().read_only_hint, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_code_runs_in_the_sandbox_and_leaves_one_record() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call(
            "run_code",
            serde_json::json!({"language": "python", "code": "print(6 * 7)"}),
        ))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let v = structured(&r);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"], "42\n");
    let op = v["operation_id"].as_str().unwrap().to_string();
    let events = env.events();
    let recs = records_of(&events, &op);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["event"], "run_code");
    assert_eq!(recs[0]["decision"], "allow");
    assert_eq!(recs[0]["tenant_id"], "acme");
    client.cancel().await.unwrap();
}

/// `exec`'s standard input takes any bytes, as base64 with `stdin_encoding` (the
/// encoding `write_file` takes for its content).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_stdin_takes_bytes_as_base64() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call(
            "exec",
            // 00 ff fe 0a: a NUL, two bytes that are not UTF-8, a newline.
            serde_json::json!({"argv": ["od", "-An", "-tx1"], "stdin": "AP/+Cg==", "stdin_encoding": "base64"}),
        ))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let v = structured(&r);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"].as_str().unwrap().trim(), "00 ff fe 0a", "{v}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip_in_a_created_sandbox_and_escapes_are_refused() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let created = client
        .call_tool(call(
            "create_sandbox",
            serde_json::json!({"tier": "process"}),
        ))
        .await
        .unwrap();
    let id = structured(&created)["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    let w = client
        .call_tool(call(
            "write_file",
            serde_json::json!({"sandbox_id": id, "path": "notes/a.txt", "content": "hello"}),
        ))
        .await
        .unwrap();
    assert_eq!(w.is_error, Some(false), "{w:?}");
    let r = client
        .call_tool(call(
            "read_file",
            serde_json::json!({"sandbox_id": id, "path": "notes/a.txt"}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&r)["content"], "hello");
    let l = client
        .call_tool(call(
            "list_files",
            serde_json::json!({"sandbox_id": id, "path": "notes"}),
        ))
        .await
        .unwrap();
    let listing = structured(&l)["entries"].to_string();
    assert!(listing.contains("a.txt"), "{listing}");
    // A program sees the workspace at $SANDBOX_INPUT.
    let e = client
        .call_tool(call(
            "exec",
            serde_json::json!({"sandbox_id": id, "argv": ["sh", "-c", "cat \"$SANDBOX_INPUT/notes/a.txt\""]}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&e)["stdout"], "hello");
    let esc = client
        .call_tool(call(
            "read_file",
            serde_json::json!({"sandbox_id": id, "path": "../../etc/passwd"}),
        ))
        .await
        .unwrap();
    assert_eq!(esc.is_error, Some(true), "{esc:?}");
    let closed = client
        .call_tool(call("close_sandbox", serde_json::json!({"sandbox_id": id})))
        .await
        .unwrap();
    assert_eq!(structured(&closed)["closed"], true);
    let gone = client
        .call_tool(call(
            "read_file",
            serde_json::json!({"sandbox_id": id, "path": "notes/a.txt"}),
        ))
        .await
        .unwrap();
    assert_eq!(gone.is_error, Some(true));
    assert_eq!(structured(&gone)["code"], "SBX_E1903");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_denial_is_a_structured_tool_error_and_a_record() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call(
            "exec",
            serde_json::json!({"argv": ["curl", "http://example.invalid/"]}),
        ))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let d = structured(&r);
    assert_eq!(d["layer"], "policy", "{d}");
    assert_eq!(d["code"], "SBX_E1550");
    assert!(d["rules"].to_string().contains("no-curl"), "{d}");
    let op = d["operation_id"].as_str().unwrap();
    let events = env.events();
    let recs = records_of(&events, op);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["decision"], "deny");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_waits_for_a_person_and_runs_once_approved() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let gw = env.runtime.gateway().clone();
    let store = env.runtime.store().clone();
    let person = tokio::spawn(async move {
        // A person looks at the pending approvals and approves the one there is.
        for _ in 0..600 {
            let pending = store
                .list_approvals(Some(sandboxio_gateway::store::ApprovalState::Pending))
                .unwrap();
            if let Some(a) = pending.first() {
                gw.admin(
                    "acme",
                    "a person",
                    sandboxio_core::AdminAction::Approve {
                        approval_id: a.id.clone(),
                        reason: None,
                    },
                )
                .await
                .unwrap();
                return a.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no approval became pending");
    });
    let r = client
        .call_tool(call(
            "exec",
            serde_json::json!({"argv": ["touch", "made"], "rationale": "test"}),
        ))
        .await
        .unwrap();
    let approval = person.await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let op = structured(&r)["operation_id"].as_str().unwrap().to_string();
    let events = env.events();
    let recs = records_of(&events, &op);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["approval_id"], approval.as_str());
    assert_eq!(recs[0]["approver"], "a person");
    client.cancel().await.unwrap();
}

/// A client that offers no elicitation but asked for progress is told at once which
/// approval its call waits for and how to answer it: the person here learns the id from
/// that notification alone, and the call then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_ask_names_its_approval_on_the_progress_token() {
    let env = Env::new(WAIT);
    let c = TestClient::new(User::Absent);
    let progress = c.progress.clone();
    let client = env.connect(c).await;
    let gw = env.runtime.gateway().clone();
    let person = tokio::spawn(async move {
        for _ in 0..600 {
            let said: Vec<String> = progress
                .lock()
                .unwrap()
                .iter()
                .filter_map(|p| p.message.clone())
                .collect();
            let id = said.iter().find_map(|m| {
                let rest = m.strip_prefix("waiting for approval `")?;
                rest.split('`').next().map(str::to_string)
            });
            if let Some(id) = id {
                assert!(
                    said[0].contains(&format!("sandboxio approvals approve {id}")),
                    "{said:?}"
                );
                gw.admin(
                    "acme",
                    "a person",
                    sandboxio_core::AdminAction::Approve {
                        approval_id: id.clone(),
                        reason: None,
                    },
                )
                .await
                .unwrap();
                return id;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no progress notification named the approval");
    });
    let mut params = call(
        "exec",
        serde_json::json!({"argv": ["touch", "made"], "rationale": "test"}),
    );
    params.set_progress_token(ProgressToken(NumberOrString::Number(9)));
    let r = client.call_tool(params).await.unwrap();
    let approval = person.await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let op = structured(&r)["operation_id"].as_str().unwrap().to_string();
    let events = env.events();
    let recs = records_of(&events, &op);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["approval_id"], approval.as_str());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_answered_through_elicitation_when_the_operator_enabled_it() {
    let env = Env::with(WAIT, ELICIT, "");
    let c = TestClient::new(User::Approves);
    let asked = c.elicitations.clone();
    let client = env.connect(c).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let prompts = asked.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(prompts[0].contains("touch"), "{}", prompts[0]);
    let op = structured(&r)["operation_id"].as_str().unwrap().to_string();
    let events = env.events();
    let recs = records_of(&events, &op);
    assert_eq!(recs.len(), 1);
    let approver = recs[0]["approver"].as_str().unwrap();
    assert!(approver.contains("elicitation"), "{approver}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_not_offered_to_the_client_unless_the_operator_enabled_it() {
    // The agent's own client would approve what the agent asks: by default it is not
    // asked, and the approval waits for a person (here: none, so it times out).
    let env = Env::new(Duration::from_millis(1500));
    let c = TestClient::new(User::Approves);
    let asked = c.elicitations.clone();
    let client = env.connect(c).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    let d = structured(&r);
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(d["code"], "SBX_E1555", "{d}");
    assert!(d["approval_id"].as_str().is_some(), "{d}");
    assert!(asked.lock().unwrap().is_empty());
    assert!(
        !env.events().iter().any(|e| e["tool_name"] == "approve"),
        "nothing may be approved"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_declined_through_elicitation_is_denied_with_its_approval_id() {
    let env = Env::with(WAIT, ELICIT, "");
    let client = env.connect(TestClient::new(User::Declines)).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let d = structured(&r);
    assert_eq!(d["layer"], "approval", "{d}");
    assert_eq!(d["code"], "SBX_E1554");
    assert!(d["approval_id"].as_str().is_some(), "{d}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_ask_is_denied_at_the_timeout() {
    let env = Env::new(Duration::from_millis(600));
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call("exec", serde_json::json!({"argv": ["touch", "made"]})))
        .await
        .unwrap();
    let d = structured(&r);
    assert_eq!(d["code"], "SBX_E1555", "{d}");
    assert!(d["approval_id"].as_str().is_some());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_kills_the_whole_process_tree_and_is_recorded() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let marker = env.dir.path().join("late");
    // A grandchild in the background would leave the marker after 4 s unless killed; the
    // call is dropped at 0.7 s. The margin is wide so that a slow machine cannot make the
    // kill look late: the test is about whether the tree dies, not how fast.
    let script = format!(
        "(sleep 4; touch {m}) & echo started; sleep 60",
        m = marker.display()
    );
    let t0 = std::time::Instant::now();
    let c = client.clone();
    let running = tokio::spawn(async move {
        c.call_tool(call(
            "exec",
            serde_json::json!({"argv": ["sh", "-c", script]}),
        ))
        .await
    });
    // Give the program time to start, then drop the request: the client sends
    // notifications/cancelled.
    tokio::time::sleep(Duration::from_millis(700)).await;
    running.abort();
    // The record of the cancelled run arrives once the tree is gone.
    let mut rec = None;
    for _ in 0..200 {
        let events = env.events();
        if let Some(e) = events.iter().find(|e| e["event"] == "exec") {
            rec = Some(e.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rec = rec.expect("the cancelled exec left no record");
    assert_eq!(rec["status"], "cancelled", "{rec}");
    // Past the moment a survivor would have written the marker.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(t0.elapsed())).await;
    assert!(
        !marker.exists(),
        "a process of the cancelled call survived and wrote {}",
        marker.display()
    );
    assert_eq!(
        env.events().iter().filter(|e| e["event"] == "exec").count(),
        1
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_token_receives_the_output_as_it_runs() {
    let env = Env::new(WAIT);
    let c = TestClient::new(User::Absent);
    let progress = c.progress.clone();
    let client = env.connect(c).await;
    let mut params = call(
        "exec",
        serde_json::json!({"argv": ["sh", "-c", "for i in 1 2 3; do echo tick$i; sleep 0.2; done"]}),
    );
    params.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let r = client.call_tool(params).await.unwrap();
    assert_eq!(structured(&r)["stdout"], "tick1\ntick2\ntick3\n");
    // Notifications may still be in flight behind the answer.
    for _ in 0..100 {
        if progress.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = progress.lock().unwrap().clone();
    let text: String = seen
        .iter()
        .filter_map(|p| p.message.clone())
        .collect::<Vec<_>>()
        .join("|");
    assert!(text.contains("tick1") && text.contains("tick3"), "{text}");
    for w in seen.windows(2) {
        assert!(
            w[1].progress > w[0].progress,
            "progress must increase: {seen:?}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_tool_errors_with_a_code_and_run_nothing() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let before = env.events().len();
    for (tool, args, code) in [
        (
            "exec",
            serde_json::json!({"argv": ["true"], "bogus": 1}),
            "SBX_E1901",
        ),
        ("exec", serde_json::json!({"argv": []}), "SBX_E1901"),
        (
            "run_code",
            serde_json::json!({"language": "cobol", "code": "x"}),
            "SBX_E1901",
        ),
        (
            "exec",
            serde_json::json!({"argv": ["true"], "timeout": "soon"}),
            "SBX_E1901",
        ),
        (
            "write_file",
            serde_json::json!({"path": "a", "content": "%%", "encoding": "base64"}),
            "SBX_E1901",
        ),
        (
            "exec",
            serde_json::json!({"argv": ["cat"], "stdin": "%%", "stdin_encoding": "base64"}),
            "SBX_E1901",
        ),
        (
            "exec",
            serde_json::json!({"argv": ["cat"], "stdin_encoding": "base64"}),
            "SBX_E1901",
        ),
        (
            "read_file",
            serde_json::json!({"sandbox_id": "nope", "path": "a"}),
            "SBX_E1903",
        ),
    ] {
        let r = client.call_tool(call(tool, args.clone())).await.unwrap();
        assert_eq!(r.is_error, Some(true), "{tool} {args}");
        assert_eq!(structured(&r)["code"], code, "{tool} {args}: {r:?}");
    }
    // An unknown tool is a protocol error.
    assert!(client
        .call_tool(call("format_disk", serde_json::json!({})))
        .await
        .is_err());
    assert_eq!(
        env.events().len(),
        before,
        "bad input must not run or record anything"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_this_build_cannot_run_is_refused_at_create() {
    let env = Env::new(WAIT);
    let client = env.connect(TestClient::new(User::Absent)).await;
    let r = client
        .call_tool(call(
            "create_sandbox",
            serde_json::json!({"tier": "microvm"}),
        ))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let d = structured(&r);
    assert_eq!(d["code"], "SBX_E1901", "{d}");
    assert!(d.to_string().contains("microvm"), "{d}");
    assert!(!env
        .events()
        .iter()
        .any(|e| e["event"] == "mcp.sandbox_create"));
    client.cancel().await.unwrap();
}

/// Raw lines to `serve_io` and its answers.
struct Raw {
    w: tokio::io::DuplexStream,
    r: tokio::io::BufReader<tokio::io::DuplexStream>,
}

impl Raw {
    async fn send(&mut self, line: &[u8]) {
        use tokio::io::AsyncWriteExt as _;
        self.w.write_all(line).await.unwrap();
        self.w.write_all(b"\n").await.unwrap();
    }

    async fn answer(&mut self) -> serde_json::Value {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut line))
            .await
            .expect("no answer")
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stdio_line_gets_an_answer_even_when_it_is_not_a_message() {
    let env = Env::new(WAIT);
    let opts = sandboxio_mcp::McpOptions::from_runtime(&env.runtime).unwrap();
    let (w, server_r) = tokio::io::duplex(1 << 16);
    let (server_w, r) = tokio::io::duplex(1 << 16);
    tokio::spawn(sandboxio_mcp::stdio::serve_io(
        opts,
        sandboxio_core::Principal::tenant("acme"),
        server_r,
        server_w,
    ));
    let mut c = Raw {
        w,
        r: tokio::io::BufReader::new(r),
    };
    c.send(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#).await;
    assert_eq!(c.answer().await["id"], 1);
    c.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    // Not JSON: a parse error, id null.
    c.send(br#"{"jsonrpc":"2.0","id":2,"method":"#).await;
    let a = c.answer().await;
    assert_eq!(a["error"]["code"], -32700, "{a}");
    assert!(a.get("id").is_some_and(|id| id.is_null()), "{a}");
    // A lone surrogate, and bytes that are not UTF-8.
    c.send(br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"\ud800"}}"#)
        .await;
    assert_eq!(c.answer().await["error"]["code"], -32700);
    c.send(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}")
        .await;
    assert_eq!(c.answer().await["error"]["code"], -32700);
    // JSON that is no message: invalid request, with its id.
    c.send(br#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#).await;
    let a = c.answer().await;
    assert_eq!(a["error"]["code"], -32600, "{a}");
    assert_eq!(a["id"], 5, "{a}");
    // A method of the protocol with params that do not fit it: invalid params.
    for (id, params) in [
        (8, r#"{"name":"exec","arguments":["ls"]}"#),
        (9, r#"{"arguments":{}}"#),
    ] {
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
        c.send(line.as_bytes()).await;
        let a = c.answer().await;
        assert_eq!(a["error"]["code"], -32602, "{a}");
        assert_eq!(a["id"], id, "{a}");
    }
    // An unknown method is still "method not found".
    c.send(br#"{"jsonrpc":"2.0","id":10,"method":"no/such"}"#)
        .await;
    let a = c.answer().await;
    assert_eq!(a["error"]["code"], -32601, "{a}");
    // A line over the limit is answered and skipped; the next one is served.
    let mut big = br#"{"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":""#.to_vec();
    big.resize(sandboxio_mcp::stdio::MAX_LINE + 10, b'a');
    big.extend_from_slice(br#""}}"#);
    let (mut w, mut rd) = (c.w, c.r);
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        w.write_all(&big).await.unwrap();
        w.write_all(b"\n").await.unwrap();
        w.write_all(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
            .await
            .unwrap();
        w.write_all(b"\n").await.unwrap();
        w
    });
    let a = {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(20), rd.read_line(&mut line))
            .await
            .expect("no answer")
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()
    };
    assert_eq!(a["error"]["code"], -32600, "{a}");
    assert_eq!(a["error"]["data"]["code"], "SBX_E1919", "{a}");
    let w = writer.await.unwrap();
    let mut c = Raw { w, r: rd };
    let a = c.answer().await;
    assert_eq!(a["id"], 7, "{a}");
    assert!(a.get("result").is_some(), "{a}");
}
