//! Process-tier latency vs a plain `std::process::Command`, in the same run.
//!
//! `cargo bench -p sandboxio-sandbox --bench process_tier` (SBX_BENCH_ITERS to change the
//! iteration count, default 200). Prints a markdown table of p50/p90/p99 in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use sandboxio_core::{ExecRequest, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
    // `cargo bench` passes `--bench`; ignore arguments.
    let iters: usize = std::env::var("SBX_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = |cg| SandboxConfig {
        helper_path: Some(env!("CARGO_BIN_EXE_sandboxio-helper").into()),
        cgroups: cg,
        ..SandboxConfig::default()
    };
    let cg_ok = sandboxio_sandbox::probe().cgroups.check.available;
    let python = std::process::Command::new("python3")
        .args(["-c", "pass"])
        .output()
        .is_ok_and(|o| o.status.success());

    let mut programs: Vec<(&str, Vec<&str>)> = vec![("/bin/true", vec!["/bin/true"])];
    if python {
        programs.push(("python3 -c pass", vec!["python3", "-c", "pass"]));
    }
    println!("iterations per case: {iters}; cgroups usable: {cg_ok}\n");
    println!("| program | runner | p50 ms | p90 ms | p99 ms | p50 overhead vs plain |");
    println!("|---|---|---:|---:|---:|---:|");
    for (label, argv) in &programs {
        let req = ExecRequest::new(argv.iter().copied());
        let mut cases: Vec<(&str, Vec<Duration>)> = Vec::new();
        // Warm-up (page cache, helper binary, cgroup base dirs).
        for _ in 0..10 {
            std::process::Command::new(argv[0])
                .args(&argv[1..])
                .output()
                .unwrap();
            rt.block_on(run(
                &req,
                IsolationTier::Process,
                &cfg(CgroupUsage::Off),
                None,
            ))
            .unwrap();
        }
        let mut plain = Vec::with_capacity(iters);
        let mut nocg = Vec::with_capacity(iters);
        let mut withcg = Vec::with_capacity(iters);
        // Interleave the runners so drift affects all of them alike.
        for _ in 0..iters {
            let t = Instant::now();
            let o = std::process::Command::new(argv[0])
                .args(&argv[1..])
                .output()
                .unwrap();
            plain.push(t.elapsed());
            assert!(o.status.success());

            let t = Instant::now();
            let r = rt
                .block_on(run(
                    &req,
                    IsolationTier::Process,
                    &cfg(CgroupUsage::Off),
                    None,
                ))
                .unwrap();
            nocg.push(t.elapsed());
            assert!(r.exit.success());

            if cg_ok {
                let t = Instant::now();
                let r = rt
                    .block_on(run(
                        &req,
                        IsolationTier::Process,
                        &cfg(CgroupUsage::Required),
                        None,
                    ))
                    .unwrap();
                withcg.push(t.elapsed());
                assert!(r.exit.success());
            }
        }
        cases.push(("std::process::Command", plain));
        cases.push(("process tier, no cgroup", nocg));
        if cg_ok {
            cases.push(("process tier, cgroups", withcg));
        }
        let mut base = 0.0;
        for (i, (name, mut v)) in cases.into_iter().enumerate() {
            v.sort();
            let p50 = pct(&v, 0.5);
            if i == 0 {
                base = p50;
            }
            println!(
                "| `{label}` | {name} | {:.2} | {:.2} | {:.2} | {} |",
                p50,
                pct(&v, 0.9),
                pct(&v, 0.99),
                if i == 0 {
                    "-".to_string()
                } else {
                    format!("+{:.2} ms", p50 - base)
                }
            );
        }
    }
}
