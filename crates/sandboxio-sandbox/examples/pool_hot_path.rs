//! What a namespace-tier exec does once its request is known, cold against pooled (for
//! `strace -f`): `cargo run -p sandboxio-sandbox --example pool_hot_path [N]`, then
//! `scripts/hot-path-syscalls.py TRACE` counts the syscalls between the markers.
//!
//! Each round prints `HOT-BEGIN cold` / `HOT-END cold` around one cold `run()`, and
//! `HOT-BEGIN warm` / `HOT-END warm` around one `WarmPool::exec` on a pool that was filled
//! and whose refiller was then stopped, so nothing but the exec runs in the window.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use sandboxio_core::{ExecRequest, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig, WarmPool};

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = SandboxConfig {
        cgroups: CgroupUsage::Auto,
        ..SandboxConfig::default()
    };
    let req = ExecRequest::new(["/bin/true"]);
    let tier = IsolationTier::Namespace;
    rt.block_on(run(&req, tier, &cfg, None)).unwrap();
    for _ in 0..n {
        eprintln!("HOT-BEGIN cold");
        let r = rt.block_on(run(&req, tier, &cfg, None)).unwrap();
        eprintln!("HOT-END cold");
        assert!(r.exit.success());

        let (pool, refiller) = WarmPool::new(cfg.clone(), tier, 1).unwrap();
        let refill = rt.spawn(refiller);
        let deadline = Instant::now() + Duration::from_secs(30);
        while pool.ready() < 1 {
            assert!(Instant::now() < deadline, "the pool never filled");
            std::thread::sleep(Duration::from_millis(2));
        }
        refill.abort();
        let _ = rt.block_on(refill);
        eprintln!("HOT-BEGIN warm");
        let r = rt.block_on(pool.exec(&req, None)).unwrap();
        eprintln!("HOT-END warm");
        assert!(r.exit.success());
        let hit = r.meter.as_ref().and_then(|m| m.pool.as_deref());
        assert_eq!(hit, Some("hit"));
        drop(pool);
    }
}
