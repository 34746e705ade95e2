//! Profile one process-tier run of `/bin/true` (for `strace -f -tt` / `perf`):
//! `cargo run --release -p sandboxio-sandbox --example profile_one [N] [cg]`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use sandboxio_core::{ExecRequest, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig};

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let cg = if args.next().as_deref() == Some("cg") {
        CgroupUsage::Required
    } else {
        CgroupUsage::Off
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = SandboxConfig {
        cgroups: cg,
        ..SandboxConfig::default()
    };
    let req = ExecRequest::new(["/bin/true"]);
    // warm-up
    rt.block_on(run(&req, IsolationTier::Process, &cfg, None))
        .unwrap();
    for _ in 0..n {
        let t = Instant::now();
        let r = rt
            .block_on(run(&req, IsolationTier::Process, &cfg, None))
            .unwrap();
        eprintln!("run: {:?} exit {:?}", t.elapsed(), r.exit);
    }
}
