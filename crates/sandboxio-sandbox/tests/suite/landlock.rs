//! Landlock fallback tier against the real helper: denied unless configured, Landlock really
//! enforced (the same payload reads on the process tier), writes only to the workspace and
//! output, no sockets, honest enforcement record.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use sandboxio_core::{ErrorCode, ExecRequest, ExecResult, ExitStatus, IsolationTier};
use sandboxio_sandbox::{run, CgroupUsage, SandboxConfig};

use super::{cfg, sh};

fn ll_cfg() -> SandboxConfig {
    SandboxConfig {
        landlock_fallback: true,
        ..cfg(CgroupUsage::Auto)
    }
}

fn skip() -> bool {
    // SAFETY: the version query takes no pointer and only returns a number.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    if v < 1 {
        eprintln!("SKIP: Landlock unavailable on this kernel");
        return true;
    }
    false
}

async fn ll(req: &ExecRequest) -> ExecResult {
    let r = run(req, IsolationTier::Landlock, &ll_cfg(), None)
        .await
        .unwrap();
    super::assert_no_cgroup_left(&r.sandbox_id);
    r
}

const PY: &str = "/usr/bin/python3";

fn py(script: &str) -> ExecRequest {
    let prelude = r#"
import os, sys, errno, socket
def attempt(label, fn):
    try:
        r = fn()
        print('%s=OK' % label, flush=True)
    except OSError as e:
        print('%s=%s' % (label, errno.errorcode.get(e.errno, str(e.errno))), flush=True)
"#;
    let mut req = ExecRequest::new([PY, "-c", &format!("{prelude}\n{script}")]);
    req.limits.timeout = Duration::from_secs(20);
    req
}

fn result<'a>(r: &'a ExecResult, label: &str) -> &'a str {
    let prefix = format!("{label}=");
    std::str::from_utf8(&r.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{label}` in output: {r:?}"))
}

/// A host file every uid may read (0644 in a 0755 directory): only Landlock can deny it.
fn world_readable_host_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("host-secret.txt");
    std::fs::write(&f, "host-canary").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    (d, f)
}

#[tokio::test]
async fn denied_unless_the_configuration_allows_it() {
    let req = sh("true");
    let e = run(&req, IsolationTier::Landlock, &cfg(CgroupUsage::Auto), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "SBX_E1429", "{e}");
    assert!(e.to_string().contains("landlock_fallback"), "{e}");
}

#[tokio::test]
async fn runs_and_says_what_it_enforced_and_what_not() {
    if skip() {
        return;
    }
    let r = ll(&sh("echo hi; exit 3")).await;
    assert_eq!(r.exit, ExitStatus::Code(3), "{r:?}");
    assert_eq!(r.stdout_lossy(), "hi\n");
    let e = &r.enforcement;
    assert_eq!(e.tier, Some(IsolationTier::Landlock));
    assert!(e.namespaces.is_empty());
    assert!(e.landlock_abi.is_some());
    assert!(e.seccomp && e.no_new_privs);
    assert_eq!(e.network, "none");
    for gap in [
        "no pid namespace",
        "no mount namespace",
        "no network namespace",
        "tmp_size",
    ] {
        assert!(e.gaps.iter().any(|g| g.starts_with(gap)), "{gap}: {e:?}");
    }
    assert!(e.limits.iter().any(|l| l.starts_with("output_size=")));
    assert_eq!(r.meter.as_ref().unwrap().backend, "landlock");
}

#[tokio::test]
async fn landlock_is_enforced_where_the_process_tier_reads() {
    if skip() {
        return;
    }
    let (_keep, host_file) = world_readable_host_file();
    let script = format!(
        r#"
attempt('shadow', lambda: open('/etc/shadow').read())
attempt('passwd', lambda: open('/etc/passwd').read())
attempt('hostfile', lambda: open({host:?}).read())
attempt('root', lambda: os.listdir('/root'))
attempt('proc1', lambda: open('/proc/1/cmdline').read())
attempt('home', lambda: os.listdir('/home'))
attempt('usr', lambda: open('/usr/bin/env', 'rb').read(4))
"#,
        host = host_file.to_str().unwrap()
    );
    let req = py(&script);
    let r = ll(&req).await;
    assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
    for label in ["shadow", "passwd", "hostfile", "root", "proc1", "home"] {
        assert_eq!(result(&r, label), "EACCES", "{label}: {}", r.stdout_lossy());
    }
    assert_eq!(result(&r, "usr"), "OK");

    // The very same payload on the process tier reads the world-readable host file and
    // /etc/passwd: the denial above is Landlock's, not file permissions'.
    let p = run(&req, IsolationTier::Process, &cfg(CgroupUsage::Auto), None)
        .await
        .unwrap();
    assert_eq!(result(&p, "hostfile"), "OK", "{}", p.stdout_lossy());
    assert_eq!(result(&p, "passwd"), "OK", "{}", p.stdout_lossy());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(result(&p, "shadow"), "OK", "{}", p.stdout_lossy());
    }
}

#[tokio::test]
async fn writes_only_to_the_workspace_tmp_and_output() {
    if skip() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let open_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = format!(
        r#"
def w(p):
    with open(p, 'w') as f:
        f.write('x')
attempt('output', lambda: w(os.path.join(os.environ['SANDBOX_OUTPUT'], 'result.txt')))
attempt('tmpdir', lambda: w(os.path.join(os.environ['TMPDIR'], 't')))
attempt('cwd', lambda: w('c'))
attempt('host_tmp', lambda: w('/tmp/sbx-landlock-escape-%d' % os.getpid()))
attempt('open_dir', lambda: w({open_dir:?} + '/planted'))
attempt('dev_shm', lambda: w('/dev/shm/sbx-landlock-escape'))
attempt('mkdir_usr', lambda: os.mkdir('/usr/local/sbx-escape'))
"#,
        open_dir = open_dir.path().to_str().unwrap()
    );
    let mut req = py(&script);
    req.output_dir = Some(out.path().to_path_buf());
    let r = ll(&req).await;
    assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
    for ok in ["output", "tmpdir", "cwd"] {
        assert_eq!(result(&r, ok), "OK", "{ok}: {}", r.stdout_lossy());
    }
    for denied in ["host_tmp", "open_dir", "dev_shm", "mkdir_usr"] {
        assert_eq!(
            result(&r, denied),
            "EACCES",
            "{denied}: {}",
            r.stdout_lossy()
        );
    }
    assert!(std::fs::read_dir(open_dir.path()).unwrap().next().is_none());
    assert_eq!(
        std::fs::read_to_string(out.path().join("result.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn no_sockets_but_socketpair() {
    if skip() {
        return;
    }
    let script = r#"
attempt('inet', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt('inet6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
attempt('unix', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt('netlink', lambda: socket.socket(16, socket.SOCK_RAW, 0))
attempt('pair', lambda: socket.socketpair())
attempt('seqpacket_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
# A datagram pair can sendto() any host socket path (journald, /dev/log): refused.
attempt('dgram_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
"#;
    let r = ll(&py(script)).await;
    for denied in ["inet", "udp", "inet6", "unix", "netlink"] {
        assert_eq!(
            result(&r, denied),
            "EAFNOSUPPORT",
            "{denied}: {}",
            r.stdout_lossy()
        );
    }
    assert_eq!(result(&r, "pair"), "OK", "{}", r.stdout_lossy());
    assert_eq!(result(&r, "seqpacket_pair"), "OK", "{}", r.stdout_lossy());
    assert_eq!(result(&r, "dgram_pair"), "EPERM", "{}", r.stdout_lossy());
}

/// The output directory of this tier is in the program's own workspace: the program can
/// put a symlink in its place (or below it). The copy to the caller's output directory,
/// made by the helper with the caller's rights, must follow none of them, or it reads for
/// the program what Landlock refused it.
#[tokio::test]
async fn copy_out_follows_no_symlink_the_program_planted() {
    if skip() {
        return;
    }
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("key"), b"host secret").unwrap();
    std::fs::create_dir(secret.path().join("sub")).unwrap();
    std::fs::write(secret.path().join("sub/deeper"), b"host secret").unwrap();
    let s = secret.path().to_str().unwrap();
    for (case, script) in [
        (
            "output replaced by a link",
            format!(
                "cat {s}/key || echo refused; cd \"$SANDBOX_OUTPUT/..\" && rmdir sandbox-output \
                 && ln -s {s} sandbox-output && echo planted"
            ),
        ),
        (
            "links below the output",
            format!(
                "mkdir \"$SANDBOX_OUTPUT/d\" && ln -s {s} \"$SANDBOX_OUTPUT/d/dir\" \
                 && ln -s {s}/key \"$SANDBOX_OUTPUT/file\" && echo mine > \"$SANDBOX_OUTPUT/own\" \
                 && echo planted"
            ),
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut req = sh(&script);
        req.output_dir = Some(out.path().to_path_buf());
        let r = ll(&req).await;
        let said = r.stdout_lossy();
        assert!(said.contains("planted"), "{case}: {r:?}");
        assert!(
            !said.contains("host secret"),
            "{case}: Landlock let it read: {r:?}"
        );
        let mut copied = Vec::new();
        let mut dirs = vec![out.path().to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let ft = e.file_type().unwrap();
                assert!(
                    !ft.is_symlink(),
                    "{case}: a link was copied: {:?}",
                    e.path()
                );
                if ft.is_dir() {
                    dirs.push(e.path());
                } else {
                    assert_ne!(
                        std::fs::read(e.path()).unwrap(),
                        b"host secret",
                        "{case}: the copy-out read a host file for the program: {:?}",
                        e.path()
                    );
                }
                copied.push(e.path().strip_prefix(out.path()).unwrap().to_path_buf());
            }
        }
        copied.sort();
        let want: Vec<std::path::PathBuf> = match case {
            "output replaced by a link" => Vec::new(),
            _ => vec!["d".into(), "own".into()],
        };
        assert_eq!(copied, want, "{case}: {r:?}");
    }
}

#[tokio::test]
async fn runs_as_a_fresh_unprivileged_uid_without_capabilities() {
    if skip() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: not root, the tier keeps the helper's own ids");
        return;
    }
    let r = ll(&sh(
        "id -u; id -g; id -G; grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status || echo noproc",
    ))
    .await;
    let out = r.stdout_lossy();
    let lines: Vec<&str> = out.lines().collect();
    let uid: u32 = lines[0].parse().unwrap();
    assert!(uid >= sandboxio_sandbox::fallback::ID_BASE, "{r:?}");
    assert_eq!(lines[1], lines[0]);
    assert_eq!(lines[2], lines[0], "supplementary groups left: {r:?}");
}

#[tokio::test]
async fn timeout_kills_the_tree() {
    if skip() {
        return;
    }
    let mut req = sh("sleep 100 & sleep 100");
    req.limits.timeout = Duration::from_millis(500);
    let t = std::time::Instant::now();
    let r = ll(&req).await;
    assert!(r.timed_out, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn sparse_output_stays_sparse_on_the_host() {
    if skip() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    // 60 MiB apparent (under RLIMIT_FSIZE, which stops a 1 GiB truncate), no data.
    let mut req = sh("truncate -s 60M \"$SANDBOX_OUTPUT/sparse\" && echo done");
    req.output_dir = Some(out.path().to_path_buf());
    let r = ll(&req).await;
    assert_eq!(r.stdout_lossy(), "done\n", "{r:?}");
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(out.path().join("sparse")).unwrap();
    assert_eq!(md.len(), 60 << 20);
    assert!(md.blocks() * 512 < 1 << 20);
}

#[tokio::test]
async fn cannot_signal_or_trace_host_processes() {
    if skip() {
        return;
    }
    // No pid namespace here: host processes exist, but a fresh uid, Landlock signal scoping
    // (ABI 6) and seccomp (ptrace) keep the payload away from them.
    let script = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def ptrace_attach(pid):
    if libc.ptrace(16, pid, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt('kill_init', lambda: os.kill(1, 0))
attempt('kill_helper', lambda: os.kill(os.getppid(), 0))
attempt('ptrace_init', lambda: ptrace_attach(1))
attempt('setuid0', lambda: os.setuid(0))
"#;
    let r = ll(&py(script)).await;
    for label in ["kill_init", "kill_helper", "ptrace_init", "setuid0"] {
        assert_eq!(result(&r, label), "EPERM", "{label}: {}", r.stdout_lossy());
    }
}

#[tokio::test]
async fn memfd_code_cannot_be_executed() {
    if skip() {
        return;
    }
    // Writable places are noexec by Landlock; an anonymous memory file must not be a way
    // around it (the tier has no pid namespace of its own, so seccomp requires the seal).
    let script = r#"
data = open('/usr/bin/echo', 'rb').read()
def run(label, flags):
    fd = os.memfd_create('p', flags)
    os.write(fd, data)
    pid = os.fork()
    if pid == 0:
        try:
            os.execv('/proc/self/fd/%d' % fd, ['echo', label + '=RAN'])
        except OSError as e:
            print('%s=%s' % (label, errno.errorcode.get(e.errno, str(e.errno))), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
for label, flags in [('plain', 0), ('exec', 0x10), ('sealed', 0x8)]:
    attempt(label + '_create', lambda: run(label, flags))
"#;
    let r = ll(&py(script)).await;
    assert_eq!(r.exit, ExitStatus::Code(0), "{r:?}");
    assert!(
        !r.stdout_lossy().contains("=RAN"),
        "ESCAPE: code ran from a memfd: {r:?}"
    );
    // Unsealed memfds are refused outright; a sealed one exists but cannot run.
    assert_eq!(result(&r, "plain_create"), "ENOSYS", "{r:?}");
    assert_eq!(result(&r, "exec_create"), "ENOSYS", "{r:?}");
    let out = r.stdout_lossy();
    let sealed = out.lines().find(|l| l.starts_with("sealed=")).unwrap_or("");
    assert!(
        sealed == "sealed=EACCES" || result(&r, "sealed_create") == "EINVAL",
        "{r:?}"
    );
}

/// The landlock tier starts its payload with the process tier's launcher: a failed `execve`
/// after every confinement step is the same typed error.
#[tokio::test]
async fn a_failed_exec_comes_back_typed() {
    if skip() {
        return;
    }
    let req = ExecRequest::new(["/nonexistent-sandboxio-dir/prog"]);
    let e = run(&req, IsolationTier::Landlock, &ll_cfg(), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "SBX_E1422", "{e}");
    assert!(
        e.to_string().contains("/nonexistent-sandboxio-dir/prog"),
        "{e}"
    );
    // The cause crosses the helper's process boundary with the message.
    assert!(e.to_string().contains("os error 2"), "{e}");
}
