//! Attacks of a hostile tester on the proxy, each tried for real against the test upstream
//! (`examples/mcp_upstream.rs`) run over stdio in the process tier, through a real
//! runtime: the refusal is asserted, and where it matters that the upstream was never
//! reached.

use super::harness::Env;
use super::proxy::{stdio_upstream, tool_records, POLICY, WAIT};

fn env() -> Env {
    Env::with(WAIT, &stdio_upstream("up", "20s"), POLICY)
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

/// A second request with an id already in flight is answered `-32600` and not run: the
/// upstream is called once, and each request gets exactly one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_already_in_flight_is_refused_and_not_run() {
    use tokio::io::AsyncWriteExt as _;
    let env = env();
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
