//! Durability as an unprivileged user (uid 65534, its own state dir): an operator action
//! killed between its change and its record, and a record the trail could not take, are
//! each written at the next start, once, and the trail verifies. strace, run as the same
//! user, kills the CLI or fails its writes at the exact syscall.

use std::process::Command;

use crate::harness::*;

/// `sandboxio <args>` as `user`, under `strace` with `strace_args` (also as `user`).
fn under_strace(user: &User, strace_args: &[&str], args: &[&str]) -> std::process::Output {
    let inner = user.cli(args);
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-o", "/dev/null"])
        .args(strace_args)
        .arg(inner.get_program())
        .args(inner.get_args())
        .env_clear()
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(user.state())
        .stdin(std::process::Stdio::null());
    if user.uid != current_uid() {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(user.uid).gid(user.uid);
    }
    output(cmd)
}

fn records(user: &User) -> Vec<serde_json::Value> {
    std::fs::read_to_string(user.state().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["operation_id"].is_string())
        .collect()
}

#[test]
fn cut_records_are_written_at_the_next_start_for_an_unprivileged_user() {
    let Some(user) = as_nobody() else { return };
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIP: strace is not installed (scripts/setup.sh installs it)");
        return;
    }
    let first = output(user.cli(&["run", "--", "true"]));
    assert!(first.status.success(), "{}", text(&first.stderr));

    // `kill`, SIGKILLed at its commit's fsync: engaged, no record yet.
    let k = under_strace(
        &user,
        &["-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"],
        &["kill", "--reason", "nobody-brake"],
    );
    assert!(
        !k.status.success(),
        "kill was not killed: {}",
        text(&k.stderr)
    );
    let kills = |user: &User| {
        records(user)
            .into_iter()
            .filter(|r| r["event"] == "admin" && r["tool_name"] == "kill")
            .count()
    };
    assert_eq!(kills(&user), 0);
    // The next start records it, and the switch holds.
    let refused = output(user.cli(&["run", "--", "true"]));
    assert_eq!(
        refused.status.code(),
        Some(120),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(kills(&user), 1);
    let resumed = output(user.cli(&["resume"]));
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));

    // A run whose record the trail cannot take (every write to it fails with ENOSPC).
    let trail = user.state().join("audit.jsonl");
    let full = under_strace(
        &user,
        &[
            "-P",
            trail.to_str().unwrap(),
            "-e",
            "trace=write,writev,pwrite64",
            "-e",
            "inject=write,writev,pwrite64:error=ENOSPC",
        ],
        &["run", "--idempotency-key", "nobody-late", "--", "true"],
    );
    assert!(full.status.success(), "{}", text(&full.stderr));
    let keyed = |user: &User| {
        records(user)
            .into_iter()
            .filter(|r| r["idempotency_key"] == "nobody-late")
            .count()
    };
    assert_eq!(keyed(&user), 0);
    for _ in 0..2 {
        let next = output(user.cli(&["run", "--", "true"]));
        assert!(next.status.success(), "{}", text(&next.stderr));
        assert_eq!(keyed(&user), 1, "written once");
        assert_eq!(kills(&user), 1);
    }
    let verify = output(user.cli(&[
        "audit",
        "verify",
        trail.to_str().unwrap(),
        "--key",
        user.state().join("audit.pub").to_str().unwrap(),
    ]));
    assert!(
        verify.status.success(),
        "{}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
}
