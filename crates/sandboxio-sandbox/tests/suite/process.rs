//! Process tier against the real helper: tree kill, output caps, env, exit status, cancel.

use std::time::{Duration, Instant};

use sandboxio_core::{ByteSize, ErrorCode, ExitStatus, IsolationTier};
use sandboxio_sandbox::{run, CancelToken, CgroupUsage};

use super::{alive, cfg, read_pid, run_process, sh, wait_dead};

fn out_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

async fn double_forked_grandchild_dies_on_timeout(cg: CgroupUsage) {
    let out = out_dir();
    let mut req =
        sh(r#"(setsid sh -c 'sleep 1000 & echo $! > "$SANDBOX_OUTPUT/gpid"' &) ; sleep 1000"#);
    req.output_dir = Some(out.path().to_path_buf());
    req.limits.timeout = Duration::from_millis(1500);
    let t = Instant::now();
    let res = run_process(&req, cg, None).await.unwrap();
    assert!(res.timed_out, "{res:?}");
    assert_eq!(res.exit, ExitStatus::Signal(9));
    assert!(t.elapsed() < Duration::from_secs(5));
    let gpid = read_pid(&out.path().join("gpid"), Duration::from_secs(1));
    assert!(
        wait_dead(gpid, Duration::from_millis(500)),
        "grandchild {gpid} survived"
    );
}

#[tokio::test]
async fn setsid_grandchild_dies_on_timeout_without_cgroup() {
    double_forked_grandchild_dies_on_timeout(CgroupUsage::Off).await;
}

#[tokio::test]
async fn setsid_grandchild_dies_on_timeout_with_cgroup() {
    if !super::cgroups_usable() {
        return;
    }
    double_forked_grandchild_dies_on_timeout(CgroupUsage::Required).await;
}

#[tokio::test]
async fn daemon_outliving_the_command_is_killed() {
    let out = out_dir();
    let mut req = sh(r#"(setsid sleep 1000 & echo $! > "$SANDBOX_OUTPUT/dpid") ; exit 0"#);
    req.output_dir = Some(out.path().to_path_buf());
    let res = run_process(&req, CgroupUsage::Off, None).await.unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0));
    assert!(!res.timed_out);
    let pid = read_pid(&out.path().join("dpid"), Duration::from_secs(1));
    assert!(
        wait_dead(pid, Duration::from_millis(500)),
        "daemon {pid} survived"
    );
}

#[tokio::test]
async fn stdout_flood_is_capped_counted_and_completes() {
    let mut req = sh("head -c 100000000 /dev/zero; echo done >&2");
    req.limits.stdout_cap = ByteSize::mib(1);
    req.limits.timeout = Duration::from_secs(60);
    let res = run_process(&req, CgroupUsage::Auto, None).await.unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0));
    assert!(res.stdout_truncated);
    assert_eq!(res.stdout_bytes, 100_000_000);
    assert_eq!(res.stdout.len(), 1 << 20);
    assert!(!res.stderr_truncated);
    assert_eq!(res.stderr_lossy(), "done\n");
}

#[tokio::test]
async fn host_canary_env_never_leaks_unless_passed() {
    let name = format!("SBX_CANARY_{}", std::process::id());
    let value = format!("canary-{:016x}", rand_u64());
    // SAFETY (test): set before any sandbox of this test runs; other tests never read it.
    std::env::set_var(&name, &value);
    let res = run_process(&super::sh("env"), CgroupUsage::Off, None)
        .await
        .unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0));
    assert!(!res.stdout_lossy().contains(&value), "canary leaked");
    assert!(res.stdout_lossy().contains("SANDBOX_OUTPUT="));
    assert!(res.stdout_lossy().contains("HOME="));

    let mut req = super::sh("env");
    req.env.insert(name.clone(), value.clone());
    let res = run_process(&req, CgroupUsage::Off, None).await.unwrap();
    assert!(res.stdout_lossy().contains(&format!("{name}={value}")));
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u64::from_ne_bytes(b)
}

#[tokio::test]
async fn exit_codes_and_signals_propagate() {
    for (script, want) in [
        ("exit 3", ExitStatus::Code(3)),
        ("exit 255", ExitStatus::Code(255)),
        ("true", ExitStatus::Code(0)),
        ("kill -SEGV $$", ExitStatus::Signal(11)),
        ("kill -TERM $$", ExitStatus::Signal(15)),
    ] {
        let res = run_process(&sh(script), CgroupUsage::Auto, None)
            .await
            .unwrap();
        assert_eq!(res.exit, want, "{script}");
        assert!(!res.timed_out);
    }
}

#[tokio::test]
async fn timeout_sets_timed_out_and_kills() {
    let mut req = sh("sleep 10");
    req.limits.timeout = Duration::from_millis(300);
    let t = Instant::now();
    let res = run_process(&req, CgroupUsage::Auto, None).await.unwrap();
    assert!(res.timed_out);
    assert_eq!(res.cancelled, None);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[tokio::test]
async fn cancel_token_cancels_and_kills_the_tree() {
    let out = out_dir();
    let mut req =
        sh(r#"(setsid sh -c 'sleep 1000 & echo $! > "$SANDBOX_OUTPUT/gpid"' &) ; sleep 1000"#);
    req.output_dir = Some(out.path().to_path_buf());
    let token = CancelToken::new();
    let t2 = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        t2.cancel("kill switch");
    });
    let t = Instant::now();
    let res = run_process(&req, CgroupUsage::Off, Some(token))
        .await
        .unwrap();
    assert_eq!(res.cancelled.as_deref(), Some("kill switch"));
    assert!(!res.timed_out);
    assert!(t.elapsed() < Duration::from_secs(5));
    let gpid = read_pid(&out.path().join("gpid"), Duration::from_secs(1));
    assert!(wait_dead(gpid, Duration::from_millis(500)));
}

#[tokio::test]
async fn dropping_the_future_kills_the_tree() {
    for cg in [CgroupUsage::Off, CgroupUsage::Auto] {
        let out = out_dir();
        let mut req = sh(
            r#"echo $$ > "$SANDBOX_OUTPUT/pid"; (setsid sh -c 'sleep 1000 & echo $! > "$SANDBOX_OUTPUT/gpid"' &) ; sleep 1000"#,
        );
        req.output_dir = Some(out.path().to_path_buf());
        let c = cfg(cg);
        let fut = run(&req, IsolationTier::Process, &c, None);
        assert!(tokio::time::timeout(Duration::from_millis(700), fut)
            .await
            .is_err());
        let pid = read_pid(&out.path().join("pid"), Duration::from_secs(2));
        let gpid = read_pid(&out.path().join("gpid"), Duration::from_secs(2));
        assert!(
            wait_dead(pid, Duration::from_secs(3)),
            "payload {pid} survived the drop"
        );
        assert!(
            wait_dead(gpid, Duration::from_secs(3)),
            "grandchild {gpid} survived the drop"
        );
    }
}

#[tokio::test]
async fn stdin_files_and_workspace() {
    let mut req = sh("cat; cat sub/a.txt; pwd");
    req.stdin = Some(b"from-stdin;".to_vec());
    req.files
        .insert("sub/a.txt".into(), b"from-file\n".to_vec());
    let res = run_process(&req, CgroupUsage::Off, None).await.unwrap();
    assert_eq!(res.exit, ExitStatus::Code(0), "{}", res.stderr_lossy());
    let out = res.stdout_lossy();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("from-stdin;from-file"));
    let ws = std::path::PathBuf::from(lines.next().unwrap());
    assert!(!ws.exists(), "workspace not removed");
    assert_eq!(res.workspace, None);

    req.keep_workspace = true;
    let res = run_process(&req, CgroupUsage::Off, None).await.unwrap();
    let kept = res.workspace.clone().unwrap();
    assert!(kept.join("sub/a.txt").exists());
    std::fs::remove_dir_all(kept).unwrap();
}

#[tokio::test]
async fn bad_requests_are_errors_with_codes() {
    let err = run_process(
        &sandboxio_core::ExecRequest::new(["no-such-cmd-xyz"]),
        CgroupUsage::Off,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "SBX_E1421", "{err}");
    let mut req = sh("true");
    req.files.insert("../escape".into(), vec![]);
    let err = run_process(&req, CgroupUsage::Off, None).await.unwrap_err();
    assert_eq!(err.code(), "SBX_E1402");
    let err = run_process(
        &sandboxio_core::ExecRequest::new(Vec::<String>::new()),
        CgroupUsage::Off,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "SBX_E1401");
}

#[tokio::test]
async fn enforcement_and_meter_are_filled() {
    let res = run_process(&sh("true"), CgroupUsage::Off, None)
        .await
        .unwrap();
    let e = &res.enforcement;
    assert_eq!(e.tier, Some(IsolationTier::Process));
    assert_eq!(e.cgroup, None);
    assert!(e.limits.iter().any(|l| l.contains("open_files")));
    assert!(e.gaps.iter().any(|g| g.contains("not a security boundary")));
    assert!(e.gaps.iter().any(|g| g.starts_with("network")));
    assert_eq!(res.meter.as_ref().unwrap().backend, "process");
    assert!(res.usage.cpu_time_ms.is_some());
    assert!(res.usage.peak_memory_bytes.unwrap() > 0);
    assert!(!alive(-1));
}

#[tokio::test]
async fn the_duration_is_in_microseconds_with_milliseconds_its_floor() {
    let t = Instant::now();
    let res = run_process(&sh("sleep 0.2"), CgroupUsage::Off, None)
        .await
        .unwrap();
    let wall = t.elapsed();
    // The payload's own sleep is inside the run's time, and the run inside the call.
    assert!(res.duration_us >= 200_000, "{}", res.duration_us);
    assert!(u128::from(res.duration_us) <= wall.as_micros(), "{res:?}");
    assert_eq!(res.duration_ms, res.duration_us / 1000);
    assert_eq!(res.meter.as_ref().unwrap().duration_ms, res.duration_ms);
}

#[tokio::test]
async fn namespace_tier_runs_through_the_same_helper() {
    let host = sandboxio_sandbox::probe();
    if !host.user_namespaces.available {
        eprintln!("SKIP: no user namespaces: {}", host.user_namespaces.detail);
        return;
    }
    let mut req = sh("echo hi; exit 3");
    req.limits.timeout = Duration::from_secs(20);
    let res = run(
        &req,
        IsolationTier::Namespace,
        &cfg(CgroupUsage::Auto),
        None,
    )
    .await
    .unwrap();
    super::assert_no_cgroup_left(&res.sandbox_id);
    assert_eq!(res.exit, ExitStatus::Code(3), "{res:?}");
    assert_eq!(res.stdout_lossy(), "hi\n");
    assert_eq!(res.enforcement.tier, Some(IsolationTier::Namespace));
    assert!(res.enforcement.namespaces.iter().any(|n| n == "pid"));
    assert_eq!(res.meter.as_ref().unwrap().backend, "namespace");

    req = sh("sleep 100");
    req.limits.timeout = Duration::from_millis(500);
    let res = run(
        &req,
        IsolationTier::Namespace,
        &cfg(CgroupUsage::Auto),
        None,
    )
    .await
    .unwrap();
    super::assert_no_cgroup_left(&res.sandbox_id);
    assert!(res.timed_out);
}

/// The launcher's child reports a failed `execve` as its stage and errno; the helper turns
/// them into the typed error naming the program.
#[tokio::test]
async fn a_failed_exec_comes_back_typed() {
    let req = sandboxio_core::ExecRequest::new(["/nonexistent-sandboxio-dir/prog"]);
    let e = run_process(&req, CgroupUsage::Off, None).await.unwrap_err();
    assert_eq!(e.code(), "SBX_E1422", "{e}");
    assert!(
        e.to_string().contains("/nonexistent-sandboxio-dir/prog"),
        "{e}"
    );
    // The cause crosses the helper's process boundary with the message.
    assert!(e.to_string().contains("os error 2"), "{e}");
}
