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

/// What a program can see of its confinement (every line deterministic: the process list
/// is taken by a plain `ls`, with no pipeline running beside it): processes, the init, ids, capabilities,
/// seccomp, no_new_privs, Landlock (`/proc` is read-only to it), the read-only system, the
/// noexec writable places, and the whole mount table with options.
const CONFINEMENT_PROBE: &str = "\
ls -d /proc/[0-9]* > /tmp/procs; echo procs:$(wc -l < /tmp/procs); \
echo init:$(cat /proc/1/comm); \
echo ids:$(id -u):$(id -g); hostname; \
grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status; \
(echo probe > /proc/self/comm) 2>/dev/null && echo comm-written || echo comm-denied; \
(touch /usr/bin/sbx-probe) 2>/dev/null && echo usr-written || echo usr-read-only; \
(touch /etc/sbx-probe) 2>/dev/null && echo etc-written || echo etc-read-only; \
(cat /proc/kcore | head -c1 | wc -c | sed 's/^/kcore:/'); \
cp /bin/true /tmp/t && { /tmp/t 2>/dev/null && echo tmp-exec || echo tmp-noexec; }; \
awk '{print $2, $3, $4}' /proc/self/mounts";

async fn namespace_usable(cfg: &SandboxConfig) -> bool {
    let probe = sandboxio_sandbox::run(
        &ExecRequest::new(["/bin/true"]),
        IsolationTier::Namespace,
        cfg,
        None,
    )
    .await;
    let ok = probe.as_ref().is_ok_and(|r| r.exit.success());
    if !ok {
        eprintln!("SKIP: namespace tier not usable here: {probe:?}");
    }
    ok
}

/// A namespace pool of `size` sandboxes, filled, over a work root of its own, holding the
/// tests' serial lock; `None` (said why) where the namespace tier cannot run here. Bind
/// `_root` and `_serial` by name: a field left to `..` is dropped with the temporary.
struct NsPool {
    pool: WarmPool,
    refill: tokio::task::JoinHandle<()>,
    _root: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn ns_pool(size: usize) -> Option<NsPool> {
    let serial = SERIAL.lock().await;
    let root = tempfile::tempdir().unwrap();
    let cfg = cfg(CgroupUsage::Auto, root.path());
    if !namespace_usable(&cfg).await {
        return None;
    }
    let (pool, refiller) = WarmPool::new(cfg, IsolationTier::Namespace, size).unwrap();
    let refill = tokio::spawn(refiller);
    wait_ready(&pool, size).await;
    Some(NsPool {
        pool,
        refill,
        _root: root,
        _serial: serial,
    })
}

fn pool_outcome(res: &sandboxio_core::ExecResult) -> Option<&str> {
    res.meter.as_ref().and_then(|m| m.pool.as_deref())
}

/// The pooled namespace sandbox (pre-built base, request applied at exec) and a cold one
/// show the program exactly the same confinement, for the default request and for one
/// whose request-time parts differ from the pool's template (tmpfs sizes, exec allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_namespace_is_as_confined_as_cold() {
    let _serial = SERIAL.lock().await;
    let root = tempfile::tempdir().unwrap();
    let cgroups = if sandboxio_sandbox::ids::is_host_root() && cgroups_usable() {
        CgroupUsage::Required
    } else {
        CgroupUsage::Auto
    };
    let cfg = cfg(cgroups, root.path());
    if !namespace_usable(&cfg).await {
        return;
    }
    let (pool, refiller) = WarmPool::new(cfg.clone(), IsolationTier::Namespace, 1).unwrap();
    tokio::spawn(refiller);
    let default = ExecRequest::new(["sh", "-c", CONFINEMENT_PROBE]);
    let mut changed = default.clone();
    changed.limits.tmp_size = ByteSize::mib(5);
    changed.limits.output_size = ByteSize::mib(3);
    changed.allow_exec_in_writable = true;
    for req in [&default, &changed] {
        let cold = sandboxio_sandbox::run(req, IsolationTier::Namespace, &cfg, None)
            .await
            .unwrap();
        wait_ready(&pool, 1).await;
        let warm = pool.exec(req, None).await.unwrap();
        assert_eq!(pool_outcome(&warm), Some("hit"), "{warm:?}");
        assert_eq!(pool_outcome(&cold), None);
        assert_eq!(warm.exit, ExitStatus::Code(0), "{}", warm.stderr_lossy());
        assert_eq!(
            warm.stdout_lossy(),
            cold.stdout_lossy(),
            "pooled and cold sandboxes differ"
        );
        assert_eq!(warm.enforcement.namespaces, cold.enforcement.namespaces);
        assert_eq!(warm.enforcement.landlock_abi, cold.enforcement.landlock_abi);
        assert!(warm.enforcement.seccomp && warm.enforcement.no_new_privs);
        assert_eq!(warm.enforcement.limits, cold.enforcement.limits);
        let out = warm.stdout_lossy();
        for line in [
            "init:sandboxio-helpe",
            "ids:0:0",
            "sandbox",
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
            "CapEff:\t0000000000000000",
            "CapPrm:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "CapAmb:\t0000000000000000",
            "usr-read-only",
            "etc-read-only",
            "kcore:0",
        ] {
            assert!(out.lines().any(|l| l == line), "no `{line}` in:\n{out}");
        }
        // Few processes: the init, the shell and the probe's own; none of the host's.
        let procs: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("procs:"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(procs < 8, "{out}");
        if sandboxio_sandbox::ns::landlock::abi_version().is_some() {
            assert!(out.lines().any(|l| l == "comm-denied"), "{out}");
        }
        let exec_line = if req.allow_exec_in_writable {
            "tmp-exec"
        } else {
            "tmp-noexec"
        };
        assert!(out.lines().any(|l| l == exec_line), "{out}");
        let tmp = out.lines().find(|l| l.starts_with("/tmp tmpfs")).unwrap();
        let kib = req.limits.or_builtin_defaults().tmp_size.bytes() / 1024;
        assert!(tmp.contains(&format!("size={kib}k")), "{tmp}");
        assert_eq!(tmp.contains("noexec"), !req.allow_exec_in_writable, "{tmp}");
        assert_no_cgroup_left(&warm.sandbox_id);
    }
    drop(pool);
}

/// Each pooled namespace sandbox serves one request: files, processes and a changed
/// hostname of the first are not there for the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_namespace_sandboxes_are_never_shared() {
    let Some(NsPool {
        pool,
        _root,
        _serial,
        ..
    }) = ns_pool(2).await
    else {
        return;
    };
    let first = pool
        .exec(
            &ExecRequest::new([
                "sh",
                "-c",
                "for d in /tmp /dev/shm /workspace /output; do echo x > $d/mark; done; \
                 (setsid sleep 9873 &); echo left",
            ]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(pool_outcome(&first), Some("hit"));
    assert!(first.stdout_lossy().contains("left"), "{first:?}");
    // `[s]leep`: the pattern must not match grep's own command line.
    let second = pool
        .exec(
            &ExecRequest::new([
                "sh",
                "-c",
                "ls -A /tmp /dev/shm /workspace /output; \
                 n=98; n=${n}73; \
                 cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c \"[s]leep $n\" \
                 | sed 's/^/sleepers:/'",
            ]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(pool_outcome(&second), Some("hit"));
    assert_ne!(first.sandbox_id, second.sandbox_id);
    let out = second.stdout_lossy();
    assert!(!out.contains("mark"), "{out}");
    assert!(out.lines().any(|l| l == "sleepers:0"), "{out}");
    // And on the host: the first sandbox's daemon died with its pid namespace.
    let sleepers = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x009873\x00")
        })
        .count();
    assert_eq!(sleepers, 0);
    drop(pool);
}

/// Requests the pre-built base cannot serve start cold, and the result says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_misses_name_their_reason() {
    let Some(NsPool {
        pool,
        _root,
        _serial,
        ..
    }) = ns_pool(1).await
    else {
        return;
    };
    let input = tempfile::tempdir().unwrap();
    std::fs::write(input.path().join("in.txt"), "from the host\n").unwrap();
    let mut req = ExecRequest::new(["cat", "/input/in.txt"]);
    req.input_dir = Some(input.path().to_path_buf());
    let res = pool.exec(&req, None).await.unwrap();
    assert_eq!(pool_outcome(&res), Some("miss(input)"));
    assert_eq!(res.stdout_lossy(), "from the host\n");
    // The pooled sandbox was not used up by the miss.
    assert_eq!(pool.ready(), 1);
    let mut req = ExecRequest::new(["cat", "/data/in.txt"]);
    req.mounts = vec![sandboxio_core::Mount {
        host: input.path().to_path_buf(),
        sandbox: PathBuf::from("/data"),
        mode: sandboxio_core::MountMode::Ro,
    }];
    let res = pool.exec(&req, None).await.unwrap();
    assert_eq!(pool_outcome(&res), Some("miss(mounts)"));
    assert_eq!(res.stdout_lossy(), "from the host\n");
    let res = pool.exec(&ExecRequest::new(["true"]), None).await.unwrap();
    assert_eq!(pool_outcome(&res), Some("hit"));
    drop(pool);
}

/// The confinement test again as uid 65534 (the helper then builds its own user namespace
/// first), by re-running this test binary under `setpriv`, where the host allows it.
#[test]
fn pooled_namespace_is_as_confined_as_cold_as_uid_65534() {
    if !sandboxio_sandbox::ids::is_host_root() {
        eprintln!("SKIP: not root, cannot switch to uid 65534");
        return;
    }
    let userns = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["unshare", "-Urm", "true"])
        .status();
    if !userns.is_ok_and(|s| s.success()) {
        eprintln!("SKIP: setpriv missing, or user namespaces not allowed for uid 65534");
        return;
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pooled_namespace_is_as_confined_as_cold",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("TMPDIR", "/tmp")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    assert!(!text.contains("SKIP"), "the child skipped: {text}");
}

/// Staging directories (`sandboxio-ns-<pid>.…`) of the given helper pids under the work
/// roots the helper uses.
fn staging_of(pids: &[i32]) -> Vec<PathBuf> {
    let roots = [
        std::env::temp_dir(),
        sandboxio_sandbox::config::default_work_root(),
    ];
    let mut out = Vec::new();
    for root in roots {
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if pids.iter().any(|pid| {
                name.starts_with(&format!(
                    "{}{pid}.",
                    sandboxio_sandbox::sweep::STAGING_PREFIX
                ))
            }) {
                out.push(e.path());
            }
        }
    }
    out
}

/// Dropping a namespace pool lets its waiting helpers go: each kills its pre-built init,
/// unmounts and removes its staging directory, and exits; nothing of them is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_namespace_pool_leaves_no_init_or_staging_behind() {
    let Some(NsPool {
        pool,
        refill,
        _root,
        _serial,
    }) = ns_pool(2).await
    else {
        return;
    };
    let helpers = helper_children();
    assert_eq!(helpers.len(), 2, "{helpers:?}");
    // Built: each waiting helper has its init (a child) and its staging directory.
    assert_eq!(staging_of(&helpers).len(), 2, "{:?}", staging_of(&helpers));
    drop(pool);
    gone_with_its_refiller(refill).await;
    assert!(
        staging_of(&helpers).is_empty(),
        "{:?}",
        staging_of(&helpers)
    );
}
