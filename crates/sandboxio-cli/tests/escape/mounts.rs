//! Mounts (`--mount HOST:SANDBOX[:ro|rw]`, `--workdir`): what a program reaches through a
//! host directory bound into the sandbox. Each test tries the way out for real: a symlink
//! in the host directory pointing out, `..` past the mount's root, a hard link to a file
//! outside, device nodes and setuid bits left behind in a read-write mount, mounts over
//! the sandbox's own paths, and host paths the caller itself cannot read.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::harness::*;

/// A fresh host directory holding `name` with `content`, readable by the sandbox.
fn host_dir_with(name: &str, content: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("sbxesc-mnt-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join(name);
    std::fs::write(&f, content).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

const PROJECT: &str = r#"
def rd(p):
    with open(p) as f:
        return f.read().strip()
def wr(p):
    with open(p, 'w') as f:
        f.write('from-sandbox')
attempt('cwd', lambda: os.getcwd())
attempt('read_ro', lambda: rd('/data/in.txt'))
attempt('write_ro', lambda: wr('/data/new.txt'))
attempt('write_rw', lambda: wr('/project/made.txt'))
attempt('read_rw', lambda: rd('made.txt'))
"#;

#[test]
fn a_read_write_mount_is_writable_and_a_read_only_one_is_not() {
    let data = host_dir_with("in.txt", "input-data");
    let proj = host_dir_with("keep.txt", "k");
    writable_by_sandbox(proj.path());
    let out = Sandbox::new()
        .mount(&format!("{}:/data", data.path().display()))
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .workdir("/project")
        .py(PROJECT, &[]);
    assert_eq!(out.result("cwd"), "OK:/project", "{}", out.describe());
    assert_eq!(out.result("read_ro"), "OK:input-data");
    out.expect_errno("write_ro", &["EROFS"]);
    assert_eq!(out.result("write_rw"), "OK", "{}", out.describe());
    assert_eq!(out.result("read_rw"), "OK:from-sandbox");
    // The write reached the host directory, and nothing reached the read-only one.
    assert_eq!(
        std::fs::read_to_string(proj.path().join("made.txt")).unwrap(),
        "from-sandbox"
    );
    assert!(!data.path().join("new.txt").exists());
    // The record names the mounts (resolved host paths) and the working directory.
    let rec = &out.json["record"];
    let mounts: Vec<&str> = rec["mounts"]
        .as_array()
        .expect("record.mounts")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let real = std::fs::canonicalize(proj.path()).unwrap();
    assert!(
        mounts.contains(&format!("{}:/project:rw", real.display()).as_str()),
        "{mounts:?}"
    );
    assert_eq!(rec["workdir"], "/project");
}

const FOLLOW: &str = r#"
def rd(p):
    with open(p) as f:
        return f.read().strip()
for i, p in enumerate(sys.argv[1:]):
    attempt('read%d' % i, lambda: rd(p))
attempt('up', lambda: ','.join(sorted(os.listdir('/project/..'))))
"#;

#[test]
fn symlinks_and_dotdot_in_a_mount_stay_inside_the_sandbox() {
    // A secret outside the mounted directory, readable by the sandbox's host uid, so only
    // the mount boundary keeps it out.
    let secret_text = marker("mount-secret");
    let outside = host_dir_with("secret.txt", &secret_text);
    let secret = outside.path().join("secret.txt");
    let proj = host_dir_with("ok.txt", "fine");
    std::os::unix::fs::symlink(&secret, proj.path().join("abs-link")).unwrap();
    let rel = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    std::os::unix::fs::symlink(&rel, proj.path().join("rel-link")).unwrap();
    // Control: on the host both links reach the secret.
    assert_eq!(
        std::fs::read_to_string(proj.path().join("abs-link")).unwrap(),
        secret_text
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("rel-link")).unwrap(),
        secret_text
    );
    let out = Sandbox::new()
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .py(
            FOLLOW,
            &[
                "/project/abs-link",
                "/project/rel-link",
                &format!("/project/../{rel}"),
                "/project/ok.txt",
            ],
        );
    assert!(
        !out.stdout().contains(&secret_text),
        "ESCAPE: the secret outside the mount was read\n{}",
        out.describe()
    );
    out.expect_errno("read0", &["ENOENT", "EACCES"]);
    out.expect_errno("read1", &["ENOENT", "EACCES"]);
    out.expect_errno("read2", &["ENOENT", "EACCES"]);
    assert_eq!(out.result("read3"), "OK:fine");
    // `..` of the mount is the sandbox's root, not the host directory's parent.
    let up = out.result("up");
    assert!(up.contains("usr") && up.contains("workspace"), "{up}");
    assert!(
        !up.contains(
            &outside
                .path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string()
        ),
        "ESCAPE: `..` of the mount lists the host directory's parent: {up}"
    );
}

const LEAVE_BEHIND: &str = r#"
import stat
def mk():
    os.mknod('/project/null', 0o666 | stat.S_IFCHR, os.makedev(1, 3))
def suid():
    with open('/project/tool', 'w') as f:
        f.write('#!/bin/sh\nid\n')
    os.chmod('/project/tool', 0o4755)
def sgid():
    os.chmod('/project/tool', 0o2755)
def creat_suid():
    fd = os.open('/project/tool2', os.O_WRONLY | os.O_CREAT, 0o4755)
    os.close(fd)
def hard():
    os.link('/data/in.txt', '/project/hard')
def hard_etc():
    os.link('/etc/passwd', '/project/passwd')
attempt('mknod', mk)
attempt('suid', suid)
attempt('sgid', sgid)
attempt('creat_suid', creat_suid)
attempt('hard_other_mount', hard)
attempt('hard_etc', hard_etc)
attempt('mode', lambda: oct(os.stat('/project/tool').st_mode & 0o7777))
"#;

#[test]
fn a_read_write_mount_takes_no_device_nodes_setuid_bits_or_foreign_hard_links() {
    let data = host_dir_with("in.txt", "input");
    let proj = host_dir_with("keep.txt", "k");
    writable_by_sandbox(proj.path());
    let out = Sandbox::new()
        .mount(&format!("{}:/data", data.path().display()))
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .py(LEAVE_BEHIND, &[]);
    out.expect_errno("mknod", &["EPERM", "EACCES"]);
    out.expect_errno("suid", &["EPERM"]);
    out.expect_errno("sgid", &["EPERM"]);
    out.expect_errno("creat_suid", &["EPERM"]);
    out.expect_errno("hard_other_mount", &["EXDEV", "EPERM"]);
    out.expect_errno("hard_etc", &["EXDEV", "EPERM", "ENOENT"]);
    // What is on the host afterwards: no device node, no set-id bit, no foreign link.
    for entry in std::fs::read_dir(proj.path()).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        let ft = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        assert!(
            !ft.is_char_device() && !ft.is_block_device(),
            "ESCAPE: a device node was left on the host: {}",
            entry.path().display()
        );
        assert_eq!(
            meta.mode() & 0o6000,
            0,
            "ESCAPE: a set-id bit was left on the host: {} {:o}",
            entry.path().display(),
            meta.mode()
        );
        assert_eq!(
            meta.nlink(),
            1,
            "a hard link was made: {}",
            entry.path().display()
        );
    }
}

#[test]
fn mounts_over_the_sandboxes_own_paths_are_refused() {
    let d = host_dir_with("x", "x");
    for target in [
        "/proc",
        "/proc/sys",
        "/dev",
        "/dev/shm",
        "/output",
        "/usr/lib",
        "/etc",
        "/tmp",
    ] {
        let out = Sandbox::new()
            .mount(&format!("{}:{target}:rw", d.path().display()))
            .run_unchecked(&["/bin/true"]);
        assert!(
            !out.status.success(),
            "a mount over `{target}` was accepted\n{}",
            out.describe()
        );
        assert!(
            out.raw_stderr.contains("SBX_E1020") || out.json["record"]["error_code"] == "SBX_E1020",
            "mount over `{target}`: expected SBX_E1020\n{}",
            out.describe()
        );
    }
}

#[test]
fn the_state_directory_and_system_paths_cannot_be_mounted() {
    // `/` contains the run's own state directory (refused by the gateway) and the default
    // policy denies system and credential paths; neither runs the program. As root, `/etc`
    // also holds the default secrets key file (`/etc/sandboxio/secrets.key`), which the
    // gateway refuses before policy is asked.
    // The uid `sandboxio` runs as decides: the suite's run-as user when set, else ours.
    let test_is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let etc = if run_as().map_or(test_is_root, |uid| uid == 0) {
        "SBX_E1520"
    } else {
        "SBX_E1550"
    };
    for (spec, code) in [
        ("/:/host", "SBX_E1520"),
        ("/etc:/e:rw", etc),
        ("/proc:/p", "SBX_E1550"),
    ] {
        let out = Sandbox::new()
            .mount(spec)
            .run_unchecked(&["/bin/echo", "ran"]);
        let (status, got) = out.record_status();
        assert_eq!(
            status,
            "denied",
            "`{spec}` was not denied\n{}",
            out.describe()
        );
        assert_eq!(got, code, "`{spec}`\n{}", out.describe());
        assert!(!out.stdout().contains("ran"));
    }
}

const READ_ONE: &str = r#"
def rd(p):
    with open(p) as f:
        return f.read().strip()
attempt('read', lambda: rd(sys.argv[1]))
attempt('list', lambda: ','.join(os.listdir(sys.argv[2])))
"#;

#[test]
fn a_mount_gives_no_more_than_the_caller_may_read() {
    // A directory only its owner may enter, holding a secret, owned by someone other than
    // the uid the sandbox's root maps to.
    let secret_text = marker("private");
    let d = host_dir_with("secret.txt", &secret_text);
    let mapped = sandbox_host_uid();
    let owner = if mapped == 0 { 1 } else { 0 };
    let private = d.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("secret.txt"), &secret_text).unwrap();
    std::fs::set_permissions(
        private.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    if std::os::unix::fs::chown(&private, Some(owner), Some(owner)).is_err()
        || std::os::unix::fs::chown(private.join("secret.txt"), Some(owner), Some(owner)).is_err()
    {
        eprintln!("skipped: cannot give the private directory to uid {owner} (not root)");
        return;
    }
    let out = Sandbox::new()
        .mount(&format!("{}:/private", private.display()))
        .run_unchecked(&[
            PY,
            "-c",
            &format!("{PRELUDE}\n{READ_ONE}"),
            "/private/secret.txt",
            "/private",
        ]);
    assert!(
        !out.stdout().contains(&secret_text),
        "ESCAPE: a mount read a file its caller cannot read\n{}",
        out.describe()
    );
    // Either the mount is refused with a code, or it is made and reading is denied.
    let (status, code) = out.record_status();
    if status == "ok" || status == "failed" {
        out.expect_errno("read", &["EACCES", "EPERM"]);
        out.expect_errno("list", &["EACCES", "EPERM"]);
    } else {
        assert!(
            code.starts_with("SBX_E"),
            "refused without a code\n{}",
            out.describe()
        );
    }
    let _ = Path::new("/");
}

/// The program has the directory holding its `--output` mounted read-write and swaps the
/// output directory for a symlink to a host directory it may not write. The copy-out must
/// not follow it: nothing lands in the target (as root it would be a root-owned file in
/// any host directory, e.g. `/etc/cron.d`).
#[test]
fn the_copy_out_never_follows_an_output_directory_swapped_for_a_symlink() {
    let proj = tempfile::tempdir().unwrap();
    writable_by_sandbox(proj.path());
    let target = tempfile::tempdir().unwrap();
    let out = proj.path().join("out");
    let run = Sandbox::new()
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .output(&out)
        .run_unchecked(&[
            "sh",
            "-c",
            &format!(
                "mv /project/out /project/old && ln -s {} /project/out && echo planted > \"$SANDBOX_OUTPUT/planted\"",
                target.path().display()
            ),
        ]);
    assert!(
        proj.path().join("old").is_dir(),
        "the program ran and moved the output away\n{}",
        run.describe()
    );
    let planted: Vec<_> = std::fs::read_dir(target.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        planted.is_empty(),
        "the copy-out wrote through the symlink: {planted:?}\n{}",
        run.describe()
    );
    assert!(
        !run.status.success(),
        "a refused copy-out is an error\n{}",
        run.describe()
    );
}

/// The policy's mount rules apply to `--input` (bound read-only) as to a mount: the host's
/// `/proc` (every host process and its command line) is refused by the default policy.
#[test]
fn an_input_directory_is_checked_by_the_policys_mount_rules() {
    let run = Sandbox::new()
        .input(Path::new("/proc"))
        .run_unchecked(&["ls", "/input"]);
    assert!(
        !run.status.success(),
        "`--input /proc` ran\n{}",
        run.describe()
    );
    assert!(
        run.raw_stderr.contains("SBX_E1550") || run.json["record"]["error_code"] == "SBX_E1550",
        "expected the policy's denial\n{}",
        run.describe()
    );
}

/// A symlink an earlier sandbox left in the path of a later run's output directory (run 1
/// has the project mounted read-write and replaces `out` with a link): run 2, the same
/// command, is refused (`SBX_E1520`, the link is not root's) and writes nothing through it.
/// Run 2 used to follow the link (as root: root-owned files in any directory the policy
/// allows, `/run/systemd/system` among them).
#[test]
fn an_output_path_through_a_symlink_a_sandbox_left_is_refused() {
    let proj = tempfile::tempdir().unwrap();
    writable_by_sandbox(proj.path());
    let target = tempfile::tempdir().unwrap();
    let out = proj.path().join("out");
    let sandbox = Sandbox::new()
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .output(&out);
    let plant = format!(
        "rm -rf /project/out && ln -s {} /project/out",
        target.path().display()
    );
    let first = sandbox.run_unchecked(&["sh", "-c", &plant]);
    assert!(
        std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink()),
        "run 1 did not leave its link\n{}",
        first.describe()
    );
    let second = sandbox.run_unchecked(&["sh", "-c", "echo planted > \"$SANDBOX_OUTPUT/planted\""]);
    let planted: Vec<_> = std::fs::read_dir(target.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        planted.is_empty(),
        "run 2 wrote through the link: {planted:?}\n{}",
        second.describe()
    );
    assert!(
        second.raw_stderr.contains("SBX_E1520")
            || second.json["record"]["error_code"] == "SBX_E1520",
        "expected SBX_E1520\n{}",
        second.describe()
    );
}

/// The same with a directory above the output swapped: the copy-out is refused as an
/// error (it used to copy nothing and exit 0, the output silently lost).
#[test]
fn an_output_parent_swapped_for_a_symlink_is_a_copy_error() {
    let proj = tempfile::tempdir().unwrap();
    writable_by_sandbox(proj.path());
    std::fs::create_dir(proj.path().join("sub")).unwrap();
    writable_by_sandbox(&proj.path().join("sub"));
    let target = tempfile::tempdir().unwrap();
    std::fs::create_dir(target.path().join("out")).unwrap();
    let out = proj.path().join("sub/out");
    let run = Sandbox::new()
        .mount(&format!("{}:/project:rw", proj.path().display()))
        .output(&out)
        .run_unchecked(&[
            "sh",
            "-c",
            &format!(
                "mv /project/sub /project/old && ln -s {} /project/sub && echo x > \"$SANDBOX_OUTPUT/f\"",
                target.path().display()
            ),
        ]);
    assert!(
        proj.path().join("old").is_dir(),
        "the program ran\n{}",
        run.describe()
    );
    assert_eq!(
        std::fs::read_dir(target.path().join("out"))
            .unwrap()
            .count(),
        0,
        "written through the link\n{}",
        run.describe()
    );
    assert!(
        !run.status.success(),
        "a lost output is an error\n{}",
        run.describe()
    );
}
