//! `audit verify` and the state's files, classified: a trail cut once its database was
//! deleted too does not pass as "ok" in its state directory (`--no-head` accepts a check
//! of the trail alone); a trail file that cannot be read is an input error, not tampering;
//! a garbage signing key is a bad key; a FIFO database is said to be one; an empty database
//! is a lost state (`SBX_E1532`) for `verify` as for a run.

use std::process::Command;

use crate::common::*;
use crate::watchdog::*;

fn verify(args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["audit", "verify"])
        .args(args)
        .env_remove("SBX_STATE_DIR");
    c
}

/// Keeps the trail's lines up to its `n`th checkpoint line.
fn cut_at_checkpoint(trail: &std::path::Path, n: usize) {
    let text = std::fs::read_to_string(trail).unwrap();
    let mut kept = String::new();
    let mut seen = 0;
    for l in text.lines() {
        kept.push_str(l);
        kept.push('\n');
        if l.starts_with("{\"checkpoint\"") {
            seen += 1;
            if seen == n {
                break;
            }
        }
    }
    assert!(kept.len() < text.len(), "nothing cut");
    std::fs::write(trail, kept).unwrap();
}

#[test]
fn a_cut_trail_whose_database_was_deleted_does_not_verify_in_its_state_directory() {
    let env = Env::new("verify-cut", "process");
    for _ in 0..4 {
        let o = run("run", &mut env.run_cmd(None, &[], &["true"]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    }
    let st = env.state();
    let (trail, key) = (st.join("audit.jsonl"), st.join("audit.pub"));
    let o = run(
        "verify",
        &mut verify(&[trail.as_os_str(), "--key".as_ref(), key.as_os_str()]),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    cut_at_checkpoint(&trail, 3);
    for f in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(st.join(f));
    }
    // The README's form: the trail in its state directory, the database gone.
    let o = run(
        "verify, database gone",
        &mut verify(&[trail.as_os_str(), "--key".as_ref(), key.as_os_str()]),
    );
    assert_error("cut trail, database gone", &o, "SBX_E1532", 1);
    assert!(text(&o.stderr).contains("--no-head"), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).starts_with("ok"), "{o:?}");
    // Accepted only when asked for, and said so.
    let o = run(
        "verify --no-head",
        &mut verify(&[
            trail.as_os_str(),
            "--key".as_ref(),
            key.as_os_str(),
            "--no-head".as_ref(),
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        text(&o.stdout).contains("not compared with a signed head (--no-head)"),
        "{o:?}"
    );
    // A trail copied away for checking (no state files beside it) still passes, saying it
    // was not compared with a signed head.
    let away = env.path().join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::copy(&trail, away.join("audit.jsonl")).unwrap();
    std::fs::copy(&key, away.join("audit.pub")).unwrap();
    let o = run(
        "verify a copy",
        &mut verify(&[
            away.join("audit.jsonl").as_os_str(),
            "--key".as_ref(),
            away.join("audit.pub").as_os_str(),
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        text(&o.stdout).contains("not compared with a signed head"),
        "{o:?}"
    );
}

#[test]
fn unreadable_trails_keys_and_databases_get_their_own_codes() {
    let env = Env::new("verify-class", "process");
    let o = run("run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let st = env.state();
    // Not a trail at all: an input error (exit 2), never "TAMPERED" (exit 1).
    let fifo = env.path().join("trail.fifo");
    mkfifo(&fifo);
    for (what, p) in [
        ("/dev/zero", std::path::PathBuf::from("/dev/zero")),
        ("a FIFO", fifo),
        ("a directory", env.path().to_path_buf()),
    ] {
        let o = run(what, &mut verify(&[p.as_os_str()]));
        assert_error(what, &o, "SBX_E1704", 2);
        assert!(!text(&o.stdout).contains("TAMPERED"), "{what}: {o:?}");
        assert!(!text(&o.stdout).contains("BadRecord"), "{what}: {o:?}");
    }
    // An empty database: the state was lost, as a run reports it.
    let db = st.join("state.db");
    let saved = std::fs::read(&db).unwrap();
    std::fs::write(&db, b"").unwrap();
    let o = run(
        "verify, empty db",
        &mut verify(&[st.join("audit.jsonl").as_os_str()]),
    );
    assert_error("empty state.db", &o, "SBX_E1532", 1);
    // A FIFO database is said to be one, not "empty".
    std::fs::remove_file(&db).unwrap();
    mkfifo(&db);
    let o = run("run, FIFO db", &mut env.run_cmd(None, &[], &["true"]));
    assert_error("FIFO state.db", &o, "SBX_E1532", 1);
    assert!(text(&o.stderr).contains("FIFO"), "{}", text(&o.stderr));
    assert!(
        !text(&o.stderr).contains("empty (0 bytes)"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_file(&db).unwrap();
    std::fs::write(&db, saved).unwrap();
    // A garbage signing key is a bad key, not an i/o error.
    let key = st.join("audit.key");
    std::fs::write(&key, b"\xff\xfe not a key\n").unwrap();
    let o = run("run, garbage key", &mut env.run_cmd(None, &[], &["true"]));
    assert_error("garbage audit.key", &o, "SBX_E1605", 2);
}
