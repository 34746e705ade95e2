#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End to end, from process start to exit, side by side in one run:
//!
//! - `bwrap --unshare-all ... /bin/true`: the reference (user, mount, pid, net, ipc, uts and
//!   cgroup namespaces, a read-only /usr, fresh /proc, /dev and /tmp);
//! - `sandboxio run -- /bin/true`: the default policy and config (namespace tier with its
//!   limits), a fresh state directory (SQLite with `synchronous=FULL`, the audit trail);
//! - a denied run: `sandboxio run --tier process -- /bin/true`, which the default policy
//!   does not allow (policy deny, its record written, exit 120).
//!
//! The cases alternate within each iteration, so load from other work falls on all of them
//! alike. `sandboxio` runs from a copy of the build (with the `sandboxio-helper` beside it,
//! when there is one), as an install puts it: the linker's own output file started about a
//! tenth slower than a copy of the same bytes (a denied run, 100 each: 5.97 against
//! 5.36 ms), an effect of how the file came into the page cache, not of the program. Run: `cargo bench -p sandboxio-cli --bench e2e` (SBX_BENCH_N iterations, default
//! 60). Prints a markdown table with p50/p90 and ratios against bwrap.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

fn bwrap() -> Command {
    let mut c = Command::new("bwrap");
    c.args([
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "/bin/true",
    ]);
    c
}

/// Copies the build's binaries into `dir`, as an install does; returns the CLI's path.
fn install(dir: &Path) -> PathBuf {
    let from = Path::new(BIN);
    let to = dir.join("sandboxio");
    std::fs::copy(from, &to).unwrap();
    let helper = from.with_file_name("sandboxio-helper");
    if helper.exists() {
        std::fs::copy(&helper, dir.join("sandboxio-helper")).unwrap();
    }
    to
}

fn sandboxio(bin: &Path, state: &Path, tier: Option<&str>) -> Command {
    let mut c = Command::new(bin);
    c.arg("run").arg("--state-dir").arg(state);
    if let Some(t) = tier {
        c.args(["--tier", t]);
    }
    c.args(["--", "/bin/true"]).env_remove("SBX_STATE_DIR");
    c
}

/// Runs the command once; its exit status must be `want`.
fn time(mut c: Command, want: i32) -> Duration {
    let t = Instant::now();
    let st = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let d = t.elapsed();
    assert_eq!(st.code(), Some(want), "{c:?}");
    d
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let n: usize = std::env::var("SBX_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    if Command::new("bwrap")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        println!("skipped: bwrap is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let bin = install(dir.path());
    // Warm up: the state directory, the trail, the page cache.
    for _ in 0..3 {
        time(bwrap(), 0);
        time(sandboxio(&bin, &state, None), 0);
        time(sandboxio(&bin, &state, Some("process")), 120);
    }
    let (mut b, mut s, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        b.push(time(bwrap(), 0));
        s.push(time(sandboxio(&bin, &state, None), 0));
        d.push(time(sandboxio(&bin, &state, Some("process")), 120));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (b50, b90) = (pct(&mut b, 0.5), pct(&mut b, 0.9));
    let (s50, s90) = (pct(&mut s, 0.5), pct(&mut s, 0.9));
    let (d50, d90) = (pct(&mut d, 0.5), pct(&mut d, 0.9));
    println!(
        "{n} iterations each, interleaved; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("| case | p50 ms | p90 ms | p50 / bwrap |");
    println!("|---|---|---|---|");
    println!("| `bwrap --unshare-all ... /bin/true` | {b50:.2} | {b90:.2} | 1.00 |");
    println!(
        "| `sandboxio run -- /bin/true` (namespace tier, default limits) | {s50:.2} | {s90:.2} | {:.2} |",
        s50 / b50
    );
    println!(
        "| denied: `sandboxio run --tier process -- /bin/true` | {d50:.2} | {d90:.2} | {:.2} |",
        d50 / b50
    );
}
