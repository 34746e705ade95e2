//! Where the state may live: a state directory below a directory another user can change
//! could be moved away by that user, and the next run would start from an empty state
//! (an idempotency key forgotten, so a payment made twice). Such a directory is refused
//! (`SBX_E1530`, naming it) before anything is created; without `HOME` the state never
//! falls back to a directory under `/tmp`.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;
use crate::watchdog::*;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `sandboxio run --state-dir <state> ... -- sh -c 'echo paid'` under one idempotency key.
fn pay(env: &Env, state: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg("--state-dir")
        .arg(state)
        .arg("--policy")
        .arg(env.path().join("policy.toml"))
        .arg("--config")
        .arg(env.path().join("config.toml"))
        .args(["--tier", "process", "--idempotency-key", "PAY-1", "--"])
        .args(["sh", "-c", "echo paid"])
        .env_remove("SBX_STATE_DIR")
        .stdin(Stdio::null());
    c
}

#[test]
fn a_state_directory_another_user_can_move_away_is_refused() {
    if !is_root() {
        eprintln!("skipped: not root (the test gives directories to other users)");
        return;
    }
    let env = Env::new("state-parent", "process");
    let ww = env.path().join("ww");
    std::fs::create_dir(&ww).unwrap();
    chmod(&ww, 0o755);
    let state = ww.join("state");
    let o = run("first payment", &mut pay(&env, &state));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "paid\n");
    let o = run("the same payment again", &mut pay(&env, &state));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("replayed"), "{}", text(&o.stderr));

    // The parent becomes writable by everyone, without the sticky bit: another user moves
    // the state directory away. The next payment is refused, and no fresh state appears.
    chmod(&ww, 0o777);
    let mv = Command::new("mv")
        .arg(&state)
        .arg(ww.join("stolen"))
        .uid(65533)
        .gid(65533)
        .output()
        .unwrap();
    assert!(
        mv.status.success(),
        "uid 65533 could not move the state: {mv:?}"
    );
    let o = run("payment after the move", &mut pay(&env, &state));
    assert_error("state below a 0777 parent", &o, "SBX_E1530", 2);
    let err = text(&o.stderr);
    assert!(err.contains(&format!("`{}`", ww.display())), "{err}");
    assert!(err.contains("sticky"), "{err}");
    assert!(!text(&o.stdout).contains("paid"), "the payment ran again");
    assert!(
        !state.exists(),
        "a fresh state was created where the old one was"
    );

    // Put back, the parent still open to everyone: still refused, nothing created.
    std::fs::rename(ww.join("stolen"), &state).unwrap();
    let before = std::fs::read_dir(&state).unwrap().count();
    let o = run("payment, state back", &mut pay(&env, &state));
    assert_error("state back below a 0777 parent", &o, "SBX_E1530", 2);
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), before);

    // A parent owned by another user (not root): refused, naming the owner.
    chmod(&ww, 0o755);
    std::os::unix::fs::chown(&ww, Some(65534), Some(65534)).unwrap();
    let o = run("parent owned by uid 65534", &mut pay(&env, &state));
    assert_error("parent owned by another user", &o, "SBX_E1530", 2);
    assert!(
        text(&o.stderr).contains("owned by uid 65534"),
        "{}",
        text(&o.stderr)
    );

    // Writable by a group that is not ours, without the sticky bit: refused.
    std::os::unix::fs::chown(&ww, Some(0), Some(65534)).unwrap();
    chmod(&ww, 0o775);
    let o = run("parent writable by group 65534", &mut pay(&env, &state));
    assert_error("parent writable by another group", &o, "SBX_E1530", 2);
    assert!(
        text(&o.stderr).contains("group 65534"),
        "{}",
        text(&o.stderr)
    );

    // Our own group, or the sticky bit (as on /tmp): accepted; the key is still known.
    std::os::unix::fs::chown(&ww, Some(0), Some(0)).unwrap();
    let o = run("parent writable by our own group", &mut pay(&env, &state));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("replayed"), "{}", text(&o.stderr));
    chmod(&ww, 0o1777);
    let o = run("sticky parent", &mut pay(&env, &state));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("replayed"), "{}", text(&o.stderr));

    // A symlink whose own directory is open to everyone is refused too.
    chmod(&ww, 0o755);
    let open = env.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    std::os::unix::fs::symlink(&state, open.join("link")).unwrap();
    let o = run("through a symlink", &mut pay(&env, &open.join("link")));
    assert_error("symlink in a 0777 directory", &o, "SBX_E1530", 2);
    assert!(
        text(&o.stderr).contains(&format!("`{}`", open.display())),
        "{}",
        text(&o.stderr)
    );
}

/// The precondition of the tests without HOME: root here (to become uid 65534), and uid
/// 65534 without a home directory on this host. `false` (reason printed): skip.
fn nobody_without_a_home() -> bool {
    if !is_root() {
        eprintln!("skipped: not root (the test runs the CLI as uid 65534)");
        return false;
    }
    let home = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(':').nth(2) == Some("65534"))
        .and_then(|l| l.split(':').nth(5).map(str::to_string));
    if home.as_deref().is_some_and(|h| Path::new(h).is_dir()) {
        eprintln!("skipped: uid 65534 has a home directory here ({home:?})");
        return false;
    }
    true
}

#[test]
fn without_home_the_state_is_never_put_under_tmp() {
    if !nobody_without_a_home() {
        return;
    }
    let cwd = tempfile::Builder::new()
        .prefix("sbx-nohome-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::chown(cwd.path(), Some(65534), Some(65534)).unwrap();
    let tmp_state = std::env::temp_dir().join(".local/state/sandboxio");
    let existed = tmp_state.exists();
    for args in [
        &["run", "--tier", "process", "--", "true"][..],
        &["status"][..],
    ] {
        let mut c = Command::new(BIN);
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("SBX_TRUSTED_CONFIGS", cwd.path().join("trusted-configs"))
            .current_dir(cwd.path())
            .stdin(Stdio::null())
            .uid(65534)
            .gid(65534);
        let o = run("no HOME", &mut c);
        assert_error("no HOME, no passwd home", &o, "SBX_E1719", 2);
        assert!(
            text(&o.stderr).contains("--state-dir"),
            "{}",
            text(&o.stderr)
        );
    }
    if !existed {
        assert!(
            !tmp_state.exists(),
            "the state went to {}",
            tmp_state.display()
        );
    }
}

/// Without a home, the list of trusted configurations (and the secrets key beside it) is
/// never under a shared directory such as `/tmp`, where another user could list their
/// own `sandboxio.toml` as trusted: `trust` has nowhere to write, and says so.
#[test]
fn without_home_the_trust_list_is_never_put_under_tmp() {
    if !nobody_without_a_home() {
        return;
    }
    let cwd = tempfile::Builder::new()
        .prefix("sbx-nohome-trust-")
        .tempdir()
        .unwrap();
    std::fs::write(cwd.path().join("sandboxio.toml"), "").unwrap();
    for p in [cwd.path(), &cwd.path().join("sandboxio.toml")] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let shared = std::env::temp_dir().join("sandboxio");
    let existed = shared.exists();
    let mut c = Command::new(BIN);
    c.arg("trust")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("SBX_STATE_DIR", cwd.path().join("state"))
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .uid(65534)
        .gid(65534);
    let o = run("trust without HOME", &mut c);
    assert_ne!(
        o.status.code(),
        Some(0),
        "trusted with nowhere private to keep it"
    );
    assert!(!text(&o.stderr).contains("/tmp/"), "{}", text(&o.stderr));
    if !existed {
        assert!(
            !shared.exists(),
            "the trust list went to {}",
            shared.display()
        );
    }
}
