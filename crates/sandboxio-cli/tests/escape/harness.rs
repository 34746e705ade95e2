//! Shared machinery of the escape suite: running the real `sandboxio` binary, parsing its
//! `ExecResult`, the "has this sandbox been seen to hold" gate, host-side canaries and scans.
//!
//! Safety: no attack payload runs before [`require_holds`] has seen, through the very same
//! binary, that the sandbox is in its own user/pid/mount/net namespaces with no capabilities.
//! Destructive payloads additionally call [`preflight_destructive`] with the exact flags they
//! are about to use. Every run has a host-side watchdog; every host process a test starts is
//! stopped by pid.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");
/// Absolute path: the host PATH may point at shims (pyenv) that do not exist inside.
pub const PY: &str = "/usr/bin/python3";

/// Python prelude prepended to every python payload. `attempt(label, fn)` prints one line
/// `label=OK[:value]` or `label=<ERRNO NAME>`, which [`Outcome::results`] parses.
pub const PRELUDE: &str = r#"
import os, sys, errno, ctypes, ctypes.util, socket, struct, time, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def ename(e):
    return errno.errorcode.get(e, 'E%d' % e)
def sysc(nr, *args):
    conv = []
    for a in args:
        if isinstance(a, int):
            conv.append(ctypes.c_long(a))
        elif isinstance(a, bytes):
            conv.append(ctypes.c_char_p(a))
        else:
            conv.append(a)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def attempt(label, fn):
    try:
        r = fn()
        if r is None:
            print('%s=OK' % label, flush=True)
        else:
            print('%s=OK:%s' % (label, r), flush=True)
    except OSError as e:
        print('%s=%s' % (label, ename(e.errno) if e.errno is not None else 'OSERROR'), flush=True)
def say(label, value):
    print('%s=%s' % (label, value), flush=True)
"#;

/// Environment variable naming the uid the suite runs `sandboxio` as (e.g. `65534`, with
/// the same gid). Unset: the test's own uid. Set by `tests/nonroot.rs`-style runs and by
/// `SBXESC_UID=65534 cargo test -p sandboxio-cli --test escape` as root.
pub const ENV_RUN_AS: &str = "SBXESC_UID";

/// The uid every `sandboxio` of this suite runs as, when not the test's own.
pub fn run_as() -> Option<u32> {
    static UID: OnceLock<Option<u32>> = OnceLock::new();
    *UID.get_or_init(|| {
        let uid = std::env::var(ENV_RUN_AS).ok()?.trim().parse().ok()?;
        eprintln!("escape suite: running sandboxio as uid/gid {uid}");
        Some(uid)
    })
}

/// Gives a directory the test made to the run-as user (no-op without one).
pub fn hand_over(dir: &Path) {
    if let Some(uid) = run_as() {
        std::os::unix::fs::chown(dir, Some(uid), Some(uid))
            .unwrap_or_else(|e| panic!("chown {} to {uid}: {e}", dir.display()));
    }
}

/// The host uid that the sandbox's root maps to: 65534 when `sandboxio` runs as root,
/// else the invoking user itself.
pub fn sandbox_host_uid() -> u32 {
    let runner = run_as().unwrap_or_else(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(0)
    });
    if runner == 0 {
        65534
    } else {
        runner
    }
}

/// Makes a directory the test created writable by the sandbox (owned by the host uid its
/// root maps to), as an operator who mounts it read-write would.
pub fn writable_by_sandbox(dir: &Path) {
    let uid = sandbox_host_uid();
    std::os::unix::fs::chown(dir, Some(uid), Some(uid))
        .unwrap_or_else(|e| panic!("chown {} to {uid}: {e}", dir.display()));
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A marker unique to this test process and call, safe to put in argv and scan for.
pub fn marker(what: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("sbxesc-{what}-{}-{n}-{nanos}", std::process::id())
}

/// One invocation of `sandboxio run --tier namespace --json`.
#[derive(Clone, Debug, Default)]
pub struct Sandbox {
    timeout: Option<String>,
    memory: Option<String>,
    input: Option<PathBuf>,
    output: Option<PathBuf>,
    env: Vec<(String, String)>,
    mounts: Vec<String>,
    workdir: Option<String>,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            timeout: Some("20s".into()),
            ..Default::default()
        }
    }
    pub fn timeout(mut self, t: &str) -> Self {
        self.timeout = Some(t.into());
        self
    }
    pub fn memory(mut self, m: &str) -> Self {
        self.memory = Some(m.into());
        self
    }
    pub fn input(mut self, p: &Path) -> Self {
        self.input = Some(p.to_path_buf());
        self
    }
    pub fn output(mut self, p: &Path) -> Self {
        self.output = Some(p.to_path_buf());
        self
    }
    /// `--mount HOST:SANDBOX[:ro|rw]`.
    pub fn mount(mut self, spec: &str) -> Self {
        self.mounts.push(spec.into());
        self
    }
    pub fn workdir(mut self, w: &str) -> Self {
        self.workdir = Some(w.into());
        self
    }
    #[allow(dead_code)]
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    fn timeout_secs(&self) -> u64 {
        let t = self.timeout.as_deref().unwrap_or("30s");
        let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n: u64 = digits.parse().unwrap_or(30);
        if t.ends_with("ms") {
            1
        } else if t.ends_with('m') {
            n * 60
        } else {
            n
        }
    }

    fn command(&self, argv: &[&str], state: &Path) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--tier", "namespace", "--json"]);
        // A private state dir (store, audit) per run, and a cwd without a sandboxio.toml.
        cmd.arg("--state-dir").arg(state).current_dir(state);
        if let Some(t) = &self.timeout {
            cmd.args(["--timeout", t]);
        }
        if let Some(m) = &self.memory {
            cmd.args(["--memory", m]);
        }
        if let Some(i) = &self.input {
            cmd.arg("--input").arg(i);
        }
        if let Some(o) = &self.output {
            cmd.arg("--output").arg(o);
        }
        for (k, v) in &self.env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        for m in &self.mounts {
            cmd.arg("--mount").arg(m);
        }
        if let Some(w) = &self.workdir {
            cmd.arg("--workdir").arg(w);
        }
        cmd.arg("--");
        cmd.args(argv);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(uid) = run_as() {
            use std::os::unix::process::CommandExt;
            // std drops supplementary groups when root changes the uid.
            cmd.uid(uid).gid(uid).env("HOME", state);
        }
        cmd
    }

    /// Runs `argv` in the sandbox WITHOUT the safety gate. Only the gate and preflights use
    /// this directly; tests use [`Sandbox::attack`] / [`Sandbox::py`] / [`Sandbox::sh`].
    pub fn run_unchecked(&self, argv: &[&str]) -> Outcome {
        let state = tempfile::Builder::new()
            .prefix("sbxesc-state-")
            .tempdir()
            .expect("state tempdir");
        hand_over(state.path());
        let started = Instant::now();
        let mut child = self
            .command(argv, state.path())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {BIN}: {e}"));
        let out_reader = reader(child.stdout.take());
        let err_reader = reader(child.stderr.take());
        // Host-side watchdog: the sandbox's own timeout plus a generous margin.
        let deadline = Duration::from_secs(self.timeout_secs() + 30);
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if started.elapsed() > deadline => {
                    let pid = child.id();
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "watchdog: `sandboxio run` (pid {pid}) still running {:?} after start, \
                         past its own --timeout {:?}; killed it by pid",
                        started.elapsed(),
                        self.timeout
                    );
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("waiting for sandboxio: {e}"),
            }
        };
        let elapsed = started.elapsed();
        let raw_stdout = out_reader.join().unwrap_or_default();
        let raw_stderr = err_reader.join().unwrap_or_default();
        let json = serde_json::from_str::<Value>(raw_stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "CLI contract: `sandboxio run --json` must print one JSON ExecResult on stdout; \
                 parse error {e}\nstatus: {status:?}\nstdout: {raw_stdout}\nstderr: {raw_stderr}"
            )
        });
        Outcome {
            status,

            raw_stderr,
            json,
            elapsed,
        }
    }

    /// Runs an attack: first requires that the sandbox has been seen to hold, then checks
    /// that this run, too, reports the namespace tier.
    pub fn attack(&self, argv: &[&str]) -> Outcome {
        require_holds();
        let out = self.run_unchecked(argv);
        show(&out);
        out.assert_namespace_tier();
        out
    }

    /// Like [`Sandbox::py`], but the run may also end as an error record of the sandbox
    /// layer (e.g. the output could not be copied back); the caller checks which.
    pub fn py_may_fail(&self, script: &str, args: &[&str]) -> Outcome {
        require_holds();
        let full = format!("{PRELUDE}\n{script}");
        let mut argv = vec![PY, "-c", full.as_str()];
        argv.extend_from_slice(args);
        let out = self.run_unchecked(&argv);
        show(&out);
        if out.json["record"]["status"] != "error" {
            out.assert_namespace_tier();
        }
        out
    }

    /// Runs a python payload (with [`PRELUDE`]) as an attack.
    pub fn py(&self, script: &str, args: &[&str]) -> Outcome {
        let full = format!("{PRELUDE}\n{script}");
        let mut argv = vec![PY, "-c", full.as_str()];
        argv.extend_from_slice(args);
        self.attack(&argv)
    }

    /// Runs a shell payload as an attack; `$0` is `marker`.
    pub fn sh(&self, script: &str, marker: &str) -> Outcome {
        self.attack(&["/bin/sh", "-c", script, marker])
    }
}

/// `SBXESC_SHOW=1` prints every outcome (to review what passing tests saw).
fn show(out: &Outcome) {
    if std::env::var_os("SBXESC_SHOW").is_some() {
        eprintln!("=== outcome ===\n{}", out.describe());
    }
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// What one run reported.
pub struct Outcome {
    pub status: std::process::ExitStatus,
    pub raw_stderr: String,
    pub json: Value,
    pub elapsed: Duration,
}

impl Outcome {
    /// The sandboxed program's stdout, from the JSON result.
    pub fn stdout(&self) -> &str {
        self.json["stdout"].as_str().unwrap_or("")
    }
    pub fn stderr(&self) -> &str {
        self.json["stderr"].as_str().unwrap_or("")
    }
    pub fn exit_code(&self) -> Option<i64> {
        self.json["exit"]["code"].as_i64()
    }
    /// `record.status` and `record.error_code` of the run.
    pub fn record_status(&self) -> (String, String) {
        let r = &self.json["record"];
        (
            r["status"].as_str().unwrap_or("").to_string(),
            r["error_code"].as_str().unwrap_or("").to_string(),
        )
    }
    pub fn exit_signal(&self) -> Option<i64> {
        self.json["exit"]["signal"].as_i64()
    }
    pub fn timed_out(&self) -> bool {
        self.json["timed_out"].as_bool().unwrap_or(false)
    }
    pub fn oom_killed(&self) -> bool {
        self.json["oom_killed"].as_bool().unwrap_or(false)
    }
    pub fn enforcement(&self) -> &Value {
        &self.json["enforcement"]
    }
    pub fn limits_text(&self) -> String {
        self.json["enforcement"]["limits"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    }

    /// Everything, for failure messages.
    pub fn describe(&self) -> String {
        let record = &self.json["record"];
        format!(
            "record: status {} layer {} reason {} error_code {}\n\
             process status: {:?}\nexit: {}\ntimed_out: {} oom_killed: {} elapsed: {:?}\n\
             enforcement: {}\n--- sandbox stdout ---\n{}\n--- sandbox stderr ---\n{}\n\
             --- sandboxio stderr ---\n{}",
            record["status"],
            record["layer"],
            record["reason"],
            record["error_code"],
            self.status,
            self.json["exit"],
            self.timed_out(),
            self.oom_killed(),
            self.elapsed,
            self.json["enforcement"],
            self.stdout(),
            self.stderr(),
            self.raw_stderr
        )
    }

    /// `label=value` lines printed by the payload.
    pub fn results(&self) -> BTreeMap<String, String> {
        self.stdout()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    /// The value the payload reported for `label`; panics if missing.
    pub fn result(&self, label: &str) -> String {
        self.results().get(label).cloned().unwrap_or_else(|| {
            panic!(
                "payload did not report `{label}` (did it even run?)\n{}",
                self.describe()
            )
        })
    }

    /// Asserts that the attempt `label` failed with one of `errnos`.
    pub fn expect_errno(&self, label: &str, errnos: &[&str]) {
        let got = self.result(label);
        assert!(
            errnos.iter().any(|e| *e == got),
            "ESCAPE? `{label}` gave `{got}`, expected one of {errnos:?}\n{}",
            self.describe()
        );
    }

    pub fn assert_namespace_tier(&self) {
        let tier = &self.json["enforcement"]["tier"];
        assert_eq!(
            tier.as_str(),
            Some("namespace"),
            "asked for --tier namespace but the result reports tier {tier} (silent downgrade?)\n{}",
            self.describe()
        );
    }
}

/// Namespace identities (`pid:[4026531836]`) of this host test process.
pub fn host_ns(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| panic!("cannot read host /proc/self/ns/{kind}: {e}"))
}

const PROBE: &str = r#"
d = {}
for ns in ['pid', 'mnt', 'net', 'user', 'uts', 'ipc', 'cgroup']:
    try:
        d[ns] = os.readlink('/proc/self/ns/' + ns)
    except OSError as e:
        d[ns] = 'ERR:' + ename(e.errno)
for line in open('/proc/self/status').read().splitlines():
    k, _, v = line.partition(':')
    if k in ('NoNewPrivs', 'CapEff', 'CapPrm', 'Seccomp'):
        d[k] = v.strip()
d['self_pid'] = os.getpid()
d['nprocs'] = len([p for p in os.listdir('/proc') if p.isdigit()])
canary = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if canary:
    try:
        os.kill(canary, 0)
        d['canary'] = 'VISIBLE'
    except OSError as e:
        d['canary'] = ename(e.errno)
print('PROBE=' + json.dumps(d), flush=True)
"#;

/// Runs the probe through `sb` and returns the reasons the sandbox does NOT hold
/// (empty when it holds).
fn probe_reasons(sb: &Sandbox, canary_pid: Option<u32>) -> (Vec<String>, Option<Outcome>) {
    let script = format!("{PRELUDE}\n{PROBE}");
    let pid_arg = canary_pid.map(|p| p.to_string()).unwrap_or_default();
    let mut argv = vec![PY, "-c", script.as_str()];
    if canary_pid.is_some() {
        argv.push(pid_arg.as_str());
    }
    let out = sb.run_unchecked(&argv);
    let mut reasons = Vec::new();
    if out.json["enforcement"]["tier"].as_str() != Some("namespace") {
        reasons.push(format!(
            "result reports tier {} instead of namespace",
            out.json["enforcement"]["tier"]
        ));
    }
    let probe = out
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("PROBE="))
        .and_then(|j| serde_json::from_str::<Value>(j).ok());
    let Some(p) = probe else {
        reasons.push(format!("probe did not run:\n{}", out.describe()));
        return (reasons, Some(out));
    };
    for ns in ["pid", "mnt", "net", "user"] {
        let inside = p[ns].as_str().unwrap_or("");
        if inside.is_empty() || inside.starts_with("ERR") || inside == host_ns(ns) {
            reasons.push(format!(
                "not in its own {ns} namespace (inside {inside}, host {})",
                host_ns(ns)
            ));
        }
    }
    if p["CapEff"].as_str() != Some("0000000000000000") {
        reasons.push(format!("effective capabilities {}", p["CapEff"]));
    }
    if let Some(n) = p["nprocs"].as_u64() {
        if n > 16 {
            reasons.push(format!("{n} pids visible in /proc"));
        }
    }
    if canary_pid.is_some() && p["canary"].as_str() != Some("ESRCH") {
        reasons.push(format!("host canary pid check gave {}", p["canary"]));
    }
    (reasons, Some(out))
}

static HOLDS: OnceLock<Result<(), String>> = OnceLock::new();

/// Panics (refusing to run any attack) unless the namespace tier of the real binary has been
/// seen to put a program in its own user, pid, mount and net namespaces with no capabilities.
pub fn require_holds() {
    let r = HOLDS.get_or_init(|| {
        let canary = HostProcess::sleeper(&marker("gate"));
        let (reasons, _) = probe_reasons(&Sandbox::new(), Some(canary.pid()));
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    });
    if let Err(why) = r {
        panic!(
            "REFUSING to run attack payloads: the namespace sandbox was not seen to hold: {why}"
        );
    }
}

/// For destructive payloads (fork bomb, memory bomb, kill(-1)): in the calling test, with the
/// same flags, check that the sandbox isolates pids (own pid namespace, host canary invisible,
/// only a few pids) and that cgroup pid/memory limits are enforced. Panics with the reason
/// otherwise, except when run as another uid without cgroup limits (no delegated cgroup):
/// then prints why and returns false, and the caller skips its payload.
#[must_use]
pub fn preflight_destructive(sb: &Sandbox) -> bool {
    preflight(sb, true)
}

/// [`preflight_destructive`] for payloads that need the pid namespace only (kill(-1)), not
/// cgroup limits: panics with the reason unless pids are isolated.
pub fn preflight_pid_isolation(sb: &Sandbox) {
    let _ = preflight(sb, false);
}

fn preflight(sb: &Sandbox, need_limits: bool) -> bool {
    require_holds();
    let mut canary = HostProcess::sleeper(&marker("preflight"));
    let (mut reasons, out) = probe_reasons(sb, Some(canary.pid()));
    if let Some(out) = out.as_ref().filter(|_| need_limits) {
        let limits = out.limits_text();
        if !limits.contains("pids=") {
            reasons.push(format!(
                "no pids limit reported in enforcement.limits [{limits}]"
            ));
        }
        if !limits.contains("memory=") {
            reasons.push(format!(
                "no memory limit reported in enforcement.limits [{limits}]"
            ));
        }
        if out.json["enforcement"]["cgroup"].is_null() {
            reasons.push("no cgroup reported in enforcement.cgroup".into());
        }
    }
    assert!(
        canary.alive(),
        "host canary died during preflight (pid {})",
        canary.pid()
    );
    if !reasons.is_empty() {
        let only_cgroups = reasons
            .iter()
            .all(|r| r.contains("limit reported") || r.contains("no cgroup reported"));
        if run_as().is_some() && only_cgroups {
            eprintln!(
                "SKIP: destructive payload not run as uid {:?}: no cgroup limits for this user \
                 here (no delegated cgroup): {}",
                run_as(),
                reasons.join("; ")
            );
            return false;
        }
        panic!(
            "REFUSING to run a destructive payload: preflight with the same flags failed: {}",
            reasons.join("; ")
        );
    }
    true
}

/// A host process started by a test, stopped by pid on drop.
pub struct HostProcess {
    child: Child,
}

impl HostProcess {
    /// `/bin/sleep 120` with `marker` as argv[0] and in the environment (`SBX_CANARY`).
    pub fn sleeper(marker: &str) -> Self {
        use std::os::unix::process::CommandExt;
        let child = Command::new("/bin/sleep")
            .arg0(marker)
            .arg("120")
            .env("SBX_CANARY", marker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start host sleep: {e}"));
        let p = HostProcess { child };
        // Wait until argv shows the marker (exec done).
        for _ in 0..200 {
            if std::fs::read(format!("/proc/{}/cmdline", p.pid()))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        p
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn numeric_proc_entries() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// Host pids whose argv contains `marker` (excluding zombies, which have empty cmdline).
pub fn host_pids_with_marker(marker: &str) -> Vec<u32> {
    numeric_proc_entries()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        // The sandboxio process itself carries the payload (and so the marker) in its argv.
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| p != Path::new(BIN))
                .unwrap_or(true)
        })
        .collect()
}

/// Host pids inside the pid namespace `ns` (as printed by `readlink /proc/self/ns/pid`).
pub fn host_pids_in_pidns(ns: &str) -> Vec<u32> {
    numeric_proc_entries()
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                .map(|p| p.to_string_lossy() == ns)
                .unwrap_or(false)
        })
        .collect()
}

/// Kills the given host pids one by one (cleanup after a failed containment).
pub fn kill_pids(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("/bin/kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

/// Waits up to `within` for no host process to carry `marker`; returns the leftovers and
/// kills them by pid.
pub fn leftovers_of(marker: &str, within: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let pids = host_pids_with_marker(marker);
        if pids.is_empty() {
            return pids;
        }
        if start.elapsed() > within {
            kill_pids(&pids);
            return pids;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a harmless payload directly on the host (a control showing the payload detects the
/// thing it tests for). Never used for destructive or host-modifying payloads.
pub fn host_control(script: &str, args: &[&str]) -> BTreeMap<String, String> {
    let full = format!("{PRELUDE}\n{script}");
    let mut child = Command::new(PY)
        .arg("-c")
        .arg(&full)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run host control: {e}"));
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("host control payload hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let map: BTreeMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    assert!(
        !map.is_empty(),
        "host control printed nothing\nstdout: {stdout}\nstderr: {stderr}"
    );
    map
}

/// A host directory the sandbox may read (`--input`): world-readable, owned by root, as a
/// real caller's would be.
pub fn input_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("sbxesc-in-")
        .tempdir()
        .expect("input tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// A host directory for `--output`.
pub fn output_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("sbxesc-out-")
        .tempdir()
        .expect("output tempdir");
    hand_over(d.path());
    d
}

/// A host directory outside everything the sandbox is given, holding "victim" files.
pub fn host_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sbxesc-host-")
        .tempdir()
        .expect("host tempdir")
}

/// Reads a host file's bytes, panicking with context.
pub fn read_host(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("host read {}: {e}", p.display()))
}

/// Total bytes of regular files under `p` (not following symlinks).
pub fn du(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            if let Ok(md) = std::fs::symlink_metadata(e.path()) {
                if md.is_dir() {
                    total += du(&e.path());
                } else if md.is_file() {
                    total += md.len();
                }
            }
        }
    }
    total
}

/// Compiles a small C program on the host into `dir/name`; None (with the reason printed)
/// when gcc is unavailable.
pub fn compile_c(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C source");
    let bin = dir.join(name);
    match Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => panic!("gcc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("SKIP: gcc is not available on this host ({e})");
            None
        }
    }
}
