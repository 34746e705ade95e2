//! Running `sandboxio` as another uid, inside a test-made user namespace, or under a
//! seccomp filter compiled here; probing what the host allows.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");
/// The unprivileged user the tests run as (`nobody`: exists everywhere, owns nothing).
pub const NOBODY: u32 = 65534;

/// Whether this test process is root (able to switch to another uid).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn sysctl(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into())
}

/// The host's user-namespace settings, for skip messages.
pub fn userns_sysctls() -> String {
    format!(
        "user.max_user_namespaces={} kernel.unprivileged_userns_clone={} \
         kernel.apparmor_restrict_unprivileged_userns={}",
        sysctl("/proc/sys/user/max_user_namespaces"),
        sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
        sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    )
}

/// `Ok` when `uid` may create a user namespace with a mount namespace inside
/// (`unshare -Urm true` as that user), else why not.
pub fn userns_works_for(uid: u32) -> Result<(), String> {
    let mut cmd = Command::new("unshare");
    cmd.args(["-Urm", "true"]);
    if uid != current_uid() {
        cmd.uid(uid).gid(uid);
    }
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`unshare -Urm true` as uid {uid} failed: {} ({})",
            String::from_utf8_lossy(&o.stderr).trim(),
            userns_sysctls()
        )),
        Err(e) => Err(format!("cannot run unshare: {e}")),
    }
}

pub fn current_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// The precondition of the unprivileged-user tests: root here (to become `nobody`) and
/// user namespaces allowed for `nobody`. `None` (reason printed): skip.
pub fn as_nobody() -> Option<User> {
    if !is_root() {
        eprintln!("SKIP: the test must start as root to switch to uid {NOBODY}");
        return None;
    }
    if let Err(why) = userns_works_for(NOBODY) {
        eprintln!("SKIP: this host does not give uid {NOBODY} user namespaces: {why}");
        return None;
    }
    Some(User::new(NOBODY))
}

/// A uid with a private state directory (its HOME and cwd) that it owns.
pub struct User {
    pub uid: u32,
    pub dir: tempfile::TempDir,
}

impl User {
    pub fn new(uid: u32) -> User {
        let dir = tempfile::Builder::new()
            .prefix("sbx-nonroot-")
            .tempdir()
            .expect("state tempdir");
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).expect("chown state dir");
        User { uid, dir }
    }

    pub fn state(&self) -> &Path {
        self.dir.path()
    }

    /// `sandboxio <args>` as this user: its own HOME, cwd and state dir, a plain PATH,
    /// no supplementary groups (std drops them when root changes the uid).
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.state())
            .env("SBX_STATE_DIR", self.state())
            // Trusted configurations: the user's own list, wherever the command runs (a
            // simulated host's user namespace makes it root there).
            .env("SBX_TRUSTED_CONFIGS", self.state().join("trusted-configs"))
            .current_dir(self.state())
            .stdin(Stdio::null());
        if self.uid != current_uid() {
            cmd.uid(self.uid).gid(self.uid);
        }
        cmd
    }

    /// Writes a `sandboxio.toml` into the user's cwd and trusts it as that user (a
    /// configuration found in the working directory is read only once trusted).
    pub fn config(&self, toml: &str) {
        let p = self.state().join("sandboxio.toml");
        std::fs::write(&p, toml).expect("write config");
        std::os::unix::fs::chown(&p, Some(self.uid), Some(self.uid)).expect("chown config");
        let o = output(self.cli(&["trust"]));
        assert!(o.status.success(), "trust: {}", text(&o.stderr));
    }
}

/// Runs a command and returns its output, panicking if it cannot start.
pub fn output(mut cmd: Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// The `--json` result printed by `run` (panics with everything when it is not JSON).
pub fn json(o: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "expected one JSON document on stdout ({e})\nstatus {:?}\nstdout: {stdout}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A host as the tests simulate it around `sandboxio`.
#[derive(Clone, Copy, Debug)]
pub enum Host<'a> {
    /// Inside a fresh user namespace (as its root) in which `user.max_user_namespaces` was
    /// set to 0: a host with user namespaces switched off, as far as anything inside can tell.
    UsernsOff,
    /// Under the seccomp wrapper of [`deny_tool`] at this path; the string says what it
    /// refuses: `userns`, `landlock`, `seccomp`, or several joined by commas.
    Seccomp(&'a Path, &'a str),
}

impl User {
    /// `sandboxio <args>` as this user, on the simulated `host`.
    pub fn cli_on(&self, host: Host<'_>, args: &[&str]) -> Command {
        let inner = self.cli(args);
        let mut cmd = match host {
            Host::UsernsOff => {
                let mut c = Command::new("unshare");
                c.args(["-Ur", "sh", "-c"])
                    .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
                    .arg("sh");
                c
            }
            Host::Seccomp(tool, what) => {
                let mut c = Command::new(tool);
                c.arg(what);
                c
            }
        };
        cmd.arg(inner.get_program()).args(inner.get_args());
        cmd.env_clear();
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd.current_dir(self.state()).stdin(Stdio::null());
        if self.uid != current_uid() {
            cmd.uid(self.uid).gid(self.uid);
        }
        cmd
    }
}

/// A C program that installs a seccomp filter, then execs its arguments. Like Docker's
/// default profile it refuses `unshare`/`clone` with `CLONE_NEWUSER` (EPERM) and `clone3`
/// (ENOSYS, so callers fall back to clone); with `landlock` it refuses the three Landlock
/// syscalls with ENOSYS (a kernel without Landlock); with `seccomp` it refuses `seccomp()`
/// with ENOSYS (a kernel without seccomp filters; this wrapper installs its own filter
/// through prctl first).
const DENY_SRC: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define IF_NR(nr, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), (t), (f))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: deny userns|landlock|userns,landlock cmd...\n"); return 2; }
    int userns = strstr(argv[1], "userns") != NULL;
    int landlock = strstr(argv[1], "landlock") != NULL;
    int no_seccomp = strstr(argv[1], "seccomp") != NULL;
    struct sock_filter f[32];
    int n = 0;
    f[n++] = (struct sock_filter)LD(offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)IF_NR(AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
    f[n++] = (struct sock_filter)LD(offsetof(struct seccomp_data, nr));
    if (landlock) {
        f[n++] = (struct sock_filter)IF_NR(__NR_landlock_create_ruleset, 3, 0);
        f[n++] = (struct sock_filter)IF_NR(__NR_landlock_add_rule, 2, 0);
        f[n++] = (struct sock_filter)IF_NR(__NR_landlock_restrict_self, 1, 0);
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0);
        f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS);
    }
    if (no_seccomp) {
        f[n++] = (struct sock_filter)IF_NR(__NR_seccomp, 0, 1);
        f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS);
    }
    if (userns) {
        f[n++] = (struct sock_filter)IF_NR(__NR_clone3, 0, 1);
        f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS);
        f[n++] = (struct sock_filter)IF_NR(__NR_unshare, 1, 0);
        f[n++] = (struct sock_filter)IF_NR(__NR_clone, 0, 3);
        f[n++] = (struct sock_filter)LD(offsetof(struct seccomp_data, args[0]));
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1);
        f[n++] = (struct sock_filter)RET(SECCOMP_RET_ERRNO | EPERM);
    }
    f[n++] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
    struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { perror("no_new_privs"); return 3; }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) { perror("seccomp"); return 3; }
    execv(argv[2], argv + 2);
    perror("execv");
    return 127;
}
"#;

/// The seccomp wrapper, compiled once per test process into a directory every uid can
/// read. `None` (reason printed): no C compiler here.
pub fn deny_tool() -> Option<PathBuf> {
    static TOOL: OnceLock<Option<(tempfile::TempDir, PathBuf)>> = OnceLock::new();
    TOOL.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        if std::env::consts::ARCH != "x86_64" {
            eprintln!("SKIP: the seccomp wrapper is written for x86_64 only");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("sbx-deny-")
            .tempdir()
            .expect("tool dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let src = dir.path().join("deny.c");
        std::fs::write(&src, DENY_SRC).unwrap();
        let bin = dir.path().join("deny");
        match Command::new("gcc")
            .arg("-O1")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
        {
            Ok(o) if o.status.success() => Some((dir, bin)),
            Ok(o) => panic!("gcc failed on the seccomp wrapper: {}", text(&o.stderr)),
            Err(e) => {
                eprintln!("SKIP: no C compiler for the seccomp wrapper ({e})");
                None
            }
        }
    })
    .as_ref()
    .map(|(_, bin)| bin.clone())
}

/// The `tiers` entry `name` of `doctor --json`: (available, detail, fix).
pub fn doctor_tier(doctor: &Value, name: &str) -> (bool, String, String) {
    let tiers = doctor["tiers"].as_array().expect("tiers array");
    let entry = tiers
        .iter()
        .find(|t| t[0] == name)
        .unwrap_or_else(|| panic!("no tier `{name}` in doctor output: {doctor}"));
    let c = &entry[1];
    (
        c["available"].as_bool().unwrap_or(false),
        c["detail"].as_str().unwrap_or("").to_string(),
        c["fix"].as_str().unwrap_or("").to_string(),
    )
}

/// Gaps of a `--json` result, joined for searching.
pub fn gaps(result: &Value) -> Vec<String> {
    result["enforcement"]["gaps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
