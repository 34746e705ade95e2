//! As an unprivileged user (uid 65534 with its own HOME and state dir): the default tier,
//! limits without a delegated cgroup, and `doctor` agreeing with `run`.

use crate::harness::*;

#[test]
fn default_tier_runs_python_for_an_unprivileged_user() {
    let Some(user) = as_nobody() else { return };
    let o = output(user.cli(&["run", "--", "python3", "-c", "print(1)"]));
    assert!(
        o.status.success(),
        "`run -- python3 -c 'print(1)'` failed as uid {}: {:?}\n{}",
        user.uid,
        o.status,
        text(&o.stderr)
    );
    assert_eq!(text(&o.stdout), "1\n");

    // The same request with --json: the namespace tier, every namespace, root inside mapped
    // to the invoking user only, and the gaps of an unprivileged run named.
    let script = "print(open('/proc/self/uid_map').read().split()); import os; print(os.getuid())";
    let o = output(user.cli(&["run", "--json", "--", "python3", "-c", script]));
    let r = json(&o);
    assert_eq!(r["exit"]["code"], 0, "{r}");
    assert_eq!(r["enforcement"]["tier"], "namespace", "{r}");
    for ns in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
        assert!(
            r["enforcement"]["namespaces"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == ns)),
            "namespace {ns} missing: {r}"
        );
    }
    assert_eq!(r["enforcement"]["seccomp"], true, "{r}");
    assert_eq!(r["enforcement"]["no_new_privs"], true, "{r}");
    let stdout = r["stdout"].as_str().unwrap_or("");
    assert_eq!(
        stdout,
        format!("['0', '{}', '1']\n0\n", user.uid),
        "root inside must map to the invoking user and nothing else: {r}"
    );
    let g = gaps(&r).join("\n");
    assert!(g.contains(&format!("host uid {}", user.uid)), "{g}");
    assert_eq!(r["record"]["status"], "ok", "{r}");
}

#[test]
fn limits_without_a_delegated_cgroup_fall_back_to_rlimits_and_name_every_gap() {
    let Some(user) = as_nobody() else { return };
    // Allocate 256 MiB against a 64 MiB limit; count processes against a pids limit of 8.
    let script = r#"
import os
try:
    b = bytearray(256 << 20)
    print('alloc=OK')
except MemoryError:
    print('alloc=MemoryError')
"#;
    let o = output(user.cli(&[
        "run", "--json", "--memory", "64MiB", "--pids", "8", "--", "python3", "-c", script,
    ]));
    let r = json(&o);
    assert_eq!(r["exit"]["code"], 0, "{r}");
    let limits = r["enforcement"]["limits"].to_string();
    let g = gaps(&r).join("\n");
    if r["enforcement"]["cgroup"].is_null() {
        // No cgroup for this user: memory by RLIMIT_AS, really enforced, and every limit the
        // cgroup would have given is named as a gap.
        assert!(
            limits.contains("memory=64MiB (rlimit address space)"),
            "{limits}"
        );
        assert_eq!(
            r["stdout"], "alloc=MemoryError\n",
            "RLIMIT_AS not enforced: {r}"
        );
        for what in ["memory:", "pids:", "cpu quota:", "kill:"] {
            assert!(g.contains(what), "gap `{what}` not named:\n{g}");
        }
    } else {
        // A delegated cgroup: the limits are the cgroup's.
        assert!(limits.contains("pids=8"), "{limits}");
        assert!(limits.contains("memory=64MiB"), "{limits}");
    }
}

#[test]
fn doctor_agrees_with_run_for_an_unprivileged_user() {
    let Some(user) = as_nobody() else { return };
    let d = output(user.cli(&["doctor", "--json"]));
    assert!(d.status.success(), "{}", text(&d.stderr));
    let doctor = json(&d);
    let (ns_ok, detail, fix) = doctor_tier(&doctor, "namespace");
    let o = output(user.cli(&["run", "--json", "--", "/usr/bin/true"]));
    let run_ok = o.status.success();
    assert_eq!(
        ns_ok,
        run_ok,
        "doctor says namespace available={ns_ok} ({detail}; fix: {fix}) but run {} ({})",
        if run_ok { "works" } else { "fails" },
        text(&o.stderr)
    );
    assert!(
        ns_ok,
        "user namespaces work here for uid {}: {detail}",
        user.uid
    );
    assert!(detail.contains("probe sandbox ran"), "{detail}");
}
