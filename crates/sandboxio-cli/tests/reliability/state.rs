//! State that never forgets (issue 10, item 1), against the real binary: private modes,
//! no secret at rest, a lost or damaged database refused until an operator recovers it,
//! the trail anchored outside itself, a lost key, a torn last line.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use sandboxio_core::Money;
use sandboxio_gateway::store::Store;

use crate::common::*;

const RECOVER: &str = "sandboxio state recover --from-trail";

/// A config whose rate card charges 0.01 per call, so every run leaves spend behind.
fn priced(env: &Env) -> PathBuf {
    env.write_config(
        "priced.toml",
        "[budget.rate_card]\ncpu_second = \"0\"\ngib_second = \"0\"\nper_call = \"0.01\"\n",
    )
}

fn run_ok(env: &Env, cfg: Option<&Path>, extra: &[&str], argv: &[&str]) -> Output {
    let out = env.run_cmd(cfg, extra, argv).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn spent(env: &Env) -> Money {
    let lines = env
        .store()
        .ledger(
            chrono::Utc::now() - chrono::Duration::days(1),
            chrono::Utc::now() + chrono::Duration::days(1),
        )
        .unwrap();
    lines
        .iter()
        .fold(Money::ZERO, |a, l| a.checked_add(l.amount).unwrap())
}

fn verify(env: &Env, trail: &Path) -> Output {
    let mut c = std::process::Command::new(BIN);
    c.args(["audit", "verify"])
        .arg(trail)
        .arg("--key")
        .arg(env.state().join("audit.pub"))
        .arg("--state-dir")
        .arg(env.state());
    c.output().unwrap()
}

// ---------------------------------------------------------------------------------------
// Modes

#[test]
fn state_files_are_0600_in_a_0700_directory_and_looser_modes_are_tightened() {
    let env = Env::new("modes", "process");
    run_ok(&env, None, &[], &["true"]);
    let st = env.state();
    let check = |when: &str| {
        assert_eq!(mode(&st), 0o700, "{when}: state dir");
        for e in std::fs::read_dir(&st).unwrap() {
            let p = e.unwrap().path();
            let m = mode(&p);
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name == "audit.pub" {
                assert_eq!(m & 0o022, 0, "{when}: {name} writable by others ({m:o})");
            } else {
                assert_eq!(m, 0o600, "{when}: {name} has mode {m:o}");
            }
        }
    };
    check("after the first run");
    // Loosen everything, as an older version or a careless copy would leave it.
    std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(&st).unwrap() {
        std::fs::set_permissions(e.unwrap().path(), std::fs::Permissions::from_mode(0o644))
            .unwrap();
    }
    run_ok(&env, None, &[], &["true"]);
    check("after a run over loose modes");
}

#[test]
fn a_shared_sticky_state_directory_is_refused() {
    let env = Env::new("sticky", "process");
    std::fs::create_dir(env.state()).unwrap();
    std::fs::set_permissions(env.state(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = env.run_cmd(None, &[], &["true"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(stderr(&out).contains("SBX_E1530"), "{}", stderr(&out));
    assert!(!env.state().join("state.db").exists(), "nothing is created");
}

// ---------------------------------------------------------------------------------------
// Secrets at rest

/// Every byte of every file under `dir` (the database, its WAL, the trail, moved-aside
/// files), searched for `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                hits.push(p);
            }
        }
    }
    hits
}

#[test]
fn a_canary_secret_in_secret_env_argv_and_code_reaches_no_state_file() {
    let env = Env::new("canary", "process");
    let canary = "zq7-CANARY-8c1f4e2a9b";
    let secret = format!("TOKEN={canary}");
    // argv carries the secret value.
    run_ok(
        &env,
        None,
        &["--secret-env", &secret],
        &["sh", "-c", &format!("echo {canary} >/dev/null")],
    );
    // run_code source carries it.
    let code = env.path().join("code.sh");
    std::fs::write(&code, format!("X='{canary}'\necho done\n")).unwrap();
    let out = env
        .cmd("run-code", None)
        .args([
            "--tier",
            "process",
            "--lang",
            "bash",
            "--secret-env",
            &secret,
        ])
        .arg(&code)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // An operation killed while it waits for approval leaves its journal intent open and
    // its approval request pending in the database (and no sandbox behind).
    let ask = env.path().join("ask.toml");
    std::fs::write(
        &ask,
        "[settings]\nname = \"ask\"\ndescription = \"asks before sleeping\"\n\n[[rule]]\nid = \"ask-sleep\"\neffect = \"ask\"\nkind = [\"exec\"]\nargv_prefix = [\"sleep\"]\nreason = \"tests ask before a sleep\"\n",
    )
    .unwrap();
    let mut child = env
        .run_cmd(
            None,
            &["--policy", ask.to_str().unwrap(), "--secret-env", &secret],
            &["sleep", "1", canary],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.live_counts().pending_approvals < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never asked for approval"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    signal(child.id(), "KILL");
    let _ = child.wait();
    let counts = env.live_counts();
    assert_eq!(counts.open_intents, 1, "the killed run's intent is open");
    assert_eq!(counts.pending_approvals, 1);
    let hits = files_containing(&env.state(), canary.as_bytes());
    assert!(hits.is_empty(), "the canary is stored in {hits:?}");
    // The control: the canary is findable when present (the search itself works).
    std::fs::write(env.state().join("control"), canary).unwrap();
    assert_eq!(files_containing(&env.state(), canary.as_bytes()).len(), 1);
}

// ---------------------------------------------------------------------------------------
// A lost or damaged database

fn damage_truncate(db: &Path) {
    std::fs::write(db, b"").unwrap();
}
fn damage_delete(db: &Path) {
    std::fs::remove_file(db).unwrap();
}
fn damage_replace(db: &Path) {
    std::fs::remove_file(db).unwrap();
    drop(
        sandboxio_gateway::store::SqliteStore::open(db, sandboxio_gateway::store::SyncMode::Full)
            .unwrap(),
    );
}
fn damage_garbage(db: &Path) {
    std::fs::write(db, vec![b'x'; 8192]).unwrap();
    // The WAL is part of the state (closing leaves it): while it holds every page, SQLite
    // reads those and the damage to the main file does not show. Damage both.
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    if wal.exists() {
        std::fs::write(&wal, vec![b'x'; 8192]).unwrap();
    }
}

/// After `state recover`: the spend is `before` again, and once resumed the key `key` is
/// known (its run not repeated: exit 123) and a new run works.
fn assert_restored(env: &Env, cfg: &Path, before: Money, key: &str) {
    assert_eq!(spent(env), before, "the spend is back from the trail");
    assert!(env
        .cmd("resume", Some(cfg))
        .output()
        .unwrap()
        .status
        .success());
    let out = env
        .run_cmd(Some(cfg), &["--idempotency-key", key], &["true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(123),
        "the key is known again, not run again: {out:?}"
    );
    run_ok(env, Some(cfg), &[], &["true"]);
}

fn lost_state_is_refused_until_recovered(tag: &str, damage: fn(&Path), code: &str) {
    let env = Env::new(tag, "process");
    let cfg = priced(&env);
    run_ok(&env, Some(&cfg), &["--idempotency-key", "job-1"], &["true"]);
    run_ok(&env, Some(&cfg), &[], &["true"]);
    let before = spent(&env);
    assert!(before > Money::ZERO, "the runs left spend behind");
    let st = env
        .cmd("kill", Some(&cfg))
        .args(["--reason", "stop all"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let db = env.state().join("state.db");
    damage(&db);
    let damaged = std::fs::read(&db).ok();

    // Every later operation is refused with the code and the recovery command, every time.
    for round in 0..2 {
        let attempts: Vec<(&str, Output)> = vec![
            (
                "run",
                env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap(),
            ),
            (
                "kill",
                env.cmd("kill", Some(&cfg))
                    .args(["--reason", "x"])
                    .output()
                    .unwrap(),
            ),
            ("resume", env.cmd("resume", Some(&cfg)).output().unwrap()),
            (
                "approvals",
                env.cmd("approvals", Some(&cfg))
                    .arg("list")
                    .output()
                    .unwrap(),
            ),
            ("costs", env.cmd("costs", Some(&cfg)).output().unwrap()),
            ("budget", env.cmd("budget", Some(&cfg)).output().unwrap()),
        ];
        for (what, out) in attempts {
            let err = stderr(&out);
            assert_ne!(
                out.status.code(),
                Some(0),
                "round {round}: {what} ran: {out:?}"
            );
            assert!(err.contains(code), "round {round}: {what}: {err}");
            assert!(err.contains(RECOVER), "round {round}: {what}: {err}");
        }
        assert_eq!(
            std::fs::read(&db).ok(),
            damaged,
            "the damaged file is left as it was"
        );
    }

    // The operator acts.
    let out = env
        .cmd("state", Some(&cfg))
        .args(["recover", "--from-trail"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The kill switch is engaged until `resume`.
    let out = env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(120), "{out:?}");
    assert!(stderr(&out).contains("kill switch"), "{}", stderr(&out));
    // Spend and keys came back from the trail.
    assert_restored(&env, &cfg, before, "job-1");
    // The recovery itself is in the trail, which still verifies against its head.
    let events =
        sandboxio_audit::read_events(&env.audit_files(&env.state().join("audit.jsonl"))).unwrap();
    assert!(events.iter().any(|e| e.event.event == "state.recovered"));
    let v = verify(&env, &env.state().join("audit.jsonl"));
    assert_eq!(v.status.code(), Some(0), "{v:?}");
    // The damaged database was kept.
    if damaged.is_some() {
        let kept = std::fs::read_dir(env.state())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("state.db.damaged-")
            });
        assert!(kept, "the damaged database is kept aside");
    }
}

/// A database that opens but went back in time (an older copy put back; SQLite cutting
/// a damaged write-ahead log short looks the same): the trail records operations as
/// admitted that its journal lacks. Refused with the code and the recovery command (not
/// blessed by an operator action's new head), until the state is rebuilt from the trail:
/// then the spend and keys of the lost operations are back.
#[test]
fn a_state_db_that_lost_committed_work_is_refused_until_recovered() {
    let env = Env::new("lostwork", "process");
    let cfg = priced(&env);
    run_ok(&env, Some(&cfg), &[], &["true"]);
    // A copy of the database as it is now (no process has it open).
    let older = env.path().join("older");
    std::fs::create_dir(&older).unwrap();
    let files = ["state.db", "state.db-wal", "state.db-shm"];
    for f in files {
        if env.state().join(f).exists() {
            std::fs::copy(env.state().join(f), older.join(f)).unwrap();
        }
    }
    run_ok(&env, Some(&cfg), &["--idempotency-key", "job-2"], &["true"]);
    run_ok(&env, Some(&cfg), &[], &["true"]);
    let before = spent(&env);
    // The older copy put back.
    for f in files {
        let _ = std::fs::remove_file(env.state().join(f));
        if older.join(f).exists() {
            std::fs::copy(older.join(f), env.state().join(f)).unwrap();
        }
    }
    assert!(spent(&env) < before, "the copy is older");
    for round in 0..2 {
        for (what, out) in [
            (
                "run",
                env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap(),
            ),
            ("resume", env.cmd("resume", Some(&cfg)).output().unwrap()),
        ] {
            let err = stderr(&out);
            assert_ne!(out.status.code(), Some(0), "round {round}: {what} ran");
            assert!(err.contains("SBX_E1533"), "round {round}: {what}: {err}");
            assert!(err.contains(RECOVER), "round {round}: {what}: {err}");
        }
    }
    let out = env
        .cmd("state", Some(&cfg))
        .args(["recover", "--from-trail"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_restored(&env, &cfg, before, "job-2");
    let v = verify(&env, &env.state().join("audit.jsonl"));
    assert_eq!(v.status.code(), Some(0), "{v:?}");
}

#[test]
fn a_truncated_state_db_is_refused_until_recovered() {
    lost_state_is_refused_until_recovered("trunc", damage_truncate, "SBX_E1532");
}

#[test]
fn a_deleted_state_db_is_refused_until_recovered() {
    lost_state_is_refused_until_recovered("deleted", damage_delete, "SBX_E1532");
}

#[test]
fn a_state_db_replaced_by_a_new_one_is_refused_until_recovered() {
    lost_state_is_refused_until_recovered("replaced", damage_replace, "SBX_E1532");
}

#[test]
fn a_corrupt_state_db_is_refused_until_recovered() {
    lost_state_is_refused_until_recovered("corrupt", damage_garbage, "SBX_E1533");
}

#[test]
fn recovery_of_a_healthy_state_db_is_refused() {
    let env = Env::new("healthy", "process");
    run_ok(&env, None, &[], &["true"]);
    let out = env
        .cmd("state", None)
        .args(["recover", "--from-trail"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(stderr(&out).contains("SBX_E1534"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------------------
// The trail anchored outside itself

/// Byte offsets in `text` where each CLI run's lines start: the start of the file, then
/// after each run's closing checkpoint (a run continuing a cleanly closed trail writes no
/// `open` checkpoint of its own).
fn run_starts(text: &str) -> Vec<usize> {
    let mut out = vec![0];
    let mut off = 0;
    for l in text.split_inclusive('\n') {
        off += l.len();
        if l.starts_with("{\"checkpoint\":") && l.contains("\"reason\":\"close\"") {
            out.push(off);
        }
    }
    // The last close ends the file: no run starts there.
    if out.last() == Some(&text.len()) {
        out.pop();
    }
    out
}

#[test]
fn verify_with_the_key_detects_a_deleted_cut_or_swapped_trail() {
    let env = Env::new("anchor", "process");
    let trail = env.state().join("audit.jsonl");
    run_ok(&env, None, &[], &["true"]);
    let older = std::fs::read(&trail).unwrap();
    for _ in 0..6 {
        run_ok(&env, None, &[], &["true"]);
    }
    let full = std::fs::read_to_string(&trail).unwrap();
    let v = verify(&env, &trail);
    assert_eq!(v.status.code(), Some(0), "the intact trail verifies: {v:?}");
    // Each cut still verifies on its own: only the head catches it.
    let starts = run_starts(&full);
    assert_eq!(starts.len(), 7);
    for cut in [1usize, 5] {
        let keep = &full[..starts[starts.len() - cut]];
        std::fs::write(&trail, keep).unwrap();
        let alone = sandboxio_audit::verify(&[&trail], None);
        assert!(
            alone.ok && alone.sealed,
            "cut {cut}: verifies alone: {alone:?}"
        );
        let v = verify(&env, &trail);
        let out = String::from_utf8_lossy(&v.stdout);
        assert_eq!(v.status.code(), Some(1), "cut {cut} runs: {v:?}");
        assert!(
            out.contains("TAMPERED") && out.contains("cut from the end"),
            "{out}"
        );
    }
    // An older copy swapped in.
    std::fs::write(&trail, &older).unwrap();
    let v = verify(&env, &trail);
    assert_eq!(v.status.code(), Some(1), "older copy: {v:?}");
    // Deleted.
    std::fs::remove_file(&trail).unwrap();
    let v = verify(&env, &trail);
    assert_eq!(v.status.code(), Some(1), "deleted: {v:?}");
    // Deleted and then a new run starts a new trail: still caught, and recorded.
    run_ok(&env, None, &[], &["true"]);
    assert!(
        sandboxio_audit::verify(&[&trail], None).ok,
        "the new trail verifies alone"
    );
    let v = verify(&env, &trail);
    let out = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{v:?}");
    assert!(out.contains("TAMPERED"), "{out}");
    let events = sandboxio_audit::read_events(&[&trail]).unwrap();
    assert_eq!(
        events[0].event.event, "audit.anchor_broken",
        "the break is recorded"
    );
    // Restoring the full file does not hide it either: the break stays on record.
    std::fs::write(&trail, &full).unwrap();
    assert_eq!(verify(&env, &trail).status.code(), Some(1));
}

// ---------------------------------------------------------------------------------------
// A torn or garbage last line

fn torn_line_is_moved_aside(tag: &str, tail: &[u8]) {
    let env = Env::new(tag, "process");
    let trail = env.state().join("audit.jsonl");
    run_ok(&env, None, &[], &["true"]);
    let mut bytes = std::fs::read(&trail).unwrap();
    bytes.extend_from_slice(tail);
    std::fs::write(&trail, &bytes).unwrap();
    run_ok(&env, None, &[], &["true"]);
    run_ok(&env, None, &[], &["true"]);
    let aside: Vec<PathBuf> = std::fs::read_dir(env.state())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("audit.jsonl.torn-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        tail,
        "the bytes are kept aside"
    );
    assert_eq!(mode(&aside[0]), 0o600);
    let events = sandboxio_audit::read_events(&[&trail]).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.event.as_str()).collect();
    assert_eq!(
        kinds,
        ["exec", "audit.trail_repaired", "exec", "exec"],
        "{kinds:?}"
    );
    let v = verify(&env, &trail);
    assert_eq!(v.status.code(), Some(0), "{v:?}");
}

#[test]
fn a_garbage_last_line_is_moved_aside_and_later_runs_are_recorded() {
    torn_line_is_moved_aside("garbage", b"this is not a record\n");
}

#[test]
fn a_torn_last_line_is_moved_aside_and_later_runs_are_recorded() {
    torn_line_is_moved_aside("torn", b"{\"seq\":7,\"prev_hash\":\"00");
}

#[test]
fn a_non_utf8_last_line_is_moved_aside_and_later_runs_are_recorded() {
    torn_line_is_moved_aside("binary", b"\xff\xfe\x00garbage\n");
}

// ---------------------------------------------------------------------------------------
// A lost signing key

#[test]
fn a_lost_audit_key_is_an_error_naming_rotate_key_until_rotated() {
    let env = Env::new("key", "process");
    let trail = env.state().join("audit.jsonl");
    run_ok(&env, None, &[], &["true"]);
    let key = env.state().join("audit.key");
    std::fs::remove_file(&key).unwrap();
    for _ in 0..2 {
        let out = env.run_cmd(None, &[], &["true"]).output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{out:?}");
        let err = stderr(&out);
        assert!(
            err.contains("SBX_E1620") && err.contains("sandboxio audit rotate-key"),
            "{err}"
        );
        assert!(!key.exists(), "no key is made silently");
    }
    let out = std::process::Command::new(BIN)
        .args(["audit", "rotate-key", "--state-dir"])
        .arg(env.state())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(mode(&key), 0o600);
    run_ok(&env, None, &[], &["true"]);
    let pubs = std::fs::read_to_string(env.state().join("audit.pub")).unwrap();
    assert_eq!(pubs.lines().count(), 2, "old and new public keys: {pubs}");
    let files = env.audit_files(&trail);
    assert_eq!(
        files.len(),
        2,
        "the old file is kept as a segment: {files:?}"
    );
    let events = sandboxio_audit::read_events(&files).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.event.as_str()).collect();
    assert_eq!(kinds, ["exec", "audit.key_rotated", "exec"]);
    // Old and new segments verify with both keys, and against the head.
    let v = verify(&env, &trail);
    assert_eq!(v.status.code(), Some(0), "{v:?}");
    // Only the new key: the old segment's checkpoints no longer verify.
    let newest = env.path().join("new.pub");
    std::fs::write(&newest, pubs.lines().last().unwrap()).unwrap();
    let keys = sandboxio_audit::load_public_keys(&newest).unwrap();
    assert!(!sandboxio_audit::verify_keys(&files, &keys).ok);
}

// ---------------------------------------------------------------------------------------
// A full disk

/// Unmounts the small file system under a test's state directory, whatever the test did.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The state directory on a file system that fills up: runs fail closed with a code (never
/// a panic), the trail's torn last line is not multiplied into one empty file per retry,
/// and once there is room again the next run succeeds, the trail verifies and every
/// operation in the journal has its record.
#[test]
fn a_full_disk_fails_closed_and_recovers_once_there_is_room() {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        eprintln!("SKIP: mounting a small tmpfs for the state directory needs root");
        return;
    }
    let env = Env::new("full", "process");
    std::fs::create_dir_all(env.state()).unwrap();
    let mount = |opts: &str| {
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(env.state())
            .status()
            .unwrap()
            .success()
    };
    assert!(mount("size=400k,mode=0700"), "cannot mount a tmpfs here");
    let _mounted = Mounted(env.state());
    let (mut ok, mut failed, mut in_a_row) = (0, 0, 0);
    for i in 0..60 {
        let out = env
            .run_cmd(None, &[], &["sh", "-c", &format!("echo run-{i}")])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "run {i}: {err}");
        if out.status.success() {
            ok += 1;
            in_a_row = 0;
        } else {
            failed += 1;
            in_a_row += 1;
            assert!(
                err.contains("SBX_E"),
                "run {i} failed without a code: {err}"
            );
            if in_a_row == 8 {
                break;
            }
        }
    }
    assert!(
        ok > 0 && failed > 0,
        "the disk never filled ({ok} ok, {failed} failed)"
    );
    let torn = || {
        std::fs::read_dir(env.state())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".torn-"))
            .count()
    };
    assert!(torn() <= 1, "{} files set aside for one torn line", torn());

    // Room again (the same file system, larger): the next run works and nothing is lost.
    assert!(mount("remount,size=16m"), "cannot grow the tmpfs");
    run_ok(&env, None, &[], &["sh", "-c", "echo after"]);
    let trail = env.state().join("audit.jsonl");
    let v = verify(&env, &trail);
    assert!(v.status.success(), "{}", stderr(&v));
    let recorded: std::collections::BTreeSet<String> = std::fs::read_to_string(&trail)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e["operation_id"].as_str().map(str::to_string))
        .collect();
    let conn = rusqlite::Connection::open(env.state().join("state.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT operation_id, status FROM journal")
        .unwrap();
    let rows: Vec<(String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!rows.is_empty());
    for (op, status) in &rows {
        assert!(status.is_some(), "{op} is still open after recovery");
        assert!(
            recorded.contains(op),
            "{op} ({status:?}) has no record in the trail"
        );
    }
}

/// A key rotation that stopped half way, in both places it can stop: after its new key was
/// kept but before the trail used it (the pending key is dropped), and after the trail's
/// new file was signed with it but before it replaced the key (it becomes the key). The
/// second left a trail signed with a key that was never saved: every run, `rotate-key` and
/// `recover` failed the checkpoint check (SBX_E1604).
#[test]
fn a_key_rotation_that_stopped_half_way_is_finished_or_undone() {
    let env = Env::new("rotatehalf", "process");
    let state = env.state();
    run_ok(&env, None, &[], &["true"]);
    let key = state.join("audit.key");
    let pending = state.join("audit.key.pending");
    let old = std::fs::read_to_string(&key).unwrap();

    // Stopped before the trail's new file: a pending key the trail never used.
    std::fs::write(&pending, format!("{}\n", "ab".repeat(32))).unwrap();
    run_ok(&env, None, &[], &["true"]);
    assert!(!pending.exists(), "the unused pending key is dropped");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), old, "the key stays");

    // Stopped after the trail's new file: a whole rotation, with its last step undone.
    let out = std::process::Command::new(BIN)
        .args(["audit", "rotate-key", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let new = std::fs::read_to_string(&key).unwrap();
    assert_ne!(new, old);
    std::fs::write(&pending, &new).unwrap();
    std::fs::write(&key, &old).unwrap();
    run_ok(&env, None, &[], &["true"]);
    assert!(!pending.exists(), "the pending key became the key");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), new);
    let v = verify(&env, &state.join("audit.jsonl"));
    assert_eq!(v.status.code(), Some(0), "{v:?}");
}
