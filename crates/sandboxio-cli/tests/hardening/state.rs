//! The state directory: a FIFO in place of the audit key or the trail is refused with a
//! code (never waited on).

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

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt as _;
        self.is_fifo()
    }
}
