#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `tools/call` round trip through the proxy against the same call straight to the
//! upstream, interleaved in one run: the upstream is `examples/mcp_upstream` (an rmcp
//! server on stdio); direct = an rmcp client spawning it; proxied = an rmcp client talking
//! to sandboxio's MCP server (in process, over a pipe) whose `[[mcp.upstream]]` runs the
//! same program in the process tier, each call a `tool_call` through the whole chain
//! (policy, SQLite admission and finish, one record to a file trail). The upstream's
//! sandbox start-up is measured on its own (the first listing). Cases: the state
//! directory (SQLite store and trail) on the disk with the trail's default fsync, on the
//! disk without the trail's fsync, and on tmpfs (`/dev/shm`, where fsync costs nothing:
//! the proxy's and the chain's own work without the disk's).
//!
//! Run (release): `cargo build --release -p sandboxio-sandbox --bin sandboxio-helper &&
//! cargo build --release -p sandboxio-mcp --example mcp_upstream &&
//! cargo bench -p sandboxio-mcp --bench proxy`. Prints a markdown table.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt as _;
use sandboxio_core::Principal;
use sandboxio_gateway::{Runtime, RuntimeOptions};
use sandboxio_mcp::{Front, McpOptions, SandboxioMcp};

const CALLS: usize = 2000;
const WARMUP: usize = 100;

fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

fn echo(text: &str) -> CallToolRequestParams {
    let serde_json::Value::Object(m) = serde_json::json!({ "text": text }) else {
        unreachable!()
    };
    CallToolRequestParams::new("echo").with_arguments(m)
}

fn proxied(text: &str) -> CallToolRequestParams {
    let mut p = echo(text);
    p.name = "up__echo".into();
    p
}

struct Case {
    name: &'static str,
    fsync: &'static str,
    /// The state directory on tmpfs (`/dev/shm`) rather than the disk.
    tmpfs: bool,
}

async fn run(case: &Case, upstream: &std::path::Path) -> (Vec<Duration>, Vec<Duration>, Duration) {
    let dir = if case.tmpfs {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir_in(std::env::var("SBX_BENCH_DISK").unwrap_or_else(|_| "/var/tmp".into()))
            .unwrap()
    };
    std::fs::write(
        dir.path().join("policy.toml"),
        r#"
[[rule]]
id = "upstream-process"
effect = "allow"
kind = "exec"
tier = "process"
reason = "the upstream runs in the process tier"

[[rule]]
id = "upstream-tools"
effect = "allow"
kind = "tool_call"
tool = "up__*"
reason = "the bench upstream"

[[rule]]
id = "no-etc"
effect = "deny"
kind = "tool_call"
tool = "up__read"
args = [{ pointer = "/path", glob = "/etc/**" }]
reason = "an argument rule, so the matcher is on the path"
"#,
    )
    .unwrap();
    let config = sandboxio_config::Config::parse(
        &format!(
            "[sandbox]\ntier = \"process\"\n[audit]\nfsync = \"{}\"\n[[mcp.upstream]]\nname = \"up\"\ncommand = [\"{}\"]\ntier = \"process\"\n",
            case.fsync,
            upstream.display()
        ),
        "bench",
    )
    .unwrap();
    let mut opts = RuntimeOptions::new(config, dir.path().join("state"));
    opts.policy_files = vec![dir.path().join("policy.toml")];
    let runtime = Runtime::open(opts).unwrap();
    let (a, b) = tokio::io::duplex(1 << 20);
    let handler = SandboxioMcp::new(
        McpOptions::from_runtime(&runtime).unwrap(),
        Front::Local(Principal::tenant("bench")),
    );
    tokio::spawn(async move {
        if let Ok(s) = handler.serve(a).await {
            let _ = s.waiting().await;
        }
    });
    let via = ().serve(b).await.unwrap();
    let t0 = Instant::now();
    via.list_all_tools().await.unwrap();
    let startup = t0.elapsed();

    let cmd = tokio::process::Command::new(upstream);
    let direct = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();

    let (mut d, mut p) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
    for i in 0..(WARMUP + CALLS) {
        let text = format!("call {i}");
        // Alternate which goes first, so neither always follows the other.
        let order = [i % 2 == 0, i % 2 != 0];
        for first_direct in order {
            let t = Instant::now();
            if first_direct {
                let r = direct.call_tool(echo(&text)).await.unwrap();
                assert_ne!(r.is_error, Some(true));
                if i >= WARMUP {
                    d.push(t.elapsed());
                }
            } else {
                let r = via.call_tool(proxied(&text)).await.unwrap();
                assert_ne!(r.is_error, Some(true), "{r:?}");
                if i >= WARMUP {
                    p.push(t.elapsed());
                }
            }
        }
    }
    let _ = direct.cancel().await;
    let _ = via.cancel().await;
    (d, p, startup)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = release_dir();
    let helper = dir.join("sandboxio-helper");
    let upstream = dir.join("examples").join("mcp_upstream");
    for b in [&helper, &upstream] {
        if !b.exists() {
            eprintln!(
                "skipped: {} is missing; build it first (see the header of benches/proxy.rs)",
                b.display()
            );
            return;
        }
    }
    std::env::set_var("SBX_HELPER", &helper);
    println!("| case | direct p50 µs | proxied p50 µs | overhead p50 µs | ratio p50 | direct p99 µs | proxied p99 µs | upstream start ms |");
    println!("|---|---|---|---|---|---|---|---|");
    for case in [
        Case {
            name: "state on disk, trail fsync always (default)",
            fsync: "always",
            tmpfs: false,
        },
        Case {
            name: "state on disk, trail fsync never",
            fsync: "never",
            tmpfs: false,
        },
        Case {
            name: "state on tmpfs (no disk)",
            fsync: "always",
            tmpfs: true,
        },
    ] {
        // `SBX_BENCH_CASES=tmpfs` (or `disk`, `never`): only the cases whose name holds it.
        if let Ok(only) = std::env::var("SBX_BENCH_CASES") {
            if !case.name.contains(only.as_str()) {
                continue;
            }
        }
        let (mut d, mut p, start) = run(&case, &upstream).await;
        let (d50, p50) = (pct(&mut d, 0.5), pct(&mut p, 0.5));
        let (d99, p99) = (pct(&mut d, 0.99), pct(&mut p, 0.99));
        println!(
            "| {} | {d50:.0} | {p50:.0} | {:.0} | {:.2}x | {d99:.0} | {p99:.0} | {:.1} |",
            case.name,
            p50 - d50,
            p50 / d50,
            start.as_secs_f64() * 1e3
        );
    }
}
