//! The state directory: a FIFO in place of the audit key or the trail is refused with a
//! code (never waited on); a directory owned by another user is refused before anything
//! is created in it.

use std::os::unix::fs::MetadataExt as _;
use std::process::Command;

use crate::common::*;
use crate::watchdog::*;

#[test]
fn a_fifo_as_the_audit_key_is_refused_not_waited_on() {
    let env = Env::new("state-keyfifo", "process");
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let key = env.state().join("audit.key");
    std::fs::remove_file(&key).unwrap();
    mkfifo(&key);
    let o = run(
        "run with a FIFO key",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_error("FIFO audit.key", &o, "SBX_E1602", 125);
    assert!(text(&o.stderr).contains("FIFO"), "{}", text(&o.stderr));
    // Still a FIFO: nothing replaced it.
    assert!(std::fs::symlink_metadata(&key)
        .unwrap()
        .file_type()
        .is_fifo_like());
}

#[test]
fn a_fifo_as_the_trail_is_refused_by_runs_and_by_verify() {
    let env = Env::new("state-trailfifo", "process");
    let fifo = env.path().join("trail.fifo");
    mkfifo(&fifo);
    let o = run(
        "audit verify FIFO",
        Command::new(BIN).args(["audit", "verify"]).arg(&fifo),
    );
    assert!(
        text(&o.stdout).contains("FIFO") || text(&o.stderr).contains("FIFO"),
        "{o:?}"
    );
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    // The active trail of a state directory replaced by a FIFO.
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let trail = env.state().join("audit.jsonl");
    std::fs::remove_file(&trail).unwrap();
    mkfifo(&trail);
    let o = run(
        "run with a FIFO trail",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("error[SBX_E"),
        "{}",
        text(&o.stderr)
    );
    let mut c = Command::new(BIN);
    c.args(["audit", "verify", "--state-dir"])
        .arg(env.state())
        .arg(&trail)
        .env_remove("SBX_STATE_DIR");
    let o = run("audit verify FIFO trail", &mut c);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn root_refuses_a_state_directory_another_user_owns() {
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: not root (only root can be given another user's directory)");
        return;
    }
    let env = Env::new("state-owner", "process");
    let state = env.state();
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let o = run(
        "root run in uid 65534's dir",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_error("foreign state dir", &o, "SBX_E1530", 2);
    let err = text(&o.stderr);
    assert!(err.contains("owned by uid 65534"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&state).unwrap().collect();
    assert!(left.is_empty(), "root created files there: {left:?}");
    // Given back to root, the same directory works.
    std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
    let o = run(
        "root run in its own dir",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt as _;
        self.is_fifo()
    }
}
