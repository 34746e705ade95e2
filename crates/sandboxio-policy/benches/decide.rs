//! Decision latency with 10 and 1,000 rules, and the time to load (parse and compile) the
//! built-in default policy, which every one-shot CLI run pays.
//! Plain `std::time::Instant`, no framework: `cargo bench -p sandboxio-policy --bench
//! decide`. Prints p50/p99/max per scenario.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sandboxio_core::{Language, Operation, OperationArgs, Principal};
use sandboxio_policy::{Context, PolicySet};

/// A realistic mix: per-tenant file rules with globs, exec prefixes, tools, hosts.
fn mixed(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        let effect = ["allow", "allow", "allow", "ask", "deny"][i % 5];
        let body = match i % 5 {
            0 => format!("kind = \"file_read\"\ntenant = \"t{}\"\npath = [\"projects/p{i}/**\", \"shared/*.csv\"]", i % 50),
            1 => format!("kind = \"exec\"\nargv_prefix = [\"tool{i}\"]\ntier = \"namespace\""),
            2 => format!("kind = \"tool_call\"\ntool = \"tool_{i}_*\"\nagent = \"agent-{}\"", i % 20),
            3 => format!("kind = \"net_connect\"\nhost = \"*.svc{i}.example.com\"\nport = [443, \"8000-8100\"]"),
            _ => format!("kind = [\"file_write\", \"file_delete\"]\npath = \"secrets{i}/**\"\ncost_above = \"{}.50\"", i % 7),
        };
        s += &format!(
            "[[rule]]\nid = \"r{i}\"\neffect = \"{effect}\"\nreason = \"rule {i}\"\n{body}\n\n"
        );
    }
    s
}

/// Worst case: every rule is a path glob on the same kind, none matches.
fn worst(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s += &format!(
            "[[rule]]\nid = \"w{i}\"\neffect = \"allow\"\nreason = \"r\"\nkind = \"file_read\"\npath = \"data/set{i}/**/*.parquet\"\n\n"
        );
    }
    s
}

fn ops() -> Vec<Operation> {
    let p = |t: &str, a: Option<&str>| Principal {
        tenant: t.into(),
        session: None,
        agent: a.map(String::from),
    };
    vec![
        Operation::new(
            p("t7", None),
            OperationArgs::FileRead {
                path: "projects/p7/src/../main.rs".into(),
            },
        ),
        Operation::new(
            p("t9", None),
            OperationArgs::FileRead {
                path: "data/other/x.parquet".into(),
            },
        ),
        Operation::new(
            p("t1", None),
            OperationArgs::Exec {
                argv: vec!["tool996".into(), "--x".into()],
            },
        ),
        Operation::new(
            p("t1", Some("agent-2")),
            OperationArgs::ToolCall {
                tool: "tool_2_search".into(),
                arguments: serde_json::Value::Null,
            },
        ),
        Operation::new(
            p("t1", None),
            OperationArgs::NetConnect {
                host: "a.svc3.example.com".into(),
                port: 8080,
            },
        ),
        Operation::new(
            p("t1", None),
            OperationArgs::FileDelete {
                path: "secrets4/key".into(),
            },
        ),
        Operation::new(
            p("t1", None),
            OperationArgs::RunCode {
                language: Language::Python,
                code: "1".into(),
            },
        ),
    ]
}

fn measure(name: &str, set: &PolicySet, ops: &[Operation]) -> (u128, u128) {
    let now: DateTime<Utc> = DateTime::parse_from_rfc3339("2024-01-01T12:00:00Z")
        .unwrap()
        .into();
    let ctx = Context::new(now);
    // Warm up.
    for _ in 0..2_000 {
        for op in ops {
            black_box(set.evaluate(black_box(op), &ctx));
        }
    }
    let mut samples: Vec<u128> = Vec::with_capacity(200_000);
    for _ in 0..(140_000 / ops.len()).max(1) {
        for op in ops {
            let t = Instant::now();
            black_box(set.evaluate(black_box(op), &ctx));
            samples.push(t.elapsed().as_nanos());
        }
    }
    samples.sort_unstable();
    let q = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    let (p50, p99, max) = (q(0.50), q(0.99), samples[samples.len() - 1]);
    println!(
        "{name:<28} rules={:<5} samples={:<7} p50={:>7.2} us  p99={:>7.2} us  max={:>8.2} us",
        set.rule_count(),
        samples.len(),
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
        max as f64 / 1000.0
    );
    (p50, p99)
}

fn main() {
    let ops = ops();
    for n in [10, 1_000] {
        let set = PolicySet::from_str("bench.toml", &mixed(n)).unwrap();
        measure("mixed", &set, &ops);
    }
    let worst_ops = vec![ops[1].clone()];
    for n in [10, 1_000] {
        let set = PolicySet::from_str("worst.toml", &worst(n)).unwrap();
        measure("worst (1 kind, all globs)", &set, &worst_ops);
    }
    let set = PolicySet::builtin_default().unwrap();
    measure("builtin default", &set, &ops);
    load_default();
}

/// Loading the built-in default policy, as each CLI process does once.
fn load_default() {
    for _ in 0..20 {
        black_box(PolicySet::builtin_default().unwrap());
    }
    let mut samples: Vec<u128> = (0..400)
        .map(|_| {
            let t = Instant::now();
            black_box(PolicySet::builtin_default().unwrap());
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let q = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "{:<28} loads={:<7} p50={:>7.1} us  p90={:>7.1} us",
        "load builtin default",
        samples.len(),
        q(0.5) as f64 / 1000.0,
        q(0.9) as f64 / 1000.0
    );
}
