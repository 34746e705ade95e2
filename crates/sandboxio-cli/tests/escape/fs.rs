//! Filesystem: reading outside the allowed paths, writing outside the output directory.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::harness::*;

/// Errors that mean "this path cannot be written": read-only mount, Landlock/DAC denial, or
/// the path does not exist in the sandbox's root at all.
const NOT_WRITABLE: &[&str] = &["EROFS", "EACCES", "EPERM", "ENOENT"];

const READ_FILE: &str = r#"
def rd(p):
    with open(p, 'rb') as f:
        return len(f.read(4096))
for i, p in enumerate(sys.argv[1:]):
    attempt('read%d' % i, lambda: rd(p))
"#;

#[test]
fn cannot_read_etc_shadow() {
    // Control: on the host (as root) the same payload reads it.
    let host = host_control(READ_FILE, &["/etc/shadow"]);
    assert!(
        host["read0"].starts_with("OK"),
        "control: host read of /etc/shadow should work: {host:?}"
    );
    let out = Sandbox::new().py(READ_FILE, &["/etc/shadow", "/etc/gshadow"]);
    out.expect_errno("read0", &["ENOENT", "EACCES"]);
    out.expect_errno("read1", &["ENOENT", "EACCES"]);
}

#[test]
fn cannot_read_host_etc_through_proc_root() {
    // /proc/1/root and /proc/self/root are the sandbox's own root, never the host's.
    let out = Sandbox::new().py(
        READ_FILE,
        &[
            "/proc/1/root/etc/shadow",
            "/proc/self/root/etc/shadow",
            "/proc/1/cwd/etc/shadow",
        ],
    );
    out.expect_errno("read0", &["ENOENT", "EACCES"]);
    out.expect_errno("read1", &["ENOENT", "EACCES"]);
    out.expect_errno("read2", &["ENOENT", "EACCES"]);
}

const LIST_DIR: &str = r#"
p = sys.argv[1]
try:
    say('list', 'OK:' + ','.join(sorted(os.listdir(p))))
except OSError as e:
    say('list', ename(e.errno))
"#;

fn host_entries(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `dir` is absent, unlistable, or shows none of the host's entries.
fn assert_dir_hidden(dir: &str) {
    let host = host_entries(dir);
    let out = Sandbox::new().py(LIST_DIR, &[dir]);
    let got = out.result("list");
    match got.strip_prefix("OK:") {
        None => out.expect_errno("list", &["ENOENT", "EACCES"]),
        Some(names) => {
            let leaked: Vec<&str> = names
                .split(',')
                .filter(|n| !n.is_empty() && host.iter().any(|h| h == n))
                .collect();
            assert!(
                leaked.is_empty(),
                "ESCAPE: host entries of {dir} visible in the sandbox: {leaked:?}\n{}",
                out.describe()
            );
        }
    }
}

#[test]
fn cannot_read_root_home() {
    if host_entries("/root").is_empty() {
        eprintln!("note: host /root is empty; the test still checks it is absent or empty");
    }
    assert_dir_hidden("/root");
    let out = Sandbox::new().py(READ_FILE, &["/root/.bashrc", "/root/.ssh/id_rsa"]);
    out.expect_errno("read0", &["ENOENT", "EACCES"]);
    out.expect_errno("read1", &["ENOENT", "EACCES"]);
}

#[test]
fn cannot_list_host_home_directories() {
    assert!(
        !host_entries("/home").is_empty() || !Path::new("/home").exists(),
        "host /home is empty; nothing to leak"
    );
    assert_dir_hidden("/home");
}

#[test]
fn cannot_read_host_file_outside_inputs() {
    let host = host_dir();
    let secret = host.path().join("secret.txt");
    std::fs::write(&secret, "sbx-secret-canary").unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = secret.to_string_lossy().into_owned();
    let control = host_control(READ_FILE, &[&p]);
    assert!(control["read0"].starts_with("OK"), "control: {control:?}");
    let out = Sandbox::new().py(READ_FILE, &[&p]);
    out.expect_errno("read0", &["ENOENT", "EACCES"]);
    assert!(!out.stdout().contains("sbx-secret-canary"));
}

#[test]
fn cannot_read_kcore_dev_mem_or_block_devices() {
    let script = r#"
def rd(p):
    with open(p, 'rb') as f:
        return len(f.read(512))
for name, p in [('kcore', '/proc/kcore'), ('mem', '/dev/mem'), ('kmem', '/dev/kmem'),
                ('port', '/dev/port'), ('vda', '/dev/vda'), ('sda', '/dev/sda'),
                ('nvme', '/dev/nvme0n1'), ('loop0', '/dev/loop0'), ('kvm', '/dev/kvm'),
                ('kmsg', '/dev/kmsg')]:
    attempt(name, lambda: rd(p))
"#;
    let out = Sandbox::new().py(script, &[]);
    // /proc/kcore needs CAP_SYS_RAWIO in the initial namespace; a masked (empty) kcore is
    // also acceptable.
    let kcore = out.result("kcore");
    assert!(
        ["EPERM", "EACCES", "ENOENT", "OK:0"].contains(&kcore.as_str()),
        "ESCAPE? /proc/kcore read gave {kcore}\n{}",
        out.describe()
    );
    for dev in [
        "mem", "kmem", "port", "vda", "sda", "nvme", "loop0", "kvm", "kmsg",
    ] {
        // Minimal /dev: none of these exist.
        out.expect_errno(dev, &["ENOENT"]);
    }
}

#[test]
fn cannot_mknod_a_host_block_device() {
    // The classic: make a node for the host disk and read it raw.
    let script = r#"
import stat
attempt('blk', lambda: os.mknod('/tmp/vda', 0o600 | stat.S_IFBLK, os.makedev(254, 0)))
attempt('chr', lambda: os.mknod('/tmp/mem', 0o600 | stat.S_IFCHR, os.makedev(1, 1)))
"#;
    let out = Sandbox::new().py(script, &[]);
    // Landlock refuses device nodes first (EACCES); without it, no CAP_MKNOD (EPERM).
    out.expect_errno("blk", &["EPERM", "EACCES"]);
    out.expect_errno("chr", &["EPERM", "EACCES"]);
}

const WRITE_FILES: &str = r#"
def wr(p):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b'sbx-escaped')
    os.close(fd)
for i, p in enumerate(sys.argv[1:]):
    attempt('w%d' % i, lambda: wr(p))
"#;

/// Removes (and reports) files that must not exist on the host.
fn host_must_not_exist(paths: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for p in paths {
        if std::fs::symlink_metadata(p).is_ok() {
            found.push(p.clone());
            let _ = std::fs::remove_file(p);
        }
    }
    found
}

#[test]
fn cannot_write_to_root_usr_or_etc() {
    let m = marker("w");
    let targets: Vec<String> = [
        "/",
        "/usr/",
        "/usr/bin/",
        "/usr/lib/",
        "/etc/",
        "/bin/",
        "/var/",
    ]
    .iter()
    .map(|d| format!("{d}{m}"))
    .collect();
    let args: Vec<&str> = targets.iter().map(String::as_str).collect();
    let out = Sandbox::new().py(WRITE_FILES, &args);
    let leaked = host_must_not_exist(&targets);
    assert!(leaked.is_empty(), "ESCAPE: created on the host: {leaked:?}");
    // `/` , `/usr`, `/usr/bin`, `/usr/lib`, `/etc`: read-only (EROFS) or denied (EACCES).
    for i in 0..5 {
        out.expect_errno(&format!("w{i}"), &["EROFS", "EACCES", "EPERM"]);
    }
    // `/bin` is a symlink into /usr; `/var` may not exist.
    out.expect_errno("w5", NOT_WRITABLE);
    out.expect_errno("w6", NOT_WRITABLE);
}

#[test]
fn cannot_modify_existing_system_files() {
    let script = r#"
def app(p):
    with open(p, 'ab') as f:
        f.write(b'')
for name, p in [('passwd', '/etc/passwd'), ('sh', '/bin/sh'), ('python', '/usr/bin/python3'),
                ('hosts', '/etc/hosts')]:
    attempt(name, lambda: app(p))
attempt('chmod', lambda: os.chmod('/usr/bin/python3', 0o4777))
attempt('unlink', lambda: os.unlink('/etc/passwd'))
"#;
    let before = std::fs::metadata("/usr/bin/python3.11")
        .unwrap()
        .permissions();
    let out = Sandbox::new().py(script, &[]);
    for name in ["passwd", "sh", "python", "hosts", "chmod", "unlink"] {
        out.expect_errno(name, &["EROFS", "EACCES", "EPERM"]);
    }
    let after = std::fs::metadata("/usr/bin/python3.11")
        .unwrap()
        .permissions();
    assert_eq!(before.mode(), after.mode(), "host python3 mode changed");
}

#[test]
fn input_dir_is_read_only() {
    let input = input_dir();
    let victim = input.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
inp = os.environ.get('SANDBOX_INPUT', '')
say('input', inp)
def app():
    with open(os.path.join(inp, 'victim.txt'), 'ab') as f:
        f.write(b'PWNED')
attempt('append', app)
attempt('create', lambda: open(os.path.join(inp, 'new.txt'), 'wb').close())
attempt('unlink', lambda: os.unlink(os.path.join(inp, 'victim.txt')))
attempt('rename', lambda: os.rename(os.path.join(inp, 'victim.txt'), os.path.join(inp, 'v2')))
attempt('chmod', lambda: os.chmod(os.path.join(inp, 'victim.txt'), 0o777))
"#;
    let out = Sandbox::new().input(input.path()).py(script, &[]);
    assert!(
        !out.result("input").is_empty(),
        "SANDBOX_INPUT not set\n{}",
        out.describe()
    );
    for name in ["append", "create", "unlink", "rename", "chmod"] {
        out.expect_errno(name, &["EROFS", "EACCES", "EPERM"]);
    }
    assert_eq!(read_host(&victim), b"original");
    assert!(!input.path().join("new.txt").exists());
}

#[test]
fn output_dir_is_writable_control() {
    // Positive control: without it, every "cannot write" test could pass vacuously.
    let output = output_dir();
    let script = r#"
out = os.environ.get('SANDBOX_OUTPUT', '')
say('output', out)
def wr():
    with open(os.path.join(out, 'hello.txt'), 'wb') as f:
        f.write(b'hello from the sandbox')
attempt('write', wr)
attempt('tmp', lambda: open('/tmp/x', 'wb').close())
"#;
    let out = Sandbox::new().output(output.path()).py(script, &[]);
    assert_eq!(out.result("write"), "OK", "{}", out.describe());
    assert_eq!(out.result("tmp"), "OK", "{}", out.describe());
    assert_eq!(
        read_host(&output.path().join("hello.txt")),
        b"hello from the sandbox",
        "output file not on the host\n{}",
        out.describe()
    );
}

#[test]
fn cannot_escape_output_dir_with_dotdot() {
    let output = output_dir();
    let parent = output.path().parent().unwrap().to_path_buf();
    let m = marker("dotdot");
    let host = host_dir();
    let host_target = host.path().join(&m);
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
m = sys.argv[1]
host_target = sys.argv[2]
def wr(p):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b'sbx-escaped')
    os.close(fd)
attempt('parent', lambda: wr(os.path.join(out, '..', m)))
attempt('deep', lambda: wr(out + '/../../../../../../../../' + host_target.lstrip('/')))
# openat relative to a dirfd of the output directory
dfd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
attempt('openat', lambda: os.close(os.open('../../../../' + m, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)))
attempt('rename_out', lambda: (wr(os.path.join(out, 'f')), os.rename(os.path.join(out, 'f'), os.path.join(out, '..', m + '.r'))))
"#;
    let ht = host_target.to_string_lossy().into_owned();
    let out = Sandbox::new().output(output.path()).py(script, &[&m, &ht]);
    let leaked = host_must_not_exist(&[
        parent.join(&m).to_string_lossy().into_owned(),
        parent.join(format!("{m}.r")).to_string_lossy().into_owned(),
        ht.clone(),
        format!("/{m}"),
    ]);
    assert!(
        leaked.is_empty(),
        "ESCAPE: `..` wrote on the host: {leaked:?}\n{}",
        out.describe()
    );
    // `..` of the output mount is the sandbox's read-only root (or a path that does not
    // exist there); the host target's directory does not exist inside.
    out.expect_errno("parent", &["EROFS", "EACCES", "EPERM"]);
    out.expect_errno("deep", &["ENOENT", "EROFS", "EACCES"]);
    out.expect_errno("openat", &["EROFS", "EACCES", "EPERM"]);
    out.expect_errno("rename_out", &["EROFS", "EACCES", "EPERM", "EXDEV"]);
}

#[test]
fn cannot_write_through_symlink_in_output_dir() {
    let output = output_dir();
    let host = host_dir();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = host.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let newfile = host.path().join("created-by-sandbox");
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
victim, newfile = sys.argv[1], sys.argv[2]
os.symlink(victim, os.path.join(out, 'link'))
os.symlink(newfile, os.path.join(out, 'link_new'))
os.symlink('/etc/passwd', os.path.join(out, 'link_etc'))
def app(p):
    with open(p, 'ab') as f:
        f.write(b'PWNED')
attempt('link', lambda: app(os.path.join(out, 'link')))
attempt('link_new', lambda: app(os.path.join(out, 'link_new')))
attempt('link_etc', lambda: app(os.path.join(out, 'link_etc')))
"#;
    let v = victim.to_string_lossy().into_owned();
    let n = newfile.to_string_lossy().into_owned();
    let out = Sandbox::new().output(output.path()).py(script, &[&v, &n]);
    assert_eq!(
        read_host(&victim),
        b"original",
        "ESCAPE: host victim written\n{}",
        out.describe()
    );
    assert!(
        !newfile.exists(),
        "ESCAPE: host file created through a symlink\n{}",
        out.describe()
    );
    assert!(!std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .contains("PWNED"));
    // The host paths do not exist inside the sandbox.
    out.expect_errno("link", &["ENOENT"]);
    out.expect_errno("link_new", &["ENOENT", "EROFS", "EACCES"]);
    out.expect_errno("link_etc", &["EROFS", "EACCES"]);
    // Copy-out did not turn the links into copies of what they point to on the host.
    for l in ["link", "link_new", "link_etc"] {
        if let Ok(md) = std::fs::symlink_metadata(output.path().join(l)) {
            assert!(!md.is_file(), "copy-out followed the symlink `{l}`");
        }
    }
}

#[test]
fn cannot_write_host_file_through_hardlink() {
    let input = input_dir();
    let output = output_dir();
    let victim = input.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
inp = os.environ['SANDBOX_INPUT']
out = os.environ['SANDBOX_OUTPUT']
attempt('link_input', lambda: os.link(os.path.join(inp, 'victim.txt'), os.path.join(out, 'hl')))
attempt('link_passwd', lambda: os.link('/etc/passwd', os.path.join(out, 'hl2')))
attempt('link_python', lambda: os.link('/usr/bin/python3.11', os.path.join(out, 'hl3')))
def app(p):
    with open(p, 'ab') as f:
        f.write(b'PWNED')
if os.path.exists(os.path.join(out, 'hl')):
    attempt('write_hl', lambda: app(os.path.join(out, 'hl')))
"#;
    // Control: on the host, input and output are on one filesystem and the link works.
    let ctl_dir = host_dir();
    std::fs::write(ctl_dir.path().join("a"), "x").unwrap();
    assert!(std::fs::hard_link(ctl_dir.path().join("a"), ctl_dir.path().join("b")).is_ok());

    let out = Sandbox::new()
        .input(input.path())
        .output(output.path())
        .py(script, &[]);
    assert_eq!(
        read_host(&victim),
        b"original",
        "ESCAPE: input file written through a hardlink"
    );
    // Cross-mount links fail with EXDEV; protected_hardlinks / Landlock give EPERM / EACCES.
    out.expect_errno("link_input", &["EXDEV", "EPERM", "EACCES", "EROFS"]);
    out.expect_errno("link_passwd", &["EXDEV", "EPERM", "EACCES"]);
    out.expect_errno("link_python", &["EXDEV", "EPERM", "EACCES"]);
}

#[test]
fn symlink_swap_race_cannot_write_outside() {
    // A writer opens $OUT/race again and again while a swapper alternates a regular file and
    // a symlink to (a) a read-only input file and (b) a host path, for two seconds.
    let input = input_dir();
    let output = output_dir();
    let host = host_dir();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let in_victim = input.path().join("victim.txt");
    std::fs::write(&in_victim, "original").unwrap();
    std::fs::set_permissions(&in_victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let host_victim = host.path().join("victim.txt");
    std::fs::write(&host_victim, "original").unwrap();
    std::fs::set_permissions(&host_victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
inp = os.environ['SANDBOX_INPUT']
host_victim = sys.argv[1]
race = os.path.join(out, 'race')
targets = [os.path.join(inp, 'victim.txt'), host_victim]
open(race, 'wb').close()
pid = os.fork()
if pid == 0:
    end = time.time() + 2.0
    i = 0
    while time.time() < end and i < 200000:
        i += 1
        tmp = os.path.join(out, 'tmp')
        try:
            if i % 2:
                os.symlink(targets[(i // 2) % 2], tmp)
            else:
                open(tmp, 'wb').close()
            os.rename(tmp, race)
        except OSError:
            pass
    os._exit(0)
counts = {}
end = time.time() + 2.0
n = 0
while time.time() < end and n < 200000:
    n += 1
    try:
        fd = os.open(race, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b'PWNED')
        os.close(fd)
        k = 'OK'
    except OSError as e:
        k = ename(e.errno)
    counts[k] = counts.get(k, 0) + 1
os.waitpid(pid, 0)
say('counts', json.dumps(counts))
"#;
    let hv = host_victim.to_string_lossy().into_owned();
    let out = Sandbox::new()
        .input(input.path())
        .output(output.path())
        .py(script, &[&hv]);
    assert_eq!(
        read_host(&in_victim),
        b"original",
        "ESCAPE: input file written in the race\n{}",
        out.describe()
    );
    assert_eq!(
        read_host(&host_victim),
        b"original",
        "ESCAPE: host file written in the race\n{}",
        out.describe()
    );
    let counts: serde_json::Value = serde_json::from_str(&out.result("counts")).unwrap();
    // The race really ran: some writes landed in the regular file, some hit the symlinks and
    // failed (EROFS/EACCES for the read-only input, ENOENT for the host path).
    let failed: u64 = ["EROFS", "EACCES", "ENOENT"]
        .iter()
        .filter_map(|k| counts[*k].as_u64())
        .sum();
    assert!(
        counts["OK"].as_u64().unwrap_or(0) > 0,
        "race did not run: {counts}"
    );
    assert!(
        failed > 0,
        "race never hit the symlink: {counts}\n{}",
        out.describe()
    );
    let unexpected: Vec<&String> = counts
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !["OK", "EROFS", "EACCES", "ENOENT"].contains(&k.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "unexpected errors {unexpected:?}: {counts}"
    );
}

#[test]
fn writable_places_are_noexec() {
    let output = output_dir();
    let script = r#"
import shutil
out = os.environ['SANDBOX_OUTPUT']
for name, d in [('tmp', '/tmp'), ('out', out), ('shm', '/dev/shm')]:
    p = os.path.join(d, 'true')
    try:
        shutil.copy('/usr/bin/true', p)
        os.chmod(p, 0o755)
    except OSError as e:
        say(name, 'SETUP_' + ename(e.errno))
        continue
    pid = os.fork()
    if pid == 0:
        attempt(name, lambda: os.execv(p, [p]))
        os._exit(1)
    _, st = os.waitpid(pid, 0)
    if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0:
        say(name, 'EXECUTED')
"#;
    let out = Sandbox::new().output(output.path()).py(script, &[]);
    // /tmp and the output dir exist and are writable, so the copy works and exec must fail.
    out.expect_errno("tmp", &["EACCES", "EPERM"]);
    out.expect_errno("out", &["EACCES", "EPERM"]);
    // /dev/shm may be absent or read-only; if it exists and is writable, it is noexec too.
    out.expect_errno(
        "shm",
        &[
            "EACCES",
            "EPERM",
            "SETUP_ENOENT",
            "SETUP_EROFS",
            "SETUP_EACCES",
        ],
    );
}

#[test]
fn copy_out_does_not_write_through_host_symlinks() {
    // The host output dir already holds a symlink to a host file (left by a previous run,
    // or planted). The sandbox writes a regular file of that name; copying the output back
    // must not follow the host symlink.
    let output = output_dir();
    let host = host_dir();
    let victim = host.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    std::os::unix::fs::symlink(&victim, output.path().join("planted")).unwrap();
    std::fs::create_dir(host.path().join("dir")).unwrap();
    std::os::unix::fs::symlink(host.path().join("dir"), output.path().join("planted_dir")).unwrap();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
def wr(p, data):
    with open(p, 'wb') as f:
        f.write(data)
attempt('file', lambda: wr(os.path.join(out, 'planted'), b'PWNED'))
os.makedirs(os.path.join(out, 'planted_dir'), exist_ok=True)
attempt('dirfile', lambda: wr(os.path.join(out, 'planted_dir', 'evil'), b'PWNED'))
"#;
    let out = Sandbox::new()
        .output(output.path())
        .py_may_fail(script, &[]);
    assert_eq!(
        read_host(&victim),
        b"original",
        "ESCAPE: copy-out wrote through a host symlink\n{}",
        out.describe()
    );
    assert!(
        !host.path().join("dir/evil").exists(),
        "ESCAPE: copy-out wrote into a symlinked host directory\n{}",
        out.describe()
    );
    assert!(std::fs::symlink_metadata(output.path().join("planted"))
        .unwrap()
        .file_type()
        .is_symlink());
    // Refusing to copy over the host's entries (an error record: the entry exists,
    // SBX_E1474, or another I/O refusal, SBX_E1459) is fine; so is skipping.
    let (status, code) = out.record_status();
    assert!(
        status == "ok" || (status == "error" && (code == "SBX_E1474" || code == "SBX_E1459")),
        "unexpected outcome {status} {code}\n{}",
        out.describe()
    );
}

#[test]
fn copy_out_does_not_follow_symlinks_or_block_on_fifos() {
    // Symlinks to host secrets and a FIFO in the output: the copy back (done by the
    // privileged supervisor) must neither read the host files into the output nor hang.
    let output = output_dir();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
for name, target in [('shadow', '/etc/shadow'), ('root', '/root'), ('proc1', '/proc/1/environ'),
                     ('hostproc', '/proc/self/root/etc/shadow')]:
    attempt(name, lambda: os.symlink(target, os.path.join(out, name)))
attempt('fifo', lambda: os.mkfifo(os.path.join(out, 'fifo')))
attempt('sock', lambda: socket.socket(socket.AF_UNIX).bind(os.path.join(out, 'sock')))
"#;
    let out = Sandbox::new()
        .timeout("10s")
        .output(output.path())
        .py(script, &[]);
    assert_eq!(out.result("shadow"), "OK", "{}", out.describe());
    assert!(
        out.elapsed < std::time::Duration::from_secs(15),
        "copy-out hung on a FIFO? run took {:?}",
        out.elapsed
    );
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let first = shadow.lines().next().unwrap_or("root:");
    for name in ["shadow", "root", "proc1", "hostproc", "fifo", "sock"] {
        let p = output.path().join(name);
        if let Ok(md) = std::fs::symlink_metadata(&p) {
            if md.is_file() {
                let data = std::fs::read_to_string(&p).unwrap_or_default();
                assert!(
                    !data.contains(first),
                    "ESCAPE: host /etc/shadow copied into the output as `{name}`"
                );
            }
            assert!(!md.is_dir(), "ESCAPE: `{name}` copied out as a directory");
        }
    }
}

#[test]
fn copy_out_strips_setuid_bits() {
    // A setuid file written by the sandbox must not become a setuid-root file on the host.
    let output = output_dir();
    let script = r#"
import shutil
out = os.environ['SANDBOX_OUTPUT']
p = os.path.join(out, 'suid')
shutil.copy('/usr/bin/id', p)
attempt('chmod', lambda: os.chmod(p, 0o6755))
say('mode', oct(os.stat(p).st_mode & 0o7777))
"#;
    let out = Sandbox::new().output(output.path()).py(script, &[]);
    let p = output.path().join("suid");
    if let Ok(md) = std::fs::symlink_metadata(&p) {
        use std::os::unix::fs::MetadataExt;
        let mode = md.mode() & 0o7777;
        assert!(
            !(mode & 0o4000 != 0 && md.uid() == 0),
            "ESCAPE: the sandbox planted a setuid-root file on the host (mode {mode:o})\n{}",
            out.describe()
        );
        assert!(
            !(mode & 0o2000 != 0 && md.gid() == 0),
            "ESCAPE: the sandbox planted a setgid-root file on the host (mode {mode:o})"
        );
    }
}

#[test]
fn sparse_output_files_do_not_fill_the_host_disk() {
    // The output tmpfs caps allocated blocks, not apparent size: 40 sparse files of 60 MiB
    // take no space inside. Copied back densely they would put 2.4 GiB on the host disk
    // (and with 16k inodes, a terabyte).
    let output = output_dir();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
made = 0
for i in range(40):
    try:
        with open(os.path.join(out, 'sparse%02d' % i), 'wb') as f:
            f.truncate(60 << 20)
        made += 1
    except OSError as e:
        say('error', ename(e.errno))
        break
say('made', made)
"#;
    let out = Sandbox::new()
        .timeout("30s")
        .output(output.path())
        .py(script, &[]);
    let mut allocated = 0u64;
    let mut apparent = 0u64;
    if let Ok(rd) = std::fs::read_dir(output.path()) {
        use std::os::unix::fs::MetadataExt;
        for e in rd.flatten() {
            if let Ok(md) = e.metadata() {
                allocated += md.blocks() * 512;
                apparent += md.len();
            }
        }
    }
    assert!(
        allocated <= DEFAULT_OUTPUT_CAP + (2 << 20),
        "HOST DISK: the output copy put {} MiB on the host disk ({} MiB apparent) for an \
         output capped at 64 MiB\n{}",
        allocated >> 20,
        apparent >> 20,
        out.describe()
    );
}

#[test]
fn deep_output_tree_does_not_crash_the_supervisor() {
    // A directory chain as deep as PATH_MAX allows: copying it back must end in a result
    // (copied or refused with an error record), not a crashed supervisor.
    let output = output_dir();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
os.chdir(out)
depth = 0
for i in range(3000):
    try:
        os.mkdir('a')
        os.chdir('a')
        depth += 1
    except OSError as e:
        say('stop', ename(e.errno))
        break
say('depth', depth)
"#;
    let out = Sandbox::new()
        .timeout("30s")
        .output(output.path())
        .py_may_fail(script, &[]);
    // run_unchecked already panicked if no JSON came back; the supervisor must not have
    // died of a signal either.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        None,
        "the supervisor died of a signal copying a deep output tree\n{}",
        out.describe()
    );
    let (status, code) = out.record_status();
    assert!(
        status == "ok" || (status == "error" && code == "SBX_E1459"),
        "unexpected outcome {status} {code}\n{}",
        out.describe()
    );
}

#[test]
fn hardlinked_output_files_do_not_multiply_on_the_host() {
    // Links cost no tmpfs blocks or inodes inside; copied back one by one, a single file
    // linked N times is written N times to the host disk.
    let output = output_dir();
    let script = r#"
out = os.environ['SANDBOX_OUTPUT']
with open(os.path.join(out, 'big'), 'wb') as f:
    f.write(b'\x01' * (16 << 20))
made = 0
for i in range(30):
    try:
        os.link(os.path.join(out, 'big'), os.path.join(out, 'link%02d' % i))
        made += 1
    except OSError as e:
        say('error', ename(e.errno))
        break
say('links', made)
"#;
    let out = Sandbox::new()
        .timeout("30s")
        .output(output.path())
        .py_may_fail(script, &[]);
    let mut allocated = 0u64;
    if let Ok(rd) = std::fs::read_dir(output.path()) {
        use std::os::unix::fs::MetadataExt;
        let mut seen = std::collections::BTreeSet::new();
        for e in rd.flatten() {
            if let Ok(md) = e.metadata() {
                if seen.insert(md.ino()) {
                    allocated += md.blocks() * 512;
                }
            }
        }
    }
    assert!(
        allocated <= DEFAULT_OUTPUT_CAP + (2 << 20),
        "HOST DISK: the output copy put {} MiB on the host disk for an output capped at \
         64 MiB\n{}",
        allocated >> 20,
        out.describe()
    );
}

const DEFAULT_OUTPUT_CAP: u64 = 64 << 20;
