//! Exhausting the host: pids, memory, disk. Every payload here is bounded even if the limit
//! it tests were missing, and the destructive ones run only after a same-flags preflight.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::*;

/// While a bomb runs, the host must stay able to start processes.
struct HostHealth {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl HostHealth {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut failures = Vec::new();
            let mut n = 0;
            while !s.load(Ordering::SeqCst) && n < 200 {
                n += 1;
                match Command::new("/bin/true").status() {
                    Ok(st) if st.success() => {}
                    Ok(st) => failures.push(format!("/bin/true exited {st:?}")),
                    Err(e) => failures.push(format!("cannot spawn /bin/true: {e}")),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            failures
        });
        HostHealth {
            stop,
            handle: Some(handle),
        }
    }
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_else(|| vec!["health thread panicked".into()])
    }
}

fn pids_limit(out: &Outcome) -> Option<u64> {
    let text = out.limits_text();
    let at = text.find("pids=")?;
    text[at + 5..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .ok()
}

#[test]
fn fork_is_refused_at_the_pids_limit() {
    let sb = Sandbox::new().timeout("15s");
    if !preflight_destructive(&sb) {
        return;
    }
    let m = marker("forkcount");
    let script = r#"
ok = 0
errs = {}
for i in range(3000):
    try:
        pid = os.fork()
    except OSError as e:
        k = ename(e.errno)
        errs[k] = errs.get(k, 0) + 1
        if sum(errs.values()) >= 20:
            break
        continue
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    ok += 1
say('forked', ok)
say('errors', json.dumps(errs))
"#;
    let health = HostHealth::start();
    let out = sb.py(script, &[&m]);
    let failures = health.finish();
    let left = leftovers_of(&m, Duration::from_millis(500));
    assert!(
        left.is_empty(),
        "forked children survived the run: {} (killed now)",
        left.len()
    );
    assert!(
        failures.is_empty(),
        "host unhealthy during the bomb: {failures:?}"
    );
    let errs: serde_json::Value = serde_json::from_str(&out.result("errors")).unwrap();
    assert!(
        errs["EAGAIN"].as_u64().unwrap_or(0) > 0,
        "fork never failed with EAGAIN: {errs}\n{}",
        out.describe()
    );
    let forked: u64 = out.result("forked").parse().unwrap();
    let limit = pids_limit(&out).expect("pids limit in enforcement.limits");
    assert!(
        forked < limit,
        "forked {forked} processes with a pids limit of {limit}"
    );
}

#[test]
fn fork_bomb_is_contained() {
    let sb = Sandbox::new().timeout("10s");
    if !preflight_destructive(&sb) {
        return;
    }
    let m = marker("forkbomb");
    let mut canary = HostProcess::sleeper(&marker("forkbomb-canary"));
    // A binary-tree fork bomb; depth 11 bounds it to 4096 processes even with no pids limit.
    let script = r#"b() { [ "$1" -lt 11 ] || { sleep 3; return; }; b $(($1+1)) & b $(($1+1)) & wait; }; b 0; echo done"#;
    let health = HostHealth::start();
    let out = sb.sh(script, &m);
    let failures = health.finish();
    let left = leftovers_of(&m, Duration::from_millis(1000));
    assert!(
        left.is_empty(),
        "{} fork bomb processes survived the run (killed now)",
        left.len()
    );
    assert!(
        failures.is_empty(),
        "host unhealthy during the bomb: {failures:?}"
    );
    assert!(canary.alive(), "host canary died during the fork bomb");
    assert!(
        out.elapsed < Duration::from_secs(20),
        "run did not end: {:?}",
        out.elapsed
    );
    // The bomb hit the pids limit: the shell reports failed forks.
    assert!(
        out.stderr().contains("fork") || out.timed_out(),
        "the bomb never hit a limit?\n{}",
        out.describe()
    );
}

const MEMORY_BOMB: &str = r#"
hog = []
for i in range(256):          # at most 2 GiB, touched
    hog.append(b'\x01' * (8 << 20))
    if i % 4 == 0:
        say('allocated_mib', (i + 1) * 8)
say('survived', 'yes')
"#;

#[test]
fn memory_bomb_is_oom_killed() {
    let sb = Sandbox::new().timeout("20s").memory("64MiB");
    if !preflight_destructive(&sb) {
        return;
    }
    let out = sb.py(MEMORY_BOMB, &[]);
    assert!(
        !out.results().contains_key("survived"),
        "allocated 2 GiB under a 64 MiB limit\n{}",
        out.describe()
    );
    assert!(
        out.oom_killed(),
        "oom_killed must be true\n{}",
        out.describe()
    );
    assert!(!out.timed_out(), "{}", out.describe());
    assert_eq!(
        out.exit_signal(),
        Some(9),
        "the OOM killer sends SIGKILL\n{}",
        out.describe()
    );
    assert_eq!(
        out.status.code(),
        Some(OOM_EXIT),
        "sandboxio must exit with its documented OOM code"
    );
    // It got killed near the limit, not after eating the host.
    let peak: u64 = out
        .results()
        .get("allocated_mib")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(peak <= 64, "allocated {peak} MiB under a 64 MiB limit");
}

#[test]
fn memory_limit_covers_the_whole_process_tree() {
    // Four children of 40 MiB each under a 64 MiB limit for the sandbox.
    let sb = Sandbox::new().timeout("20s").memory("64MiB");
    if !preflight_destructive(&sb) {
        return;
    }
    let script = r#"
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        hog = [b'\x01' * (8 << 20) for _ in range(5)]
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
killed = 0
for pid in kids:
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9:
        killed += 1
say('killed', killed)
"#;
    let out = sb.py(script, &[]);
    let killed: u64 = out
        .results()
        .get("killed")
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    // Either the children were OOM-killed, or the parent was too (no report at all).
    assert!(
        killed >= 1,
        "160 MiB across a tree fit in a 64 MiB sandbox\n{}",
        out.describe()
    );
    assert!(
        out.oom_killed(),
        "oom_killed must be true\n{}",
        out.describe()
    );
    assert_eq!(out.status.code(), Some(OOM_EXIT));
}

/// Documented exit codes of `sandboxio run` (crates/sandboxio-cli/src/exit.rs).
pub const OOM_EXIT: i32 = 121;
pub const TIMEOUT_EXIT: i32 = 124;

#[test]
fn runs_leave_no_cgroup_staging_or_mount_behind() {
    // A run that times out with a daemon and spinners behind it: afterwards the host has
    // no cgroup, staging directory or mount carrying the sandbox's id.
    let m = marker("cleanup");
    let script = "setsid sh -c 'while :; do :; done' \"$0\" & (setsid sleep 60 &) ; sleep 60";
    let out = Sandbox::new().timeout("2s").sh(script, &m);
    assert!(out.timed_out(), "{}", out.describe());
    let id = out.json["sandbox_id"].as_str().unwrap_or("").to_string();
    assert!(
        id.len() >= 8,
        "no sandbox_id in the result\n{}",
        out.describe()
    );
    let left = leftovers_of(&m, Duration::from_millis(500));
    assert!(left.is_empty(), "processes left: {left:?} (killed now)");
    let mut found = Vec::new();
    if let Ok(ctrls) = std::fs::read_dir("/sys/fs/cgroup") {
        for c in ctrls.flatten() {
            let base = c.path().join("sandboxio");
            if let Ok(rd) = std::fs::read_dir(&base) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().contains(&id) {
                        found.push(e.path().display().to_string());
                    }
                }
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().contains(&id) {
                found.push(e.path().display().to_string());
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    found.extend(mounts.lines().filter(|l| l.contains(&id)).map(String::from));
    assert!(found.is_empty(), "left behind by sandbox {id}: {found:#?}");
}

const FILL: &str = r#"
d = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else os.environ['SANDBOX_OUTPUT']
total = 0
err = 'NONE'
chunk = b'\x00' * (1 << 20)
done = False
for n in range(48):                 # at most 48 files of 16 MiB = 768 MiB
    try:
        with open(os.path.join(d, 'fill%02d' % n), 'wb') as f:
            for _ in range(16):
                f.write(chunk)
                f.flush()
                total += len(chunk)
    except OSError as e:
        err = ename(e.errno)
        break
say('total', total)
say('error', err)
"#;

const CAP_SLACK: u64 = 2 << 20;
const DEFAULT_CAP: u64 = 64 << 20;

#[test]
fn filling_tmp_stops_at_its_size_cap() {
    let out = Sandbox::new().py(FILL, &["/tmp"]);
    out.expect_errno("error", &["ENOSPC"]);
    let total: u64 = out.result("total").parse().unwrap();
    assert!(
        total <= DEFAULT_CAP + CAP_SLACK,
        "wrote {total} bytes to /tmp, past the 64 MiB tmpfs cap"
    );
}

#[test]
fn filling_output_dir_stops_at_its_size_cap() {
    let output = output_dir();
    let out = Sandbox::new().output(output.path()).py(FILL, &[""]);
    let on_host = du(output.path());
    out.expect_errno("error", &["ENOSPC", "EDQUOT"]);
    let total: u64 = out.result("total").parse().unwrap();
    assert!(
        total <= DEFAULT_CAP + CAP_SLACK,
        "wrote {total} bytes to the output dir, past its 64 MiB cap"
    );
    assert!(
        on_host <= DEFAULT_CAP + CAP_SLACK,
        "the host output dir holds {on_host} bytes, past the cap"
    );
}
