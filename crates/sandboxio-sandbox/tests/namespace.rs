//! Namespace tier: real payloads through `ns::plan` + `ns::spawn`, asserting each mechanism.
//! Needs root and user namespaces; otherwise every test prints why it skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::Path;

use sandboxio_core::{ExecRequest, ExitStatus};
use sandboxio_sandbox::ns::{self, NsError, NsHostPaths};

struct Run {
    out: String,
    exit: Option<ExitStatus>,
    enforcement: serde_json::Value,
    error: Option<String>,
}

fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: the namespace helper runs as root".into());
    }
    if std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
    {
        return Some("user namespaces disabled".into());
    }
    None
}

macro_rules! require_ns {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("SKIP: {why}");
            return;
        }
    };
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: valid array for pipe2.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}

fn read_all(fd: i32) -> Vec<u8> {
    // SAFETY: the test owns `fd`.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Runs `req` in the namespace tier from a forked, single-threaded child that plays the
/// helper. stdout and stderr of the payload are merged.
fn run_in(req: &ExecRequest, ws: &Path, out_dir: &Path) -> Run {
    run_with(req, ws, out_dir, None)
}

/// Like `run_in`; with `kill_after`, the helper SIGKILLs the namespace init after that long
/// (what the framework does at a timeout).
fn run_with(
    req: &ExecRequest,
    ws: &Path,
    out_dir: &Path,
    kill_after: Option<std::time::Duration>,
) -> Run {
    let host = NsHostPaths {
        workspace: ws.to_path_buf(),
        output: out_dir.to_path_buf(),
    };
    let env: BTreeMap<String, String> = BTreeMap::new();
    let plan = ns::plan(req, &host, &env).unwrap();
    let (out_r, out_w) = pipe();
    let (res_r, res_w) = pipe();
    // SAFETY: the child only uses memory prepared here and ends in _exit; glibc's fork
    // keeps malloc usable in the child.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain fd juggling in the child.
        unsafe {
            libc::dup2(out_w, 1);
            libc::dup2(out_w, 2);
            libc::dup2(libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY), 0);
        }
        let value = match ns::spawn(&plan, vec![], |_| Ok::<(), NsError>(())) {
            Err(e) => serde_json::json!({"error": e.to_string()}),
            Ok(child) => {
                if let Some(d) = kill_after {
                    std::thread::sleep(d);
                    // SAFETY: killing our own child, the namespace init.
                    unsafe { libc::kill(child.pid(), libc::SIGKILL) };
                }
                let mut st = 0;
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(child.pid(), &mut st, 0) };
                match child.finish() {
                    Ok(o) => serde_json::json!({"exit": o.exit, "enforcement": o.enforcement}),
                    Err(e) => serde_json::json!({"error": e.to_string()}),
                }
            }
        };
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        // SAFETY: writing the result and leaving without running test destructors.
        unsafe {
            libc::write(res_w, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing the parent's copies of the write ends.
    unsafe {
        libc::close(out_w);
        libc::close(res_w);
    }
    let out = String::from_utf8_lossy(&read_all(out_r)).into_owned();
    let res: serde_json::Value = serde_json::from_slice(&read_all(res_r)).unwrap();
    let mut st = 0;
    // SAFETY: reaping the forked helper.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    Run {
        out,
        exit: res
            .get("exit")
            .and_then(|e| serde_json::from_value(e.clone()).ok()),
        enforcement: res.get("enforcement").cloned().unwrap_or_default(),
        error: res.get("error").and_then(|e| e.as_str()).map(String::from),
    }
}

fn sh(script: &str) -> Run {
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    run_in(
        &ExecRequest::new(["/bin/sh", "-c", script]),
        ws.path(),
        out.path(),
    )
}

fn assert_lines(run: &Run, expected: &[&str]) {
    assert!(
        run.error.is_none(),
        "setup error: {:?}\n{}",
        run.error,
        run.out
    );
    for e in expected {
        assert!(
            run.out.lines().any(|l| l == *e),
            "missing line `{e}` in output:\n{}",
            run.out
        );
    }
}

#[test]
fn exit_code_and_signal_are_the_payloads() {
    require_ns!();
    let r = sh("exit 7");
    assert_eq!(r.exit, Some(ExitStatus::Code(7)), "{:?} {}", r.error, r.out);
    let r = sh("kill -9 $$");
    assert_eq!(
        r.exit,
        Some(ExitStatus::Signal(9)),
        "{:?} {}",
        r.error,
        r.out
    );
}

#[test]
fn host_secrets_are_not_visible() {
    require_ns!();
    let r = sh(
        "test -e /etc/shadow || echo no-shadow; test -e /root || echo no-root; \
         test -e /home || echo no-home; test -e /sys/kernel || echo no-sys; \
         test -e /run || echo no-run; echo etc: $(ls /etc)",
    );
    assert_lines(&r, &["no-shadow", "no-root", "no-home", "no-sys", "no-run"]);
    let etc = r.out.lines().find(|l| l.starts_with("etc:")).unwrap();
    assert!(!etc.contains("shadow") && !etc.contains("ssh"), "{etc}");
    assert!(
        etc.contains("passwd") && etc.contains("ld.so.cache"),
        "{etc}"
    );
}

#[test]
fn only_tmp_and_output_and_workspace_are_writable() {
    require_ns!();
    let r = sh(
        "for d in / /usr /usr/bin /etc /dev /proc/sys/kernel /bin; do \
           (echo x > $d/probe) 2>/dev/null && echo writable:$d || echo ro:$d; done; \
         echo x > /tmp/a && echo writable:/tmp; echo x > /output/a && echo writable:/output; \
         echo x > /workspace/a && echo writable:/workspace",
    );
    assert_lines(
        &r,
        &[
            "ro:/",
            "ro:/usr",
            "ro:/usr/bin",
            "ro:/etc",
            "ro:/dev",
            "ro:/proc/sys/kernel",
            "ro:/bin",
            "writable:/tmp",
            "writable:/output",
            "writable:/workspace",
        ],
    );
}

#[test]
fn writable_places_are_noexec() {
    require_ns!();
    let r = sh(
        "cp /bin/true /tmp/t && chmod +x /tmp/t && (/tmp/t && echo exec-ok || echo exec-denied)",
    );
    assert_lines(&r, &["exec-denied"]);
}

#[test]
fn pid_namespace_hides_host_processes() {
    require_ns!();
    let r = sh("echo pid:$$; ls /proc | grep -cE '^[0-9]+$' | sed 's/^/count:/'; cat /proc/1/status | grep ^PPid");
    // sh is the payload (pid 2); the init is pid 1; ls and grep make at most 3 more.
    assert_lines(&r, &["pid:2", "PPid:\t0"]);
    let count: u32 = r
        .out
        .lines()
        .find_map(|l| l.strip_prefix("count:"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(count <= 6, "{}", r.out);
}

#[test]
fn uid_zero_inside_maps_to_nobody_and_has_no_capabilities() {
    require_ns!();
    let r = sh(
        "id -u; id -G; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; \
         grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t '",
    );
    assert_lines(
        &r,
        &[
            "0",
            "0 65534 1",
            "CapInh:0000000000000000",
            "CapPrm:0000000000000000",
            "CapEff:0000000000000000",
            "CapBnd:0000000000000000",
            "CapAmb:0000000000000000",
            "NoNewPrivs:1",
            "Seccomp:2",
        ],
    );
}

#[test]
fn only_loopback_exists() {
    require_ns!();
    let r = sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; hostname");
    let ifaces: Vec<&str> = r.out.lines().collect();
    assert_eq!(ifaces, vec!["lo", "sandbox"], "{}", r.out);
}

const PY_PROBE: &str = r#"
import ctypes, errno, socket, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return errno.errorcode.get(ctypes.get_errno(), "0") if r == -1 else "ok"
print("unshare", call("unshare", 0x10000000))
print("ptrace", call("ptrace", 16, 1, 0, 0))
print("mount", call("mount", b"none", b"/tmp", b"tmpfs", 0, None))
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM); print("inet ok")
except OSError as e: print("inet", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); print("netlink ok")
except OSError as e: print("netlink", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print("unix ok")
except OSError as e: print("unix", errno.errorcode[e.errno])
pid = os.fork()
if pid == 0: os._exit(3)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"#;

#[test]
fn seccomp_rules_fire_in_the_real_sandbox() {
    require_ns!();
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIP: /usr/bin/python3 missing");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("probe.py"), PY_PROBE).unwrap();
    let out = tempfile::tempdir().unwrap();
    let r = run_in(
        &ExecRequest::new(["python3", "probe.py"]),
        ws.path(),
        out.path(),
    );
    assert_lines(
        &r,
        &[
            "unshare EPERM",
            "ptrace EPERM",
            "mount EPERM",
            "inet EAFNOSUPPORT",
            "netlink EAFNOSUPPORT",
            "unix ok",
            "fork 3",
        ],
    );
    assert_eq!(r.exit, Some(ExitStatus::Code(0)));
}

#[test]
fn output_files_reach_the_host_and_symlinks_do_not() {
    require_ns!();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "from-host").unwrap();
    let out = tempfile::tempdir().unwrap();
    let r = run_in(
        &ExecRequest::new([
            "/bin/sh",
            "-c",
            "cat in.txt > $SANDBOX_OUTPUT/copy.txt; mkdir $SANDBOX_OUTPUT/sub; \
             echo deep > $SANDBOX_OUTPUT/sub/f; ln -s /etc/passwd $SANDBOX_OUTPUT/link; pwd",
        ]),
        ws.path(),
        out.path(),
    );
    assert_lines(&r, &["/workspace"]);
    assert_eq!(
        std::fs::read_to_string(out.path().join("copy.txt")).unwrap(),
        "from-host"
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("sub/f")).unwrap(),
        "deep\n"
    );
    assert!(std::fs::symlink_metadata(out.path().join("link")).is_err());
}

#[test]
fn output_and_tmp_are_size_capped() {
    require_ns!();
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut req = ExecRequest::new([
        "/bin/sh",
        "-c",
        "head -c 3000000 /dev/zero > /output/big && echo out-fit || echo out-full; \
         head -c 3000000 /dev/zero > /tmp/big && echo tmp-fit || echo tmp-full",
    ]);
    req.limits.output_size = sandboxio_core::ByteSize::mib(1);
    req.limits.tmp_size = sandboxio_core::ByteSize::mib(1);
    let r = run_in(&req, ws.path(), out.path());
    assert_lines(&r, &["out-full", "tmp-full"]);
}

#[test]
fn enforcement_reports_what_was_applied() {
    require_ns!();
    let roots = [
        std::env::temp_dir(),
        sandboxio_sandbox::config::default_work_root(),
    ];
    // Staging directories of helpers that are gone. Only those that appear during this
    // run count: another process's killed run may have left one before (the sweep's to
    // remove), and a live helper of a concurrent test owns its own.
    let orphaned = || -> std::collections::BTreeSet<std::path::PathBuf> {
        roots
            .iter()
            .flat_map(|root| std::fs::read_dir(root).unwrap().flatten())
            .filter(|d| {
                let name = d.file_name().to_string_lossy().into_owned();
                name.starts_with(ns::STAGING_PREFIX)
                    && sandboxio_sandbox::sweep::parse_owner(&name).is_none_or(|o| !o.alive())
            })
            .map(|d| d.path())
            .collect()
    };
    let before = orphaned();
    let r = sh("true");
    assert_eq!(r.exit, Some(ExitStatus::Code(0)), "{:?}", r.error);
    let e = &r.enforcement;
    assert_eq!(e["tier"], "namespace");
    assert_eq!(e["seccomp"], true);
    assert_eq!(e["no_new_privs"], true);
    assert_eq!(e["network"], "none");
    assert!(e["limits"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().starts_with("output_size=")));
    let left: Vec<_> = orphaned().difference(&before).cloned().collect();
    assert!(
        left.is_empty(),
        "the run left its staging dir behind: {left:?}"
    );
    let ns: Vec<&str> = e["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ns, ns::NAMESPACES.to_vec());
    if ns::landlock::abi_version().is_some() {
        assert!(e["landlock_abi"].as_u64().unwrap() >= 1, "{e}");
    }
}

#[test]
fn missing_program_is_an_exec_error() {
    require_ns!();
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let r = run_in(
        &ExecRequest::new(["no-such-program"]),
        ws.path(),
        out.path(),
    );
    let err = r.error.unwrap();
    assert!(err.contains("no-such-program"), "{err}");
}

/// Processes on the host whose command line is exactly `argv` (read-only scan of /proc).
fn host_processes_with_cmdline(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
        .count()
}

#[test]
fn a_double_forked_daemon_dies_with_the_payload() {
    require_ns!();
    let r = sh("(sleep 9876 &) ; echo started");
    assert_lines(&r, &["started"]);
    assert_eq!(r.exit, Some(ExitStatus::Code(0)));
    // The init exited with the payload, so the kernel killed the rest of the namespace.
    assert_eq!(host_processes_with_cmdline(&["sleep", "9876"]), 0);
}

#[test]
fn killing_the_init_ends_the_whole_sandbox() {
    require_ns!();
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let req = ExecRequest::new(["/bin/sh", "-c", "sleep 9875 & sleep 9875; echo never"]);
    let started = std::time::Instant::now();
    let r = run_with(
        &req,
        ws.path(),
        out.path(),
        Some(std::time::Duration::from_millis(300)),
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(r.exit, None, "{:?} {}", r.error, r.out);
    assert!(!r.out.contains("never"));
    assert_eq!(host_processes_with_cmdline(&["sleep", "9875"]), 0);
}

#[test]
fn host_root_files_are_foreign_to_root_inside() {
    require_ns!();
    let r = sh(
        "stat -c owner:%u:%g /usr/bin/env; \
         (chmod 777 /usr/bin/env 2>/dev/null && echo chmod-ok) || echo chmod-denied; \
         (echo x > /dev/shm/f && echo shm-ok); (cat /proc/kcore | head -c1 | wc -c | sed 's/^/kcore:/')",
    );
    assert_lines(
        &r,
        &["owner:65534:65534", "chmod-denied", "shm-ok", "kcore:0"],
    );
}

#[test]
fn the_init_is_not_readable_by_the_payload() {
    require_ns!();
    let r = sh(
        "(cat /proc/1/environ >/dev/null 2>&1 && echo environ-read) || echo environ-denied; \
         (head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem-read) || echo mem-denied",
    );
    assert_lines(&r, &["environ-denied", "mem-denied"]);
}

#[test]
fn a_mount_source_with_a_symlink_on_its_path_is_refused() {
    require_ns!();
    // The gateway hands over resolved host paths; a link found on the path at mount time
    // (swapped in since) is refused, never followed.
    let host = tempfile::tempdir().unwrap();
    let real = host.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("f"), "through-the-link").unwrap();
    std::os::unix::fs::symlink(&real, host.path().join("link")).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut req = ExecRequest::new(["/bin/cat", "/m/f"]);
    req.mounts = vec![sandboxio_core::Mount::parse(
        &format!("{}/link:/m", host.path().display()),
        Path::new("/"),
    )
    .unwrap()];
    let r = run_in(&req, ws.path(), out.path());
    assert!(!r.out.contains("through-the-link"), "{}", r.out);
    let err = r.error.expect("the mount must be refused");
    assert!(
        err.contains("ELOOP") || err.contains("symbolic") || err.contains("40"),
        "{err}"
    );
    // Control: the resolved path mounts and reads.
    req.mounts[0].host = real.clone();
    let r = run_in(&req, ws.path(), out.path());
    assert_lines(&r, &["through-the-link"]);
}

#[test]
fn a_host_mount_below_a_read_only_mount_is_read_only_too() {
    require_ns!();
    // A tmpfs mounted (on the host side) inside the directory given as a read-only mount.
    let host = tempfile::tempdir().unwrap();
    let sub = host.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let src = std::ffi::CString::new(sub.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: valid C strings; a private tmpfs on a directory this test made (root only).
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            src.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        eprintln!("SKIP: cannot mount a tmpfs for the test");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // The write is refused by Landlock too (a `ro` mount gets read+execute only), so the
    // mount's own flags are read from mountinfo: the submount must be `ro` itself.
    let mut req = ExecRequest::new([
        "/bin/sh",
        "-c",
        "echo x > /m/sub/w 2>/dev/null && echo wrote || echo refused; \
         while read -r _ _ _ _ mp opts _; do \
           [ \"$mp\" = /m/sub ] && echo \"opts=${opts%%,*}\"; \
         done < /proc/self/mountinfo",
    ]);
    req.mounts = vec![sandboxio_core::Mount::parse(
        &format!("{}:/m", host.path().display()),
        Path::new("/"),
    )
    .unwrap()];
    let r = run_in(&req, ws.path(), out.path());
    // SAFETY: unmounting the tmpfs mounted above.
    unsafe { libc::umount2(src.as_ptr(), libc::MNT_DETACH) };
    assert_lines(&r, &["refused", "opts=ro"]);
    assert!(!sub.join("w").exists());
}
