//! Processes: seeing, reading, signalling and tracing host processes; outliving the run.

use std::time::Duration;

use crate::harness::*;

#[test]
fn cannot_read_host_process_environ_or_cmdline() {
    let m = marker("environ");
    let mut canary = HostProcess::sleeper(&m);
    let pid = canary.pid().to_string();
    let script = r#"
pid = sys.argv[1]
m = sys.argv[2]
def rd(p):
    with open(p, 'rb') as f:
        data = f.read()
    return 'CANARY' if m.encode() in data else 'nocanary'
attempt('environ', lambda: rd('/proc/%s/environ' % pid))
attempt('cmdline', lambda: rd('/proc/%s/cmdline' % pid))
# And nowhere in /proc at all.
seen = []
for p in os.listdir('/proc'):
    if not p.isdigit():
        continue
    for f in ('environ', 'cmdline'):
        try:
            with open('/proc/%s/%s' % (p, f), 'rb') as fh:
                data = fh.read()
            if m.encode() in data and int(p) != os.getpid():
                seen.append(p + '/' + f)
        except OSError:
            pass
say('scan', ','.join(seen) if seen else 'none')
"#;
    // Control: the host sees the canary through the same payload.
    let control = host_control(script, &[&pid, &m]);
    assert_eq!(control["environ"], "OK:CANARY", "control: {control:?}");
    assert_eq!(control["cmdline"], "OK:CANARY", "control: {control:?}");

    // The marker is passed in argv of the payload itself, so the payload's own cmdline
    // contains it; the scan skips its own pid.
    let out = Sandbox::new().py(script, &[&pid, &m]);
    // The host pid does not exist in the sandbox's pid namespace (or is some sandbox process
    // without the canary, if the numbers happened to collide).
    let env = out.result("environ");
    assert!(
        env == "ENOENT" || env == "EACCES" || env == "OK:nocanary",
        "ESCAPE: host environ readable: {env}\n{}",
        out.describe()
    );
    let cmd = out.result("cmdline");
    assert!(
        cmd == "ENOENT" || cmd == "OK:nocanary",
        "ESCAPE: host cmdline readable: {cmd}\n{}",
        out.describe()
    );
    assert_eq!(out.result("scan"), "none", "{}", out.describe());
    assert!(canary.alive());
}

#[test]
fn proc_shows_only_sandbox_pids() {
    let mut canary = HostProcess::sleeper(&marker("pids"));
    let script = r#"
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
say('pids', ','.join(map(str, pids)))
say('self', os.getpid())
say('canary_visible', str(int(sys.argv[1]) in pids))
with open('/proc/1/cmdline', 'rb') as f:
    say('init', f.read().replace(b'\0', b' ').decode(errors='replace').strip() or '<empty>')
"#;
    let out = Sandbox::new().py(script, &[&canary.pid().to_string()]);
    let pids: Vec<u32> = out
        .result("pids")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(
        pids.contains(&1),
        "no pid 1: not a fresh /proc for a new pid namespace\n{}",
        out.describe()
    );
    assert!(
        pids.len() <= 4,
        "{} pids visible in the sandbox, expected only the sandbox's own few: {pids:?}\n{}",
        pids.len(),
        out.describe()
    );
    let own: u32 = out.result("self").parse().unwrap();
    assert!(
        own <= 4,
        "payload pid {own} is not small: host pid namespace?"
    );
    assert_eq!(out.result("canary_visible"), "False");
    assert!(canary.alive());
}

#[test]
fn cannot_signal_host_process() {
    let mut canary = HostProcess::sleeper(&marker("signal"));
    let script = r#"
import signal
pid = int(sys.argv[1])
attempt('probe', lambda: os.kill(pid, 0))
attempt('term', lambda: os.kill(pid, signal.SIGTERM))
attempt('kill', lambda: os.kill(pid, signal.SIGKILL))
attempt('pgrp', lambda: os.killpg(pid, signal.SIGKILL))
attempt('pidfd', lambda: sysc(434, pid, 0))  # pidfd_open
"#;
    let out = Sandbox::new().py(script, &[&canary.pid().to_string()]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        canary.alive(),
        "ESCAPE: host process {} was killed from the sandbox\n{}",
        canary.pid(),
        out.describe()
    );
    // The host pid does not exist in the sandbox's pid namespace. (A colliding sandbox pid
    // is impossible here: the sandbox has only a few low pids and the host pid is larger.)
    assert!(canary.pid() > 16);
    for l in ["probe", "term", "kill", "pgrp", "pidfd"] {
        out.expect_errno(l, &["ESRCH"]);
    }
}

#[test]
fn kill_all_reaches_only_the_sandbox() {
    // kill(-1, SIGKILL) as "root" of the sandbox. Destructive if the pid namespace failed,
    // so: preflight with the same flags, and the payload checks again and refuses.
    let sb = Sandbox::new().timeout("10s");
    preflight_pid_isolation(&sb);
    let mut canary = HostProcess::sleeper(&marker("killall"));
    let script = r#"
import signal
canary = int(sys.argv[1])
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
try:
    os.kill(canary, 0)
    visible = True
except ProcessLookupError:
    visible = False
except OSError:
    visible = True
if visible or len(pids) > 8 or os.getpid() > 8 or os.readlink('/proc/self/ns/pid') == sys.argv[2]:
    say('refused', 'not pid-isolated: pids=%d self=%d canary_visible=%s' % (len(pids), os.getpid(), visible))
    sys.exit(99)
# A sibling inside the sandbox that must die.
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
attempt('killall', lambda: os.kill(-1, signal.SIGKILL))
_, st = os.waitpid(child, 0)
say('sibling', 'killed' if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9 else 'status %d' % st)
"#;
    let out = sb.py(script, &[&canary.pid().to_string(), &host_ns("pid")]);
    assert!(
        !out.results().contains_key("refused"),
        "payload refused: {}",
        out.describe()
    );
    out.expect_errno("killall", &["OK"]);
    assert_eq!(out.result("sibling"), "killed", "{}", out.describe());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        canary.alive(),
        "ESCAPE: kill(-1) inside the sandbox killed host process {}",
        canary.pid()
    );
}

#[test]
fn daemon_does_not_outlive_the_run() {
    let m = marker("daemon");
    let script = r#"
m = sys.argv[1]
say('pidns', os.readlink('/proc/self/ns/pid'))
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        for fd in (0, 1, 2):
            try:
                os.dup2(os.open('/dev/null', os.O_RDWR), fd)
            except OSError:
                pass
        os.write(w, b'up')
        os.close(w)
        os.execv('/bin/sleep', [m, '60'])
    os._exit(0)
os.close(w)
say('daemon', os.read(r, 2).decode())
"#;
    let out = Sandbox::new().py(script, &[&m]);
    assert_eq!(out.result("daemon"), "up", "{}", out.describe());
    let pidns = out.result("pidns");
    // When `sandboxio run` has returned, nothing of the sandbox may remain on the host.
    let by_marker = leftovers_of(&m, Duration::from_millis(500));
    let by_ns = host_pids_in_pidns(&pidns);
    kill_pids(&by_ns);
    assert!(
        by_marker.is_empty(),
        "ESCAPE: daemon survived the run as host pids {by_marker:?} (killed now)"
    );
    assert!(
        by_ns.is_empty(),
        "processes of the sandbox's pid namespace {pidns} survived: {by_ns:?} (killed now)"
    );
}

#[test]
fn cpu_spin_is_killed_at_timeout() {
    let m = marker("spin");
    let out = Sandbox::new().timeout("2s").sh("while :; do :; done", &m);
    let left = leftovers_of(&m, Duration::from_millis(500));
    assert!(
        left.is_empty(),
        "spinning process survived the timeout: {left:?} (killed now)"
    );
    assert!(
        out.timed_out(),
        "timed_out must be true\n{}",
        out.describe()
    );
    assert!(
        out.elapsed < Duration::from_secs(8),
        "run took {:?} with --timeout 2s",
        out.elapsed
    );
    assert!(
        out.exit_signal().is_some() || out.exit_code().is_some(),
        "{}",
        out.describe()
    );
    assert_eq!(
        out.status.code(),
        Some(crate::resources::TIMEOUT_EXIT),
        "sandboxio must exit with its documented timeout code"
    );
}

#[test]
fn spin_in_background_children_is_killed_at_timeout() {
    // The top process waits; its children spin in a new session. All must go.
    let m = marker("spinkids");
    let script = "for i in 1 2 3; do setsid sh -c 'while :; do :; done' \"$0\" & done; wait";
    let out = Sandbox::new().timeout("2s").sh(script, &m);
    let left = leftovers_of(&m, Duration::from_millis(500));
    assert!(left.is_empty(), "spinners survived: {left:?} (killed now)");
    assert!(out.timed_out(), "{}", out.describe());
    assert_eq!(out.status.code(), Some(crate::resources::TIMEOUT_EXIT));
}

const PTRACE: &str = r#"
PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206
child = os.fork()
if child == 0:
    time.sleep(5)
    os._exit(0)
attempt('attach', lambda: sysc(101, PTRACE_ATTACH, child, 0, 0))
attempt('seize', lambda: sysc(101, PTRACE_SEIZE, child, 0, 0))
# process_vm_readv of the child's memory
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
attempt('vm_readv', lambda: sysc(310, child, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0))
attempt('vm_writev', lambda: sysc(311, child, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0))
os.kill(child, 9)
os.waitpid(child, 0)
"#;

#[test]
fn cannot_ptrace() {
    let control = host_control(PTRACE, &[]);
    assert!(
        control["attach"].starts_with("OK"),
        "control: ptrace works on the host: {control:?}"
    );
    let out = Sandbox::new().py(PTRACE, &[]);
    out.expect_errno("attach", &["EPERM"]);
    out.expect_errno("seize", &["EPERM"]);
    out.expect_errno("vm_readv", &["EPERM"]);
    out.expect_errno("vm_writev", &["EPERM"]);
}

#[test]
fn sandboxes_cannot_reach_each_other() {
    // Sandbox A listens on an abstract socket and sleeps with a marker; sandbox B, run at
    // the same time (both map root to the same host id), must neither see A's processes nor
    // reach its socket.
    require_holds();
    let m = marker("neighbour");
    let a_script = format!(
        "{PRELUDE}\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         s.bind('\\0' + sys.argv[1])\ns.listen(1)\nsay('listening', 'yes')\n\
         os.execv('/bin/sleep', [sys.argv[1], '6'])\n"
    );
    let m2 = m.clone();
    let a = std::thread::spawn(move || {
        Sandbox::new()
            .timeout("15s")
            .attack(&[PY, "-c", &a_script, &m2])
    });
    // Wait until A's sleeper is up (seen from the host by its marker).
    let start = std::time::Instant::now();
    while host_pids_with_marker(&m).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !host_pids_with_marker(&m).is_empty(),
        "sandbox A never started"
    );
    let script = r#"
m = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(2)
attempt('connect', lambda: s.connect('\0' + m))
seen = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if m.encode() in open('/proc/%s/cmdline' % p, 'rb').read():
                seen.append(p)
        except OSError:
            pass
say('seen', ','.join(seen) or 'none')
"#;
    let b = Sandbox::new().py(script, &[&m]);
    let a = a.join().unwrap();
    assert!(a.stdout().contains("listening=yes"), "{}", a.describe());
    b.expect_errno("connect", &["ECONNREFUSED"]);
    assert_eq!(b.result("seen"), "none", "{}", b.describe());
}

#[test]
fn cannot_reach_the_sandbox_init_helper() {
    // Pid 1 inside is sandboxio's own helper (a host binary holding pipes to the
    // supervisor). Its fds, memory, exe (the runc CVE-2019-5736 path to overwrite the host
    // runtime binary) and root must be out of reach, and it must survive signals.
    let script = r#"
import signal
for name, p in [('fd', '/proc/1/fd'), ('exe', '/proc/1/exe'), ('root', '/proc/1/root'), ('cwd', '/proc/1/cwd')]:
    attempt(name, lambda: os.listdir(p) if name in ('fd', 'root', 'cwd') else os.readlink(p))
for name, p, mode in [('exe_write', '/proc/1/exe', os.O_WRONLY), ('mem', '/proc/1/mem', os.O_RDWR),
                      ('environ', '/proc/1/environ', os.O_RDONLY)]:
    attempt(name, lambda: os.close(os.open(p, mode)))
for fd in range(3, 64):
    attempt('fd%d' % fd, lambda: os.close(os.open('/proc/1/fd/%d' % fd, os.O_WRONLY)))
attempt('sigkill', lambda: os.kill(1, signal.SIGKILL))
attempt('sigterm', lambda: os.kill(1, signal.SIGTERM))
time.sleep(0.2)
attempt('alive', lambda: os.kill(1, 0))
"#;
    let out = Sandbox::new().py(script, &[]);
    for l in ["fd", "exe", "root", "cwd", "exe_write", "mem", "environ"] {
        out.expect_errno(l, &["EACCES", "EPERM"]);
    }
    for fd in 3..64 {
        out.expect_errno(&format!("fd{fd}"), &["EACCES", "EPERM", "ENOENT"]);
    }
    // Signals to the init are refused outright (Landlock signal scoping: EPERM) or dropped
    // (a namespace init without a handler); either way it is still there (not ESRCH).
    out.expect_errno("sigkill", &["EPERM", "OK"]);
    out.expect_errno("sigterm", &["EPERM", "OK"]);
    out.expect_errno("alive", &["EPERM", "OK"]);
    assert!(
        !out.timed_out(),
        "init stopped reaping after signals\n{}",
        out.describe()
    );
}
