//! Warm pool vs cold start vs plain fork+exec, in the same run.
//!
//! `cargo bench -p sandboxio-sandbox --bench warm_pool` (SBX_BENCH_ITERS, default 200), or
//! `scripts/bench-warm-pool.sh` for the same binary as root and as uid 65534.
//! Each iteration times one exec of `/bin/true` per runner, runners interleaved. Before a
//! warm-pool exec the pool is refilled (not timed): the figure is "a pooled sandbox is
//! ready", i.e. the steady state when execs arrive slower than the refill rate. Every
//! timed warm exec must be a pool hit (`meter.pool`), or the bench stops. A namespace
//! pool pre-builds its namespaces (see `ns::prebuilt`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use sandboxio_core::{ExecRequest, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig, WarmPool};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
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
        // `SBX_BENCH_HELPER`: another build's helper, to compare two builds' bench binaries
        // copied elsewhere (each with its own helper).
        helper_path: Some(
            std::env::var_os("SBX_BENCH_HELPER")
                .map_or_else(|| env!("CARGO_BIN_EXE_sandboxio-helper").into(), Into::into),
        ),
        cgroups: cg,
        ..SandboxConfig::default()
    };
    let report = sandboxio_sandbox::probe();
    let cg_ok = report.cgroups.check.available;
    let req = ExecRequest::new(["/bin/true"]);
    // Namespace tier only where it works on this host.
    let ns_ok = rt
        .block_on(run(
            &req,
            IsolationTier::Namespace,
            &cfg(CgroupUsage::Auto),
            None,
        ))
        .is_ok_and(|r| r.exit.success());

    let mut setups: Vec<(String, IsolationTier, CgroupUsage)> =
        vec![("process".into(), IsolationTier::Process, CgroupUsage::Off)];
    if cg_ok {
        setups.push((
            "process + cgroups".into(),
            IsolationTier::Process,
            CgroupUsage::Required,
        ));
    }
    if ns_ok {
        setups.push((
            if cg_ok {
                "namespace + cgroups".into()
            } else {
                "namespace".into()
            },
            IsolationTier::Namespace,
            if cg_ok {
                CgroupUsage::Required
            } else {
                CgroupUsage::Auto
            },
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    println!(
        "uid {uid}; iterations per case: {iters}; cgroups usable: {cg_ok}; namespace tier: {ns_ok}\n"
    );
    println!("| program | runner | p50 ms | p90 ms | p99 ms | p50 vs plain |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut plain = Vec::with_capacity(iters * setups.len());
    let mut rows: Vec<(String, Vec<Duration>)> = Vec::new();
    for (name, tier, cg) in &setups {
        let c = cfg(*cg);
        let (pool, refiller) = rt
            .block_on(async { WarmPool::new(c.clone(), *tier, 4) })
            .unwrap();
        rt.spawn(refiller);
        let fill = |pool: &WarmPool| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while pool.ready() < pool.size() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // Warm-up.
        for _ in 0..10 {
            fill(&pool);
            rt.block_on(pool.exec(&req, None)).unwrap();
            rt.block_on(run(&req, *tier, &c, None)).unwrap();
        }
        let mut cold = Vec::with_capacity(iters);
        let mut warm = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            let o = std::process::Command::new("/bin/true").output().unwrap();
            plain.push(t.elapsed());
            assert!(o.status.success());

            let t = Instant::now();
            let r = rt.block_on(run(&req, *tier, &c, None)).unwrap();
            cold.push(t.elapsed());
            assert!(r.exit.success());

            fill(&pool);
            let t = Instant::now();
            let r = rt.block_on(pool.exec(&req, None)).unwrap();
            warm.push(t.elapsed());
            assert!(r.exit.success());
            let outcome = r.meter.as_ref().and_then(|m| m.pool.as_deref());
            assert_eq!(outcome, Some("hit"), "a timed warm exec was not a pool hit");
        }
        drop(pool);
        rows.push((format!("{name}, cold"), cold));
        rows.push((format!("{name}, warm pool (size 4)"), warm));
    }
    plain.sort();
    let base = pct(&plain, 0.5);
    println!(
        "| `/bin/true` | std::process::Command (fork+exec+wait) | {:.2} | {:.2} | {:.2} | 1.00x |",
        base,
        pct(&plain, 0.9),
        pct(&plain, 0.99)
    );
    for (name, mut v) in rows {
        v.sort();
        let p50 = pct(&v, 0.5);
        println!(
            "| `/bin/true` | {name} | {:.2} | {:.2} | {:.2} | {:.2}x |",
            p50,
            pct(&v, 0.9),
            pct(&v, 0.99),
            p50 / base
        );
    }
}
