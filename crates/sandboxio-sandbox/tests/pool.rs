//! Warm pool against the real helper: single use, same results as a cold run, limits
//! written at use, timeout kills the tree, dropping the pool leaves nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandboxio_core::{ByteSize, ExecRequest, ExitStatus, IsolationTier};
use sandboxio_sandbox::{cgroup, CgroupUsage, SandboxConfig, WarmPool};

fn cfg(cgroups: CgroupUsage, work_root: &Path) -> SandboxConfig {
    SandboxConfig {
        helper_path: Some(PathBuf::from(env!("CARGO_BIN_EXE_sandboxio-helper"))),
        work_root: Some(work_root.to_path_buf()),
        cgroups,
        ..SandboxConfig::default()
    }
}

/// The tests count this process's helper children, so they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cgroups_usable() -> bool {
    let r = sandboxio_sandbox::probe().cgroups;
    if !r.check.available {
        eprintln!("SKIP: cgroups not usable here: {}", r.check.detail);
    }
    r.check.available
}

async fn wait_ready(pool: &WarmPool, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.ready() < n {
        assert!(Instant::now() < deadline, "pool never filled: {pool:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn assert_no_cgroup_left(sandbox_id: &str) {
    for base in cgroup::base_dirs(cgroup::host_layout()) {
        let dir = base.join(sandbox_id);
        assert!(!dir.exists(), "cgroup left behind: {}", dir.display());
    }
}

/// Pooled helpers still alive (children of this test process).
fn helper_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let mut it = rest.split_whitespace();
        let _state = it.next();
        let ppid: i32 = it.next().unwrap().parse().unwrap();
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == me && String::from_utf8_lossy(&cmd).contains("__sandboxio-helper") {
            out.push(pid);
        }
    }
    out
}

/// After the pool is dropped: its refiller ends by itself, and then no helper of the pool
/// is left (the last reference destroys what was waiting, killed and reaped). Under load
/// the refiller may be mid-fill when the pool goes, so it is awaited, not raced.
async fn gone_with_its_refiller(refill: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(60), refill)
        .await
        .expect("the refiller did not end after the pool was dropped")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !helper_children().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(helper_children().is_empty(), "{:?}", helper_children());
}

fn empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).unwrap().next().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pooled_sandbox_serves_one_exec_and_is_destroyed() {
    let _serial = SERIAL.lock().await;
    let root = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Auto, root.path()),
        IsolationTier::Process,
        2,
    )
    .unwrap();
    let refill = tokio::spawn(refiller);
    wait_ready(&pool, 2).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        let mut req = ExecRequest::new([
            "sh",
            "-c",
            "cat; echo \" $HOME $SANDBOX_OUTPUT\"; echo err >&2; ls \"$HOME\"; exit 3",
        ]);
        req.stdin = Some(format!("in{i}").into_bytes());
        req.files.insert("f.txt".into(), b"x".to_vec());
        let res = pool.exec(&req, None).await.unwrap();
        assert_eq!(res.exit, ExitStatus::Code(3), "{res:?}");
        assert!(
            res.stdout_lossy().starts_with(&format!("in{i} ")),
            "{}",
            res.stdout_lossy()
        );
        assert!(
            res.stdout_lossy().contains("f.txt"),
            "{}",
            res.stdout_lossy()
        );
        assert_eq!(res.stderr_lossy(), "err\n");
        let home = res
            .stdout_lossy()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        assert!(!Path::new(&home).exists(), "workspace {home} left behind");
        assert_no_cgroup_left(&res.sandbox_id);
        assert!(!ids.contains(&res.sandbox_id), "sandbox reused");
        ids.push(res.sandbox_id);
        // Without stdin data, stdin is at EOF (not a hang).
        let res = pool
            .exec(&ExecRequest::new(["sh", "-c", "cat; echo done"]), None)
            .await
            .unwrap();
        assert_eq!(res.stdout_lossy(), "done\n");
        assert!(!ids.contains(&res.sandbox_id), "sandbox reused");
        ids.push(res.sandbox_id);
    }
    wait_ready(&pool, 2).await;
    drop(pool);
    // The refiller ends by itself once the pool is gone.
    tokio::time::timeout(Duration::from_secs(5), refill)
        .await
        .unwrap()
        .unwrap();
    assert!(helper_children().is_empty(), "{:?}", helper_children());
    assert!(empty_dir(root.path()), "workspaces left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_run_with_cgroup_gets_the_requests_limits() {
    let _serial = SERIAL.lock().await;
    if !cgroups_usable() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Required, root.path()),
        IsolationTier::Process,
        1,
    )
    .unwrap();
    let refill = tokio::spawn(refiller);
    wait_ready(&pool, 1).await;
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived",
    ]);
    req.limits.memory = ByteSize::mib(64);
    req.limits.timeout = Duration::from_secs(30);
    let res = pool.exec(&req, None).await.unwrap();
    assert!(res.oom_killed, "{res:?}");
    assert!(!res.stdout_lossy().contains("survived"));
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.starts_with("memory=64MiB (cgroup")));
    assert_no_cgroup_left(&res.sandbox_id);
    drop(pool);
    gone_with_its_refiller(refill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_timeout_kills_a_setsid_grandchild() {
    let _serial = SERIAL.lock().await;
    let root = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Auto, root.path()),
        IsolationTier::Process,
        1,
    )
    .unwrap();
    let refill = tokio::spawn(refiller);
    wait_ready(&pool, 1).await;
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        r#"(setsid sh -c 'sleep 1000 & echo $! > "$SANDBOX_OUTPUT/gpid"' &) ; sleep 1000"#,
    ]);
    req.output_dir = Some(out.path().to_path_buf());
    req.limits.timeout = Duration::from_millis(1000);
    let res = pool.exec(&req, None).await.unwrap();
    assert!(res.timed_out, "{res:?}");
    let gpid: i32 = std::fs::read_to_string(out.path().join("gpid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    while Path::new(&format!("/proc/{gpid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stat = std::fs::read_to_string(format!("/proc/{gpid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "grandchild survived"
    );
    drop(pool);
    gone_with_its_refiller(refill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_refiller_the_pool_starts_cold_and_dropping_a_full_pool_cleans_up() {
    let _serial = SERIAL.lock().await;
    let root = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Auto, root.path()),
        IsolationTier::Process,
        3,
    )
    .unwrap();
    let res = pool
        .exec(&ExecRequest::new(["echo", "cold"]), None)
        .await
        .unwrap();
    assert_eq!(res.stdout_lossy(), "cold\n");
    let refill = tokio::spawn(refiller);
    wait_ready(&pool, 3).await;
    assert_eq!(helper_children().len(), 3);
    assert!(!empty_dir(root.path()));
    drop(pool);
    tokio::time::timeout(Duration::from_secs(5), refill)
        .await
        .unwrap()
        .unwrap();
    assert!(helper_children().is_empty(), "{:?}", helper_children());
    assert!(empty_dir(root.path()), "workspaces left behind");
}

#[test]
fn an_unbuilt_tier_is_refused_up_front() {
    let root = tempfile::tempdir().unwrap();
    assert!(WarmPool::new(
        cfg(CgroupUsage::Off, root.path()),
        IsolationTier::Microvm,
        1
    )
    .is_err());
}

/// The pooled payload is in every one of its sandbox's cgroups (inherited from the helper
/// that joined them while waiting, or cloned into the cgroup2 leaf), and the helper is not
/// in the kill cgroup (it survives to report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_payload_is_in_the_sandbox_cgroups() {
    let _serial = SERIAL.lock().await;
    if !cgroups_usable() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Required, root.path()),
        IsolationTier::Process,
        1,
    )
    .unwrap();
    tokio::spawn(refiller);
    wait_ready(&pool, 1).await;
    let req = ExecRequest::new(["cat", "/proc/self/cgroup"]);
    let res = pool.exec(&req, None).await.unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0), "{res:?}");
    let want = format!("/{}/{}", cgroup::CGROUP_DIR, res.sandbox_id);
    let layout = cgroup::host_layout();
    let mut checked = 0;
    for line in res.stdout_lossy().lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let ours = if ctrls.is_empty() {
            layout.unified.is_some()
        } else {
            // The controllers a sandbox uses (freezer only when there is no cgroup2).
            ctrls.split(',').any(|c| {
                ["memory", "pids", "cpu", "cpuacct"].contains(&c) && layout.v1.contains_key(c)
            })
        };
        if ours {
            assert!(
                path.ends_with(&want),
                "{line} not in {want}: {}",
                res.stdout_lossy()
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no sandbox cgroup seen: {}",
        res.stdout_lossy()
    );
    assert_no_cgroup_left(&res.sandbox_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_pids_limit_stops_a_bounded_fork_loop() {
    let _serial = SERIAL.lock().await;
    if !cgroups_usable() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (pool, refiller) = WarmPool::new(
        cfg(CgroupUsage::Required, root.path()),
        IsolationTier::Process,
        1,
    )
    .unwrap();
    tokio::spawn(refiller);
    wait_ready(&pool, 1).await;
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        "i=0; ok=0; while [ $i -lt 200 ]; do sleep 3 & if [ $? -eq 0 ]; then ok=$((ok+1)); fi; i=$((i+1)); done; echo started=$ok; wait",
    ]);
    req.limits.pids = 32;
    req.limits.timeout = Duration::from_secs(20);
    let res = pool.exec(&req, None).await.unwrap();
    let forked_everything =
        res.stdout_lossy().contains("started=200") && res.exit == ExitStatus::Code(0);
    assert!(!forked_everything, "pids limit not enforced: {res:?}");
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.starts_with("pids=32 (cgroup")));
    assert_no_cgroup_left(&res.sandbox_id);
}

/// Namespace tier from the pool: the init inherits the helper's cgroups and is cloned into
/// the cgroup2 leaf; a memory bomb is still OOM-killed and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_namespace_memory_bomb_is_oom_killed() {
    let _serial = SERIAL.lock().await;
    if !cgroups_usable() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let cfg = cfg(CgroupUsage::Required, root.path());
    let probe = sandboxio_sandbox::run(
        &ExecRequest::new(["/bin/true"]),
        IsolationTier::Namespace,
        &cfg,
        None,
    )
    .await;
    if !probe.as_ref().is_ok_and(|r| r.exit.success()) {
        eprintln!("SKIP: namespace tier not usable here: {probe:?}");
        return;
    }
    let (pool, refiller) = WarmPool::new(cfg, IsolationTier::Namespace, 1).unwrap();
    tokio::spawn(refiller);
    wait_ready(&pool, 1).await;
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived",
    ]);
    req.limits.memory = ByteSize::mib(64);
    req.limits.timeout = Duration::from_secs(30);
    let res = pool.exec(&req, None).await.unwrap();
    assert!(res.oom_killed, "{res:?}");
    assert!(!res.stdout_lossy().contains("survived"));
    assert_no_cgroup_left(&res.sandbox_id);
}
