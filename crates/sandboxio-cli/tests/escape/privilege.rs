//! Privilege: capabilities, no_new_privs, setuid and file-capability binaries, the uid map,
//! mount, namespaces, chroot, keyrings.

use std::os::unix::fs::PermissionsExt;

use crate::harness::*;

const STATUS: &str = r#"
for line in open('/proc/self/status').read().splitlines():
    k, _, v = line.partition(':')
    if k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Uid', 'Gid', 'Groups'):
        say(k, ' '.join(v.split()))
"#;

#[test]
fn capabilities_are_all_zero() {
    let out = Sandbox::new().py(STATUS, &[]);
    for k in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(
            out.result(k),
            "0000000000000000",
            "{k} not empty: capabilities left to the payload\n{}",
            out.describe()
        );
    }
}

#[test]
fn no_new_privs_and_seccomp_are_on() {
    let out = Sandbox::new().py(STATUS, &[]);
    assert_eq!(out.result("NoNewPrivs"), "1", "{}", out.describe());
    assert_eq!(
        out.result("Seccomp"),
        "2",
        "seccomp filter mode expected\n{}",
        out.describe()
    );
    let enf = out.enforcement();
    assert_eq!(enf["no_new_privs"], true, "{}", out.describe());
    assert_eq!(enf["seccomp"], true, "{}", out.describe());
}

#[test]
fn sandbox_root_is_an_unprivileged_host_user() {
    let script = r#"
say('uid_map', ' '.join(open('/proc/self/uid_map').read().split()))
say('gid_map', ' '.join(open('/proc/self/gid_map').read().split()))
for line in open('/proc/self/status').read().splitlines():
    if line.startswith('Groups:'):
        say('Groups', ' '.join(line.split()[1:]))
"#;
    let out = Sandbox::new().py(script, &[]);
    for k in ["uid_map", "gid_map"] {
        let map = out.result(k);
        let fields: Vec<u64> = map.split(' ').filter_map(|f| f.parse().ok()).collect();
        assert!(
            fields.len() == 3,
            "{k}: expected exactly one mapping line, got `{map}`"
        );
        assert_ne!(
            fields[1], 0,
            "{k}: sandbox ids map onto host root (`{map}`)"
        );
        assert_eq!(fields[2], 1, "{k}: more than one id mapped (`{map}`)");
    }
    // No host supplementary groups leak in (e.g. root's group 0 or disk/docker groups).
    let groups = out.result("Groups");
    assert!(
        groups
            .split(' ')
            .all(|g| g.is_empty() || g == "0" || g == "65534"),
        "host supplementary groups visible: `{groups}`"
    );
}

const SUID_PROBE: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    printf("ruid=%d\neuid=%d\n", (int)getuid(), (int)geteuid());
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "CapPrm:", 7)) {
            char *v = line + 7;
            while (*v == ' ' || *v == '\t') v++;
            v[strcspn(v, "\n")] = 0;
            printf("%.6s=%s\n", line, v);
        }
    printf("setuid0=%s\n", setuid(0) == 0 ? "OK" : "FAIL");
    return 0;
}
"#;

/// Starts each program (a setuid or file-capability binary), and while it runs (or as a
/// zombie) reads its credentials from /proc.
const CREDS_OF: &str = r#"
import subprocess
for i, prog in enumerate(sys.argv[1:]):
    try:
        p = subprocess.Popen(prog.split(' '), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        say('p%d' % i, 'EXEC_' + ename(e.errno))
        continue
    time.sleep(0.3)
    f = {}
    try:
        for line in open('/proc/%d/status' % p.pid).read().splitlines():
            k, _, v = line.partition(':')
            f[k] = ' '.join(v.split())
        say('p%d' % i, '%s uid=%s capprm=%s capeff=%s nnp=%s' % (f.get('Name'), f.get('Uid'), f.get('CapPrm'), f.get('CapEff'), f.get('NoNewPrivs')))
    except OSError as e:
        say('p%d' % i, 'GONE_' + ename(e.errno))
    p.kill()
    p.communicate()
"#;

fn assert_no_gain(out: &Outcome, n: usize) {
    for i in 0..n {
        let got = out.result(&format!("p{i}"));
        if got.starts_with("GONE_") {
            eprintln!("note: p{i} exited and was reaped before its status was read");
            continue;
        }
        assert!(
            got.contains("capprm=0000000000000000")
                && got.contains("capeff=0000000000000000")
                && got.contains("nnp=1"),
            "ESCALATION: p{i} ran with `{got}`\n{}",
            out.describe()
        );
    }
}

#[test]
fn setuid_binary_does_not_gain_privileges() {
    // The host's real setuid-root programs, executed inside: /usr is mounted nosuid, the
    // owner (host root) is unmapped and no_new_privs is set; any one suffices, all must hold.
    let progs = [
        "/usr/bin/passwd",
        "/usr/bin/chfn",
        "/usr/bin/gpasswd root",
        "/usr/bin/su root",
        "/usr/bin/mount",
    ];
    let present: Vec<&str> = progs
        .iter()
        .copied()
        .filter(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p.split(' ').next().unwrap())
                .map(|m| m.mode() & 0o4000 != 0 && m.uid() == 0)
                .unwrap_or(false)
        })
        .collect();
    if present.is_empty() {
        eprintln!("SKIP: no setuid-root program found among {progs:?} on this host");
        return;
    }
    let out = Sandbox::new().py(CREDS_OF, &present);
    assert_no_gain(&out, present.len());
    // At least one was caught alive (or as a zombie) so the check was real.
    assert!(
        (0..present.len()).any(|i| !out.result(&format!("p{i}")).starts_with("GONE_")),
        "no setuid program's credentials could be read\n{}",
        out.describe()
    );
}

#[test]
fn copied_setuid_binary_cannot_run_or_gain() {
    // A setuid-root binary of our own in the input dir: the input is not executable
    // (Landlock), and even if it were, nosuid + no_new_privs hold.
    let input = input_dir();
    let Some(bin) = compile_c(input.path(), "suidprobe", SUID_PROBE) else {
        return;
    };
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let script = r#"
import subprocess
p = os.path.join(os.environ['SANDBOX_INPUT'], 'suidprobe')
try:
    r = subprocess.run([p], capture_output=True, timeout=10)
    sys.stdout.write(r.stdout.decode())
    say('ran', 'yes')
except OSError as e:
    say('ran', ename(e.errno))
"#;
    let out = Sandbox::new().input(input.path()).py(script, &[]);
    if out.result("ran") == "yes" {
        assert_eq!(
            out.result("CapEff"),
            "0000000000000000",
            "{}",
            out.describe()
        );
        assert_eq!(
            out.result("CapPrm"),
            "0000000000000000",
            "{}",
            out.describe()
        );
        assert_eq!(out.result("euid"), out.result("ruid"), "{}", out.describe());
    } else {
        out.expect_errno("ran", &["EACCES", "EPERM"]);
    }
}

#[test]
fn file_capabilities_are_not_gained() {
    // A real binary under /usr with file capabilities (found with getcap on the host).
    let found = std::process::Command::new("getcap")
        .args(["-r", "/usr"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let Some(prog) = found
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|p| p.starts_with("/usr/"))
    else {
        eprintln!(
            "SKIP: no binary with file capabilities under /usr on this host (getcap -r /usr)"
        );
        return;
    };
    let out = Sandbox::new().py(CREDS_OF, &[prog]);
    let got = out.result("p0");
    if got.starts_with("EXEC_") {
        out.expect_errno("p0", &["EXEC_EACCES", "EXEC_EPERM"]);
    } else {
        assert_no_gain(&out, 1);
    }
}

#[test]
fn cannot_mount() {
    let script = r#"
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
os.makedirs('/tmp/mnt', exist_ok=True)
attempt('tmpfs', lambda: sysc(165, b'none', b'/tmp/mnt', b'tmpfs', 0, 0))
attempt('bind_root', lambda: sysc(165, b'/', b'/tmp/mnt', 0, MS_BIND | MS_REC, 0))
attempt('remount_rw', lambda: sysc(165, 0, b'/', 0, MS_REMOUNT | MS_BIND, 0))
attempt('remount_usr_rw', lambda: sysc(165, 0, b'/usr', 0, MS_REMOUNT | MS_BIND, 0))
attempt('proc', lambda: sysc(165, b'proc', b'/tmp/mnt', b'proc', 0, 0))
attempt('umount_proc', lambda: sysc(166, b'/proc', 2))   # MNT_DETACH, inside only (gated)
attempt('pivot_root', lambda: sysc(155, b'/tmp', b'/tmp/mnt'))
attempt('fsopen', lambda: sysc(430, b'tmpfs', 0))
attempt('open_tree', lambda: sysc(428, -100, b'/', 1))     # OPEN_TREE_CLONE
"#;
    let out = Sandbox::new().py(script, &[]);
    for l in [
        "tmpfs",
        "bind_root",
        "remount_rw",
        "remount_usr_rw",
        "proc",
        "umount_proc",
        "pivot_root",
        "fsopen",
        "open_tree",
    ] {
        out.expect_errno(l, &["EPERM"]);
    }
}

const UNSHARE: &str = r#"
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP = 0x4000000, 0x8000000, 0x2000000
def in_child(fn):
    # Run fn in a forked child so a success cannot change the payload itself.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            res = 'OK'
        except OSError as e:
            res = ename(e.errno)
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    res = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    return res
for name, flag in [('user', CLONE_NEWUSER), ('mnt', CLONE_NEWNS), ('pid', CLONE_NEWPID),
                   ('net', CLONE_NEWNET), ('uts', CLONE_NEWUTS), ('ipc', CLONE_NEWIPC),
                   ('cgroup', CLONE_NEWCGROUP)]:
    say('unshare_' + name, in_child(lambda: sysc(272, flag)))
def clone_userns():
    r = sysc(56, CLONE_NEWUSER | 17, 0, 0, 0, 0)   # clone(CLONE_NEWUSER|SIGCHLD)
    if r == 0:
        os._exit(0)
    os.waitpid(r, 0)
say('clone_newuser', in_child(clone_userns))
def clone3():
    args = (ctypes.c_uint64 * 11)()
    args[0] = CLONE_NEWUSER
    args[4] = 17
    r = sysc(435, ctypes.addressof(args), 88)
    if r == 0:
        os._exit(0)
    os.waitpid(r, 0)
say('clone3', in_child(clone3))
def setns_self(kind):
    fd = os.open('/proc/self/ns/' + kind, os.O_RDONLY)
    sysc(308, fd, 0)
say('setns', in_child(lambda: setns_self('mnt')))
say('setns_user', in_child(lambda: setns_self('user')))
import subprocess
try:
    r = subprocess.run(['/usr/bin/unshare', '-U', '-r', '/bin/true'], capture_output=True, timeout=10)
    say('unshare_cmd', 'exit%d' % r.returncode)
except OSError as e:
    say('unshare_cmd', ename(e.errno))
"#;

#[test]
fn cannot_unshare_or_nest_user_namespaces() {
    let control = host_control(UNSHARE, &[]);
    assert_eq!(control["unshare_user"], "OK", "control: {control:?}");
    let out = Sandbox::new().py(UNSHARE, &[]);
    for ns in ["user", "mnt", "pid", "net", "uts", "ipc", "cgroup"] {
        out.expect_errno(&format!("unshare_{ns}"), &["EPERM"]);
    }
    out.expect_errno("clone_newuser", &["EPERM"]);
    // clone3 cannot be filtered by flags, so it is refused with ENOSYS (libc falls back).
    out.expect_errno("clone3", &["ENOSYS", "EPERM"]);
    out.expect_errno("setns", &["EPERM"]);
    out.expect_errno("setns_user", &["EPERM"]);
    let cmd = out.result("unshare_cmd");
    assert!(
        cmd != "exit0",
        "`unshare -U -r true` succeeded inside the sandbox\n{}",
        out.describe()
    );
}

#[test]
fn cannot_chroot() {
    let script = r#"
os.makedirs('/tmp/jail/a', exist_ok=True)
attempt('chroot', lambda: os.chroot('/tmp/jail'))
# the classic escape needs chroot twice; the first already fails
"#;
    let out = Sandbox::new().py(script, &[]);
    out.expect_errno("chroot", &["EPERM"]);
}

#[test]
fn cannot_use_keyrings() {
    let script = r#"
KEY_SPEC_PROCESS_KEYRING, KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -2, -3, -4
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_READ = 0, 1, 11
attempt('add_key', lambda: sysc(248, b'user', b'sbx', b'secret', 6, KEY_SPEC_PROCESS_KEYRING))
attempt('request_key', lambda: sysc(249, b'user', b'sbx', 0, 0))
attempt('keyctl_user', lambda: sysc(250, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0))
attempt('keyctl_join', lambda: sysc(250, KEYCTL_JOIN_SESSION_KEYRING, 0))
"#;
    let control = host_control(script, &[]);
    assert!(control["add_key"].starts_with("OK"), "control: {control:?}");
    let out = Sandbox::new().py(script, &[]);
    for l in ["add_key", "request_key", "keyctl_user", "keyctl_join"] {
        out.expect_errno(l, &["EPERM"]);
    }
}
