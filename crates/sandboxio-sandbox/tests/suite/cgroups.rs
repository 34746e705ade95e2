//! Cgroup limits on this host (root only; skipped with a printed reason otherwise).

use std::time::Duration;

use sandboxio_core::{ByteSize, ExitStatus};
use sandboxio_sandbox::CgroupUsage;

use super::{cgroups_usable, run_process, sh};

#[tokio::test]
async fn memory_bomb_is_oom_killed() {
    if !cgroups_usable() {
        return;
    }
    let mut req = sh("x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived");
    req.limits.memory = ByteSize::mib(64);
    req.limits.timeout = Duration::from_secs(30);
    let res = run_process(&req, CgroupUsage::Required, None)
        .await
        .unwrap();
    assert!(res.oom_killed, "{res:?}");
    assert!(!res.stdout_lossy().contains("survived"));
    assert!(res.enforcement.cgroup.is_some());
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.starts_with("memory=64MiB (cgroup")));
}

#[tokio::test]
async fn peak_memory_and_cpu_are_read_back() {
    if !cgroups_usable() {
        return;
    }
    // ~80 MB held in a shell variable.
    let mut req = sh("x=$(head -c 80000000 /dev/zero | tr '\\0' a); echo ${#x}");
    req.limits.memory = ByteSize::mib(512);
    let res = run_process(&req, CgroupUsage::Required, None)
        .await
        .unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0), "{}", res.stderr_lossy());
    assert_eq!(res.stdout_lossy().trim(), "80000000");
    assert!(!res.oom_killed);
    let peak = res.usage.peak_memory_bytes.unwrap();
    assert!(peak >= 80_000_000, "peak {peak}");
    assert!(res.usage.cpu_time_ms.is_some());
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.contains("cpuacct.usage")
            || l.contains("cpu.stat")
            || l.contains("usage from cgroup")));
}

#[tokio::test]
async fn pids_limit_stops_a_bounded_fork_loop() {
    if !cgroups_usable() {
        return;
    }
    // At most 200 children; with pids.max=32 the shell must fail to fork long before that.
    let mut req = sh(
        "i=0; ok=0; while [ $i -lt 200 ]; do sleep 3 & if [ $? -eq 0 ]; then ok=$((ok+1)); fi; i=$((i+1)); done; echo started=$ok; wait",
    );
    req.limits.pids = 32;
    req.limits.timeout = Duration::from_secs(20);
    let res = run_process(&req, CgroupUsage::Required, None)
        .await
        .unwrap();
    let forked_everything =
        res.stdout_lossy().contains("started=200") && res.exit == ExitStatus::Code(0);
    assert!(!forked_everything, "pids limit not enforced: {res:?}");
    assert!(
        res.stderr_lossy().to_lowercase().contains("fork") || res.exit != ExitStatus::Code(0),
        "{res:?}"
    );
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.starts_with("pids=32 (cgroup")));
}

#[tokio::test]
async fn cleanup_stale_removes_old_empty_cgroups_and_keeps_young_ones() {
    if !cgroups_usable() {
        return;
    }
    // A crashed run's leftover (empty, two minutes old) and a young empty one, in every
    // controller's directory.
    use sandboxio_sandbox::cgroup::{base_dirs, host_layout};
    let mut made = Vec::new();
    for base in base_dirs(host_layout()) {
        if std::fs::create_dir_all(&base).is_err() {
            continue;
        }
        let stale = base.join(format!("test-stale-{}", std::process::id()));
        let young = base.join(format!("test-young-{}", std::process::id()));
        std::fs::create_dir(&stale).unwrap();
        std::fs::create_dir(&young).unwrap();
        let old = std::time::SystemTime::now() - Duration::from_secs(120);
        std::fs::File::open(&stale)
            .and_then(|f| f.set_modified(old))
            .unwrap();
        made.push((stale, young));
    }
    let removed = sandboxio_sandbox::cgroup::cleanup_stale();
    for d in &removed {
        assert!(!d.exists());
    }
    for (stale, young) in &made {
        assert!(removed.contains(stale), "{stale:?} not swept: {removed:?}");
        assert!(young.exists(), "{young:?} is younger than the stale age");
        let _ = std::fs::remove_dir(young);
    }
    assert!(!made.is_empty(), "no cgroup directory to sweep");
}

/// Removing a sandbox's cgroup: an empty one goes at once; one that still holds a process
/// (a run whose helper died before killing its tree) is emptied by the kill method first,
/// and every directory goes either way.
#[test]
fn remove_empties_what_is_left_and_removes_every_directory() {
    if !cgroups_usable() {
        return;
    }
    use sandboxio_sandbox::cgroup;
    let limits = sandboxio_core::Limits::default();
    let id = |what: &str| format!("test-remove-{what}-{}", std::process::id());

    let empty = cgroup::plan(cgroup::host_layout(), &id("empty"), &limits).unwrap();
    cgroup::create(&empty).unwrap();
    assert!(empty.dirs.iter().all(|d| d.is_dir()));
    cgroup::remove(&empty).unwrap();
    assert!(empty.dirs.iter().all(|d| !d.exists()), "{:?}", empty.dirs);

    let held = cgroup::plan(cgroup::host_layout(), &id("held"), &limits).unwrap();
    cgroup::create(&held).unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    cgroup::join(&held.dirs, child.id() as i32).unwrap();
    assert!(!cgroup::is_empty(&held));
    cgroup::remove(&held).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "the process left in the cgroup was not killed: {status:?}"
    );
    assert!(held.dirs.iter().all(|d| !d.exists()), "{:?}", held.dirs);
}

/// `pids = N` is N processes of the caller's program in every tier: the namespace tier's
/// own init (pid 1 inside, in the same cgroups) is not counted against it. With
/// `pids = 1` a program that forks nothing runs; with `pids = 3` a shell starts exactly two
/// background children and the third fork fails.
#[tokio::test]
async fn the_namespace_init_does_not_use_up_the_callers_pids() {
    if !cgroups_usable() {
        return;
    }
    let host = sandboxio_sandbox::probe();
    if !host.user_namespaces.available {
        eprintln!("SKIP: no user namespaces: {}", host.user_namespaces.detail);
        return;
    }
    let ns = |req: sandboxio_core::ExecRequest| async move {
        let res = sandboxio_sandbox::run(
            &req,
            sandboxio_core::IsolationTier::Namespace,
            &super::cfg(CgroupUsage::Required),
            None,
        )
        .await;
        if let Ok(r) = &res {
            super::assert_no_cgroup_left(&r.sandbox_id);
        }
        res
    };
    let mut one = sandboxio_core::ExecRequest::new(["/bin/true"]);
    one.limits.pids = 1;
    let res = ns(one).await.unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0), "{res:?}");
    assert!(res
        .enforcement
        .limits
        .iter()
        .any(|l| l.starts_with("pids=1 (cgroup")));

    // The shell is one process and each `sleep &` another: three fit in `pids = 3` and
    // not in `pids = 2` (dash gives up at the failed fork).
    let two_children = |pids| {
        let mut r = sh("sleep 2 & sleep 2 & echo started");
        r.limits.pids = pids;
        r.limits.timeout = Duration::from_secs(20);
        r
    };
    let res = ns(two_children(3)).await.unwrap();
    assert_eq!(res.stdout_lossy().trim(), "started", "{res:?}");
    let res = ns(two_children(2)).await.unwrap();
    assert_eq!(res.stdout_lossy().trim(), "", "{res:?}");
    assert!(res.stderr_lossy().contains("fork"), "{res:?}");
}
