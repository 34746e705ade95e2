#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Total throughput of `sandboxio serve` with one and with three replicas on one
//! PostgreSQL store, against one replica on SQLite, in one run on this machine.
//!
//! Each case starts its replicas (release build, the server tests' harness: process tier,
//! loopback, each replica its own state directory and audit trail with fsync `always`, the
//! default), creates one sandbox per client on the replica that client talks to, and then
//! 12 clients send `exec /bin/true` back to back until 600 have been answered; throughput
//! is answered operations per second of wall time, every answer checked to be a run. The
//! PostgreSQL cluster is a throwaway one on the same disk (Unix socket) with `fsync` and
//! `synchronous_commit` on. Cases alternate over rounds, so load from elsewhere hits all.
//!
//! Run: `cargo bench -p sandboxio-cli --bench replicas` (`SBX_BENCH_ROUNDS`, default 2).
//! Prints markdown; says why and exits when PostgreSQL is not installed.

#[path = "../tests/server/harness.rs"]
mod harness;
#[path = "../../sandboxio-gateway/tests/support/pgcluster.rs"]
mod pgcluster;

use std::time::Instant;

use harness::Server;
use serde_json::{json, Value};

const CLIENTS: usize = 12;
const OPS: usize = 600;

#[derive(Clone, Copy)]
enum Case {
    Sqlite,
    Postgres(usize),
}

impl Case {
    fn name(self) -> String {
        match self {
            Case::Sqlite => "1 replica, SQLite".into(),
            Case::Postgres(1) => "1 replica, PostgreSQL".into(),
            Case::Postgres(n) => format!("{n} replicas, PostgreSQL"),
        }
    }
}

fn start(case: Case, cluster: &pgcluster::Cluster) -> Vec<Server> {
    match case {
        Case::Sqlite => vec![Server::start(&[])],
        Case::Postgres(n) => {
            let url = cluster.database();
            (0..n)
                .map(|_| {
                    Server::start_with(&[], |dir| {
                        std::fs::write(
                            dir.join("config.toml"),
                            format!("[state]\nurl = \"{url}\"\n"),
                        )
                        .unwrap()
                    })
                })
                .collect()
        }
    }
}

/// Answered operations per second.
fn run(case: Case, cluster: &pgcluster::Cluster) -> f64 {
    let servers = start(case, cluster);
    let key = servers[0].key("bench", "all");
    let boxes: Vec<(usize, String)> = (0..CLIENTS)
        .map(|c| {
            let s = c % servers.len();
            (s, servers[s].sandbox(&key))
        })
        .collect();
    // Warm-up: one operation per client.
    for (s, id) in &boxes {
        let r = servers[*s].post(
            &key,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["true"]}),
        );
        assert_eq!(r.status(), 200);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t = Instant::now();
    std::thread::scope(|sc| {
        for (s, id) in &boxes {
            let (srv, key, next) = (&servers[*s], &key, &next);
            sc.spawn(move || {
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < OPS {
                    let r = srv.post(
                        key,
                        &format!("/v1/sandboxes/{id}/exec"),
                        &json!({"argv": ["true"]}),
                    );
                    let st = r.status();
                    let v: Value = r.json().unwrap();
                    assert!(st == 200 && v["record"]["status"] == "ok", "{st} {v}");
                }
            });
        }
    });
    OPS as f64 / t.elapsed().as_secs_f64()
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let cluster = match pgcluster::Cluster::durable() {
        Ok(c) => c,
        Err(why) => {
            println!("SKIP replicas: {why}");
            return;
        }
    };
    {
        let mut c = postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).unwrap();
        let fsync: String = c.query_one("SHOW fsync", &[]).unwrap().get(0);
        let commit: String = c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
        assert_eq!((fsync.as_str(), commit.as_str()), ("on", "on"));
    }
    let rounds: usize = std::env::var("SBX_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let cases = [Case::Sqlite, Case::Postgres(1), Case::Postgres(3)];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    println!("load average before: {}", load());
    for _ in 0..rounds {
        for (i, c) in cases.iter().enumerate() {
            results[i].push(run(*c, &cluster));
        }
    }
    println!("load average after: {}\n", load());
    println!(
        "{CLIENTS} clients, {OPS} `exec /bin/true` (process tier) per case and round, {rounds} round(s)\n\n\
         | case | ops/s per round | mean ops/s | vs 1 replica on SQLite |\n|---|---|---:|---:|"
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let base = mean(&results[0]);
    for (i, c) in cases.iter().enumerate() {
        let per: Vec<String> = results[i].iter().map(|r| format!("{r:.0}")).collect();
        let m = mean(&results[i]);
        println!(
            "| {} | {} | {m:.0} | {:.2}x |",
            c.name(),
            per.join(", "),
            m / base
        );
    }
    println!(
        "\n3 replicas / 1 replica on PostgreSQL: {:.2}x",
        mean(&results[2]) / mean(&results[1])
    );
}
