//! As an unprivileged user (uid 65534 with its own HOME and state dir): the default tier,
//! limits without a delegated cgroup, and `doctor` agreeing with `run`.

use std::path::PathBuf;
use std::process::Command;

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
    // Allocate 256 MiB against a 64 MiB limit, on the heap and as an anonymous mapping;
    // count processes against a pids limit of 8.
    let script = r#"
import mmap
try:
    b = bytearray(256 << 20)
    print('alloc=OK')
except MemoryError:
    print('alloc=MemoryError')
try:
    m = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    print('mmap=OK')
except (MemoryError, OSError):
    print('mmap=refused')
"#;
    let o = output(user.cli(&[
        "run", "--json", "--memory", "64MiB", "--pids", "8", "--", "python3", "-c", script,
    ]));
    let r = json(&o);
    assert_eq!(r["exit"]["code"], 0, "{r}");
    let limits = r["enforcement"]["limits"].to_string();
    let g = gaps(&r).join("\n");
    if r["enforcement"]["cgroup"].is_null() {
        // No cgroup for this user: memory by RLIMIT_DATA, really enforced, and every limit
        // the cgroup would have given is named as a gap.
        assert!(
            limits.contains("memory=64MiB (rlimit data, per process)"),
            "{limits}"
        );
        assert_eq!(
            r["stdout"], "alloc=MemoryError\nmmap=refused\n",
            "RLIMIT_DATA not enforced: {r}"
        );
        for what in ["memory:", "cpu quota:", "kill:"] {
            assert!(g.contains(what), "gap `{what}` not named:\n{g}");
        }
        // pids hold without a cgroup: RLIMIT_NPROC in the sandbox's own user namespace.
        assert!(!g.contains("pids:"), "pids named as a gap:\n{g}");
        assert!(limits.contains("pids=8 (RLIMIT_NPROC"), "{limits}");
    } else {
        // A delegated cgroup: the limits are the cgroup's.
        assert!(limits.contains("pids=8"), "{limits}");
        assert!(limits.contains("memory=64MiB"), "{limits}");
    }
}

#[test]
fn a_runtime_that_reserves_address_space_starts_under_the_fallback_memory_limit() {
    // V8 reserves far more address space than it uses; an address-space rlimit killed
    // `node` at start for every user without a cgroup. The data rlimit lets it start.
    let Some(user) = as_nobody() else { return };
    if !std::path::Path::new("/usr/bin/node").exists() {
        eprintln!("SKIP: /usr/bin/node is not installed");
        return;
    }
    let o = output(user.cli(&[
        "run",
        "--json",
        "--memory",
        "256MiB",
        "--",
        "/usr/bin/node",
        "-e",
        "console.log(1 + 1)",
    ]));
    let r = json(&o);
    assert_eq!(r["stdout"], "2\n", "{r}");
    assert_eq!(r["exit"]["code"], 0, "{r}");
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

/// A cgroup2 subtree handed to `uid` the way systemd's `Delegate=yes` does: the directory
/// and its `cgroup.procs`, `cgroup.subtree_control` and `cgroup.threads` owned by the user,
/// with a leaf `sup` for the supervisor. Removed (bottom up) on drop.
struct Delegation {
    dir: PathBuf,
}

impl Delegation {
    fn new(uid: u32) -> Option<Delegation> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mounts.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if !post.starts_with("cgroup2 ") {
                return None;
            }
            pre.split(' ').nth(4).map(PathBuf::from)
        })?;
        let dir = mount.join(format!("sbx-nonroot-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let d = Delegation { dir };
        std::fs::create_dir(d.dir.join("sup")).ok()?;
        for sub in [d.dir.clone(), d.dir.join("sup")] {
            for f in [
                "",
                "cgroup.procs",
                "cgroup.subtree_control",
                "cgroup.threads",
            ] {
                let p = if f.is_empty() {
                    sub.clone()
                } else {
                    sub.join(f)
                };
                let _ = std::os::unix::fs::chown(&p, Some(uid), Some(uid));
            }
        }
        Some(d)
    }
}

impl Drop for Delegation {
    fn drop(&mut self) {
        let mut dirs = vec![self.dir.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
                dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            i += 1;
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn a_delegated_cgroup_subtree_is_found_and_used() {
    let Some(user) = as_nobody() else { return };
    let Some(deleg) = Delegation::new(user.uid) else {
        eprintln!("SKIP: no writable cgroup2 mount here to delegate a subtree from");
        return;
    };
    // Root puts the supervisor into the delegated leaf, then becomes the user: where a
    // systemd user service or `systemd-run --user --scope -p Delegate=yes` would start it.
    let inner = user.cli(&["run", "--json", "--pids", "8", "--", "/usr/bin/true"]);
    let mut cmd = Command::new("sh");
    let script = format!(
        "echo $$ > '{}/sup/cgroup.procs' && exec setpriv --reuid={uid} --regid={uid} --clear-groups \"$@\"",
        deleg.dir.display(),
        uid = user.uid
    );
    cmd.arg("-c")
        .arg(script)
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.current_dir(user.state());
    let o = output(cmd);
    let r = json(&o);
    assert_eq!(r["exit"]["code"], 0, "{r}\n{}", text(&o.stderr));
    let limits = r["enforcement"]["limits"].to_string();
    assert_eq!(r["enforcement"]["cgroup"], "v2", "{r}");
    assert!(
        limits.contains(&format!(
            "cgroup: delegated subtree {}",
            deleg.dir.display()
        )),
        "{limits}"
    );
    // Whatever the delegated subtree lacks is a named gap, not silence.
    let controllers =
        std::fs::read_to_string(deleg.dir.join("cgroup.controllers")).unwrap_or_default();
    let g = gaps(&r).join("\n");
    if !controllers.contains("pids") {
        assert!(g.contains("pids:"), "{g}");
    } else {
        assert!(limits.contains("pids=8"), "{limits}");
    }
    // The sandbox cgroup is gone after the run.
    let base = deleg.dir.join("sandboxio");
    let left: Vec<_> = std::fs::read_dir(&base)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "sandbox cgroups left: {left:?}");
}

/// Without a delegated cgroup a pids limit still holds for an unprivileged user: the
/// sandbox's own user namespace counts only its processes against RLIMIT_NPROC (the
/// program's `pids`; the sandbox's init is not counted). `--pids 20` used to let 200
/// processes run.
#[test]
fn a_pids_limit_holds_without_a_cgroup() {
    let Some(user) = as_nobody() else { return };
    let script = "import os, time\nn = 0\nfor i in range(60):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    n += 1\nprint('started=%d' % n)\n";
    let o = output(user.cli(&[
        "run", "--json", "--pids", "20", "--", "python3", "-c", script,
    ]));
    let r = json(&o);
    if !r["enforcement"]["cgroup"].is_null() {
        eprintln!("SKIP: this user has a delegated cgroup; the cgroup's pids limit applies");
        return;
    }
    let out = r["stdout"].as_str().unwrap_or("");
    let started: u64 = out
        .trim()
        .strip_prefix("started=")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u64::MAX);
    // The forking program itself is one of the 20.
    assert!(started < 20, "{started} children under --pids 20: {r}");
    assert!(
        started >= 10,
        "{started} children: the limit is far below what was asked: {r}"
    );
}

/// Without a cgroup, a program killed at its timeout is metered too: the CPU its tree had
/// used when it was killed counts (its processes never waited for one another, so
/// `RUSAGE_CHILDREN` saw none of it). It used to be metered at about 1 ms, under-charging
/// a program that burns CPU until it is killed.
#[test]
fn a_program_killed_at_its_timeout_is_metered_without_a_cgroup() {
    let Some(user) = as_nobody() else { return };
    let o = output(user.cli(&[
        "run",
        "--json",
        "--timeout",
        "2s",
        "--",
        "python3",
        "-c",
        "while True: pass",
    ]));
    let r = json(&o);
    if !r["enforcement"]["cgroup"].is_null() {
        eprintln!("SKIP: this user has a delegated cgroup; the cgroup meters the run");
        return;
    }
    assert_eq!(r["timed_out"], true, "{r}");
    let cpu = r["usage"]["cpu_time_ms"].as_u64().unwrap_or(0);
    // About 2 s of one core; a loaded host gives it less, never almost nothing.
    assert!(cpu >= 500, "metered {cpu} ms for a 2 s busy loop: {r}");
}

/// A directory this user can search but not list (`0111`) serves the names inside it to a
/// program that knows them, so the tree around it cannot be pinned: under an idempotency
/// key (or an approval) the request is refused (`SBX_E1566`) rather than bound to a tree
/// it cannot see.
#[test]
fn an_input_directory_this_user_cannot_list_is_not_bound_by_a_key() {
    let Some(user) = as_nobody() else { return };
    // Beside the state directory, not in it (that one is refused as sandboxio's own).
    let base = tempfile::Builder::new()
        .prefix("sbx-nonroot-input-")
        .tempdir()
        .unwrap();
    let input = base.path().join("in");
    let hidden = input.join("x");
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::write(hidden.join("payload"), "ONE\n").unwrap();
    for p in [base.path(), &input, &hidden, &hidden.join("payload")] {
        std::os::unix::fs::chown(p, Some(user.uid), Some(user.uid)).unwrap();
    }
    std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o111)).unwrap();
    let o = output(user.cli(&[
        "run",
        "--idempotency-key",
        "k-unlisted",
        "--input",
        input.to_str().unwrap(),
        "--",
        "cat",
        "/input/x/payload",
    ]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(120), "{err}");
    assert!(err.contains("SBX_E1566"), "{err}");
    assert!(!text(&o.stdout).contains("ONE"), "it ran");
}
