//! Namespace tier, cold, side by side with plain fork+exec and Debian's `bwrap`; then 100
//! concurrent namespace sandboxes each running `sleep 1`, with host memory per sandbox.
//!
//! Run through `scripts/bench-namespace.sh` (installs bubblewrap if missing), or directly:
//! `cargo bench -p sandboxio-sandbox --bench namespace` (SBX_BENCH_ITERS, default 100;
//! SBX_BENCH_CONCURRENT, default 100). Needs root and user namespaces. Prints markdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandboxio_core::{ExecRequest, ExitStatus, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig};

const PY: &str = "/usr/bin/python3";

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

/// bwrap with flags equivalent to the namespace tier's root: all namespaces, read-only
/// /usr with the merged-/usr symlinks, ld.so.cache, fresh /proc, minimal /dev, tmpfs /tmp,
/// new session, no capabilities. (bwrap sets no cgroup limits.)
fn bwrap(argv: &[&str]) -> Command {
    let mut c = Command::new("bwrap");
    c.args([
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--ro-bind",
        "/etc/ld.so.cache",
        "/etc/ld.so.cache",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--",
    ]);
    c.args(argv);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn plain(argv: &[&str]) -> Command {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// (processes, summed RSS KiB, summed PSS KiB) of every descendant of this process.
fn descendants_memory() -> (usize, u64, u64) {
    let me = std::process::id() as i32;
    let mut parent = std::collections::BTreeMap::<i32, i32>::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        let ppid = stat[i + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        parent.insert(pid, ppid);
    }
    let is_desc = |mut p: i32| {
        for _ in 0..64 {
            match parent.get(&p) {
                Some(&pp) if pp == me => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    let (mut n, mut rss, mut pss) = (0, 0, 0);
    for &pid in parent.keys() {
        if !is_desc(pid) {
            continue;
        }
        n += 1;
        let field = |file: &str, key: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/{file}"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        rss += field("status", "VmRSS:");
        pss += field("smaps_rollup", "Pss:");
    }
    (n, rss, pss)
}

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
    let iters: usize = std::env::var("SBX_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let concurrent: usize = std::env::var("SBX_BENCH_CONCURRENT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Not root: the same runs as that user (a user namespace of the helper's own first),
    // with whatever cgroup the user may have (else rlimits; see the rows' labels).
    let root = sandboxio_sandbox::ids::is_host_root();
    let cfg = SandboxConfig {
        helper_path: Some(env!("CARGO_BIN_EXE_sandboxio-helper").into()),
        cgroups: if root {
            CgroupUsage::Required
        } else {
            CgroupUsage::Auto
        },
        ..SandboxConfig::default()
    };
    let nocg = SandboxConfig {
        cgroups: CgroupUsage::Off,
        ..cfg.clone()
    };
    let have_bwrap = Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());

    let who = if root {
        "root; cgroups: required (memory, pids, cpu limits on)".to_string()
    } else {
        let euid = std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
            .unwrap_or_default();
        format!("uid {euid} (not root); cgroups: where this user may create them, else rlimits")
    };
    println!("iterations per case: {iters}; as {who}; bwrap: {have_bwrap}\n");
    println!("| program | runner | p50 ms | p90 ms | p99 ms | p50 vs bwrap |");
    println!("|---|---|---:|---:|---:|---:|");
    let programs: [(&str, Vec<&str>); 2] = [
        ("/bin/true", vec!["/bin/true"]),
        ("python3 -c pass", vec![PY, "-c", "pass"]),
    ];
    for (label, argv) in &programs {
        let req = ExecRequest::new(argv.iter().copied());
        let ns = |req: &ExecRequest, cfg: &SandboxConfig| {
            let r = rt
                .block_on(run(req, IsolationTier::Namespace, cfg, None))
                .unwrap();
            assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
        };
        for _ in 0..5 {
            plain(argv).output().unwrap();
            if have_bwrap {
                bwrap(argv).output().unwrap();
            }
            ns(&req, &cfg);
            ns(&req, &nocg);
        }
        let (mut p, mut b, mut n, mut nn) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Framework baseline: the process tier without cgroups (supervisor + helper only).
        let mut pt = Vec::new();
        // Interleaved so drift (other builds on this machine) hits every runner alike.
        for _ in 0..iters {
            let t = Instant::now();
            let o = plain(argv).output().unwrap();
            p.push(t.elapsed());
            assert!(o.status.success());
            if have_bwrap {
                let t = Instant::now();
                let o = bwrap(argv).output().unwrap();
                b.push(t.elapsed());
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            }
            let t = Instant::now();
            ns(&req, &cfg);
            n.push(t.elapsed());
            let t = Instant::now();
            ns(&req, &nocg);
            nn.push(t.elapsed());
            let t = Instant::now();
            let r = rt
                .block_on(run(&req, IsolationTier::Process, &nocg, None))
                .unwrap();
            pt.push(t.elapsed());
            assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
        }
        pt.sort();
        p.sort();
        nn.sort();
        b.sort();
        n.sort();
        let base = if b.is_empty() {
            None
        } else {
            Some(pct(&b, 0.5))
        };
        for (name, v) in [
            ("plain fork+exec", &p),
            ("bwrap (no cgroup limits)", &b),
            (
                if root {
                    "namespace tier, cold, cgroup limits"
                } else {
                    "namespace tier, cold, as this user (limits: cgroup if delegated, else rlimits)"
                },
                &n,
            ),
            ("namespace tier, cold, no cgroup (for the breakdown)", &nn),
            ("process tier, no cgroup (framework baseline)", &pt),
        ] {
            if v.is_empty() {
                continue;
            }
            let p50 = pct(v, 0.5);
            println!(
                "| `{label}` | {name} | {p50:.2} | {:.2} | {:.2} | {} |",
                pct(v, 0.9),
                pct(v, 0.99),
                base.map_or("-".to_string(), |b| format!("{:+.2} ms", p50 - b))
            );
        }
    }

    // Concurrency: N namespace sandboxes each running `sleep 1`, all at once.
    let before = mem_available_kib();
    let started = Instant::now();
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..concurrent {
            let cfg = cfg.clone();
            tasks.push(tokio::spawn(async move {
                let mut req = ExecRequest::new(["/bin/sleep", "1"]);
                req.limits.timeout = Duration::from_secs(60);
                run(&req, IsolationTier::Namespace, &cfg, None).await
            }));
        }
        // Sample while every sandbox sleeps.
        let mut sample = (0, 0, 0, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (n, rss, pss) = descendants_memory();
            if n > sample.0 {
                sample = (n, rss, pss, before.saturating_sub(mem_available_kib()));
            }
            if n >= concurrent * 3 || tasks.iter().all(|t| t.is_finished()) {
                break;
            }
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        (out, sample)
    });
    let (out, (procs, rss, pss, avail_delta)) = results;
    let elapsed = started.elapsed();
    let ok = out
        .iter()
        .filter(|r| matches!(r, Ok(r) if r.exit == ExitStatus::Code(0)))
        .count();
    let errors: Vec<String> = out
        .iter()
        .filter_map(|r| match r {
            Ok(r) if r.exit != ExitStatus::Code(0) => Some(format!("{:?}", r.exit)),
            Err(e) => Some(e.to_string()),
            _ => None,
        })
        .take(3)
        .collect();
    let peak_cg: Vec<u64> = out
        .iter()
        .filter_map(|r| r.as_ref().ok()?.usage.peak_memory_bytes)
        .collect();
    let avg_peak = peak_cg.iter().sum::<u64>() / peak_cg.len().max(1) as u64;
    let n = concurrent as u64;
    println!();
    println!("| concurrent `sleep 1` sandboxes | value |");
    println!("|---|---:|");
    println!("| started | {concurrent} |");
    println!("| succeeded (exit 0) | {ok} |");
    println!("| wall time for all | {:.2} s |", elapsed.as_secs_f64());
    println!("| processes seen at the sample (helpers + inits + payloads) | {procs} |");
    println!(
        "| RSS per sandbox (sum of descendants' VmRSS / {n}) | {} KiB |",
        rss / n
    );
    println!(
        "| PSS per sandbox (sum of descendants' Pss / {n}) | {} KiB |",
        pss / n
    );
    println!(
        "| host MemAvailable drop per sandbox (incl. kernel: tmpfs, namespaces, page tables) | {} KiB |",
        avail_delta / n
    );
    println!(
        "| cgroup peak memory per sandbox (memory.max_usage_in_bytes, payload side) | {} KiB |",
        avg_peak / 1024
    );
    if !errors.is_empty() {
        println!("\nfirst failures: {errors:?}");
    }
}
