//! A store that went back in time, in every way a hostile test found one slipping past the
//! start's check: an operator's kill switch or key revocation forgotten (no journal row
//! stands for them), a new kill blessing the loss with its head, a short retention, a
//! state directory named through a symlink or moved elsewhere, and an operation killed
//! between its record and its outcome (settled from its record, not charged nothing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandboxio_core::Money;
use sandboxio_gateway::store::Store;

use crate::common::*;

const FILES: [&str; 3] = ["state.db", "state.db-wal", "state.db-shm"];

/// A copy of the state database as it is now (no process has it open).
fn snapshot(state: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in FILES {
        if state.join(f).exists() {
            std::fs::copy(state.join(f), to.join(f)).unwrap();
        }
    }
}

/// The older copy put back in place of the database.
fn put_back(from: &Path, state: &Path) {
    for f in FILES {
        let _ = std::fs::remove_file(state.join(f));
        if from.join(f).exists() {
            std::fs::copy(from.join(f), state.join(f)).unwrap();
        }
    }
}

/// A run, a copy of the database, a run under key `job-1`, and the copy put back: a
/// store that lost the keyed run.
fn lose_a_keyed_run(env: &Env, state: &Path) {
    ok(run_at(env, state, &[], &["true"]), "first run");
    let older = env.path().join("older");
    snapshot(state, &older);
    ok(
        run_at(env, state, &["--idempotency-key", "job-1"], &["true"]),
        "keyed run",
    );
    put_back(&older, state);
}

/// `sandboxio <sub>` on the state directory `state` (however it is spelled).
fn cmd_at(env: &Env, state: &Path, sub: &str) -> Command {
    let mut c = Command::new(BIN);
    c.arg(sub)
        .arg("--state-dir")
        .arg(state)
        .arg("--policy")
        .arg(env.path().join("policy.toml"))
        .arg("--config")
        .arg(env.path().join("config.toml"))
        .env_remove("SBX_STATE_DIR")
        .stdin(Stdio::null());
    c
}

fn run_at(env: &Env, state: &Path, extra: &[&str], argv: &[&str]) -> Output {
    cmd_at(env, state, "run")
        .arg("--tier")
        .arg(&env.tier)
        .args(extra)
        .arg("--")
        .args(argv)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The command is refused as a store that lost work, and (for a run) ran nothing.
fn assert_lost(o: &Output, what: &str) {
    assert_ne!(o.status.code(), Some(0), "{what} went ahead: {}", text(o));
    assert!(text(o).contains("SBX_E1533"), "{what}: {}", text(o));
    assert!(
        !text(o).contains("RAN-"),
        "{what} ran its program: {}",
        text(o)
    );
}

/// The state's ledger lines of the last day (and the next: all of a test's).
fn ledger_of(env: &Env) -> Vec<sandboxio_gateway::store::LedgerLine> {
    env.store()
        .ledger(
            chrono::Utc::now() - chrono::Duration::days(1),
            chrono::Utc::now() + chrono::Duration::days(1),
        )
        .unwrap()
}

fn ok(o: Output, what: &str) -> Output {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o));
    o
}

/// Whether strace is missing (the reason printed: the test skips).
fn no_strace() -> bool {
    let missing = Command::new("strace").arg("-V").output().is_err();
    if missing {
        eprintln!("SKIP: strace is not installed (scripts/setup.sh installs it)");
    }
    missing
}

/// The command `c` under `strace -f` with `strace_args` (a kill or a failure injected at
/// an exact syscall), with `c`'s variables and an empty standard input.
fn under_strace<S: AsRef<std::ffi::OsStr>>(c: &Command, strace_args: &[S]) -> Output {
    under_strace_with(c, strace_args, Stdio::null())
}

/// [`under_strace`] with `stdin`.
fn under_strace_with<S: AsRef<std::ffi::OsStr>>(
    c: &Command,
    strace_args: &[S],
    stdin: Stdio,
) -> Output {
    let mut s = Command::new("strace");
    s.args(["-f", "-o", "/dev/null"])
        .args(strace_args)
        .arg(c.get_program())
        .args(c.get_args())
        .env_remove("SBX_STATE_DIR");
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    s.stdin(stdin).output().unwrap()
}

/// `audit verify` passes on the state directory's trail, with its public key.
fn assert_verifies(state: &Path) {
    let v = Command::new(BIN)
        .args(["audit", "verify"])
        .arg(state.join("audit.jsonl"))
        .arg("--key")
        .arg(state.join("audit.pub"))
        .output()
        .unwrap();
    ok(v, "the trail verifies");
}

/// strace arguments that fail every write to `trail` with ENOSPC (a full disk under it).
fn full_disk(trail: &Path) -> Vec<String> {
    [
        "-P",
        trail.to_str().unwrap(),
        "-e",
        "trace=write,writev,pwrite64",
        "-e",
        "inject=write,writev,pwrite64:error=ENOSPC",
    ]
    .map(String::from)
    .to_vec()
}

/// The operation records of the trail at `trail` (checkpoints left out).
fn records(trail: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(trail)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["operation_id"].is_string())
        .collect()
}

#[test]
fn a_kill_switch_the_store_forgot_is_refused_and_a_new_kill_does_not_hide_a_loss() {
    let env = Env::new("lostkill", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let older = env.path().join("older");
    snapshot(&state, &older);
    ok(
        cmd_at(&env, &state, "kill")
            .args(["--reason", "incident"])
            .output()
            .unwrap(),
        "kill",
    );
    put_back(&older, &state);
    // The older copy has the kill switch released: nothing may run on it, and `status`
    // (which reads the store as it is) says so instead of showing it as released.
    assert_lost(
        &run_at(&env, &state, &[], &["echo", "RAN-after-kill"]),
        "run",
    );
    let st = cmd_at(&env, &state, "status").output().unwrap();
    assert!(
        text(&st).contains("LOST WORK (SBX_E1533)") && text(&st).contains("kill switch"),
        "status: {}",
        text(&st)
    );
    let st = cmd_at(&env, &state, "status")
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert!(v["lost_work"].is_string(), "{v}");
    // The spend reports say their figures are an older store's.
    for (sub, args) in [("budget", &["--tenant", "acme"][..]), ("costs", &[][..])] {
        let o = cmd_at(&env, &state, sub).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("warning[SBX_E1533]"), "{sub}: {}", text(&o));
    }
    assert_lost(&cmd_at(&env, &state, "resume").output().unwrap(), "resume");

    // Lost operations, then the brake: it engages (exit 0), and stores no head over the
    // loss, so what comes next is still refused.
    let env = Env::new("lostkill2", "process");
    let state = env.state();
    lose_a_keyed_run(&env, &state);
    let k = ok(
        cmd_at(&env, &state, "kill")
            .args(["--reason", "incident"])
            .output()
            .unwrap(),
        "kill on a store that lost work",
    );
    assert!(
        text(&k).contains("SBX_E1533"),
        "the kill says what it found: {}",
        text(&k)
    );
    for round in 0..2 {
        assert_lost(
            &cmd_at(&env, &state, "resume").output().unwrap(),
            &format!("resume {round}"),
        );
        assert_lost(
            &run_at(
                &env,
                &state,
                &["--idempotency-key", "job-1"],
                &["echo", "RAN-again"],
            ),
            &format!("keyed run {round}"),
        );
    }
}

#[test]
fn a_key_revocation_the_store_forgot_is_refused() {
    let env = Env::new("lostrevoke", "process");
    let state = env.state();
    let created = ok(
        cmd_at(&env, &state, "keys")
            .args(["create", "--tenant", "acme", "--scopes", "exec"])
            .output()
            .unwrap(),
        "keys create",
    );
    let err = String::from_utf8_lossy(&created.stderr).into_owned();
    let id = err
        .split_whitespace()
        .skip_while(|w| *w != "key")
        .nth(1)
        .unwrap_or_else(|| panic!("no key id in {err}"))
        .to_string();
    let older = env.path().join("older");
    snapshot(&state, &older);
    ok(
        cmd_at(&env, &state, "keys")
            .args(["revoke", &id])
            .output()
            .unwrap(),
        "keys revoke",
    );
    put_back(&older, &state);
    let listed = cmd_at(&env, &state, "keys").arg("list").output().unwrap();
    assert!(
        text(&listed).contains("live"),
        "the older copy has the key live: {}",
        text(&listed)
    );
    assert_lost(&run_at(&env, &state, &[], &["echo", "RAN-x"]), "run");
    let out = cmd_at(&env, &state, "state")
        .args(["recover", "--from-trail"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "recover: {}", text(&out));
}

#[test]
fn a_retention_under_an_hour_still_checks_recent_work() {
    let env = Env::new("lostshort", "process");
    std::fs::write(
        env.path().join("config.toml"),
        "[state]\nretention = \"30m\"\n",
    )
    .unwrap();
    let state = env.state();
    lose_a_keyed_run(&env, &state);
    assert_lost(
        &run_at(
            &env,
            &state,
            &["--idempotency-key", "job-1"],
            &["echo", "RAN-again"],
        ),
        "keyed run on the older copy",
    );
}

#[test]
fn a_state_dir_named_through_a_symlink_is_recovered_and_one_moved_is_checked() {
    let env = Env::new("lostpath", "process");
    let state = env.state();
    lose_a_keyed_run(&env, &state);
    let link = env.path().join("link");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    assert_lost(
        &run_at(&env, &link, &[], &["echo", "RAN-x"]),
        "run through the link",
    );
    let out = cmd_at(&env, &link, "state")
        .args(["recover", "--from-trail"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "recover through the link: {}",
        text(&out)
    );

    // A state directory moved elsewhere with an older database: its trail has no head
    // kept under its new path, and is checked from its first record.
    let env = Env::new("lostmoved", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let older = env.path().join("older");
    snapshot(&state, &older);
    ok(
        run_at(&env, &state, &["--idempotency-key", "job-1"], &["true"]),
        "keyed run",
    );
    let moved: PathBuf = env.path().join("moved");
    std::fs::rename(&state, &moved).unwrap();
    put_back(&older, &moved);
    assert_lost(
        &run_at(
            &env,
            &moved,
            &["--idempotency-key", "job-1"],
            &["echo", "RAN-again"],
        ),
        "keyed run in the moved directory",
    );
    // Moved whole (database and trail together), it just works.
    let env = Env::new("movedwhole", "process");
    let state = env.state();
    ok(
        run_at(&env, &state, &["--idempotency-key", "job-1"], &["true"]),
        "keyed run",
    );
    let moved = env.path().join("moved");
    std::fs::rename(&state, &moved).unwrap();
    ok(
        run_at(&env, &moved, &[], &["true"]),
        "run in the moved directory",
    );
}

/// SIGKILL between the operation's record and its `finish` (strace kills the CLI at the
/// trail's sync): the trail holds the operation's own record, its intent is open. The
/// next start settles it from the record: one final record, the cost charged, the key
/// done. It was recorded again as `interrupted` and its reservation released (ran free).
#[test]
fn an_operation_killed_between_its_record_and_its_outcome_is_settled_from_its_record() {
    if no_strace() {
        return;
    }
    let env = Env::new("recordedkill", "process");
    let cfg = env.write_config(
        "priced.toml",
        "[budget.rate_card]\ncpu_second = \"0\"\ngib_second = \"0\"\nper_call = \"0.01\"\n",
    );
    ok(
        env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap(),
        "first run",
    );
    let trail = env.state().join("audit.jsonl");
    // The trail syncs its records with fdatasync, the store its transactions with fsync:
    // a SIGKILL at the run's first fdatasync lands after its record is written, before
    // its `finish`.
    let key = "job-1".to_string();
    let c = env.run_cmd(Some(&cfg), &["--idempotency-key", &key], &["true"]);
    let out = under_strace(
        &c,
        &[
            "-e",
            "trace=fdatasync",
            "-e",
            "inject=fdatasync:signal=KILL:when=1",
        ],
    );
    assert!(
        !out.status.success(),
        "the run was not killed: {}",
        text(&out)
    );
    let written = std::fs::read_to_string(&trail).unwrap();
    assert!(
        written.contains(&format!("\"{key}\"")),
        "the record was not written before the kill"
    );
    assert_eq!(env.live_counts().open_intents, 1, "its intent is open");
    let spend_before = ledger_of(&env)
        .iter()
        .fold(Money::ZERO, |a, l| a.checked_add(l.amount).unwrap());
    // The next start recovers.
    ok(
        env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap(),
        "the next run",
    );
    let text = std::fs::read_to_string(&trail).unwrap();
    let mine: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["idempotency_key"] == key.as_str())
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "one final record for the operation: {mine:?}"
    );
    assert_ne!(mine[0]["status"], "interrupted", "{mine:?}");
    let op = mine[0]["operation_id"].as_str().unwrap().to_string();
    let ledger = ledger_of(&env);
    let charged: Vec<_> = ledger.iter().filter(|l| l.operation_id == op).collect();
    assert_eq!(
        charged.len(),
        1,
        "the operation is charged once: {ledger:?}"
    );
    assert_eq!(
        charged[0].amount.to_string(),
        mine[0]["cost_settled"].as_str().unwrap()
    );
    let spend_after = ledger
        .iter()
        .fold(Money::ZERO, |a, l| a.checked_add(l.amount).unwrap());
    assert!(
        spend_after > spend_before,
        "{spend_before} -> {spend_after}"
    );
    // Its key answers with the recorded outcome; nothing runs again.
    let _ = env
        .run_cmd(Some(&cfg), &["--idempotency-key", &key], &["true"])
        .output()
        .unwrap();
    let ran = std::fs::read_to_string(&trail)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["idempotency_key"] == key.as_str() && v["replayed"] != true)
        .count();
    assert_eq!(ran, 1, "no second run under the key");
}

/// SIGKILL between an operator action's change and its record (strace kills `sandboxio
/// kill`, then `sandboxio resume`, at the store's commit sync: the transaction is in the
/// WAL, the trail untouched). The switch is engaged (then released) as the operator asked,
/// and the next start records each action from the intent its change was committed with:
/// once, as done, never `interrupted`. The switch was engaged with no record at all.
#[test]
fn an_operator_action_killed_before_its_record_is_recorded_at_the_next_start() {
    if no_strace() {
        return;
    }
    let env = Env::new("adminkill", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let trail = state.join("audit.jsonl");
    let records_of = |tool: &str| -> Vec<serde_json::Value> {
        records(&trail)
            .into_iter()
            .filter(|v| v["event"] == "admin" && v["tool_name"] == tool)
            .collect()
    };
    for (sub, extra, engaged) in [
        ("kill", &["--reason", "runaway"][..], true),
        ("resume", &[][..], false),
    ] {
        let c = {
            let mut c = cmd_at(&env, &state, sub);
            c.args(extra);
            c
        };
        // The store syncs its commits with fsync (the trail with fdatasync): the first
        // fsync of the command is its change's commit.
        let out = under_strace(
            &c,
            &["-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"],
        );
        assert!(
            !out.status.success(),
            "{sub} was not killed: {}",
            text(&out)
        );
        assert!(
            records_of(sub).is_empty(),
            "{sub} was recorded before the kill"
        );
        assert_eq!(
            env.store().kill_state().unwrap().is_some(),
            engaged,
            "{sub} took effect with its commit"
        );
        assert_eq!(
            env.live_counts().open_intents,
            1,
            "{sub}: its intent is open"
        );
        // The next start records it (a run: refused while the switch is engaged).
        let next = run_at(&env, &state, &[], &["true"]);
        assert_eq!(next.status.success(), !engaged, "{}", text(&next));
        let recs = records_of(sub);
        assert_eq!(recs.len(), 1, "{sub}: one record: {recs:?}");
        assert_eq!(recs[0]["status"], "ok", "{recs:?}");
        assert_eq!(recs[0]["agent_id"], "cli:operator", "{recs:?}");
        let reason = recs[0]["reason"].as_str().unwrap();
        assert!(reason.contains("recorded at recovery"), "{reason}");
        if engaged {
            assert!(reason.contains("runaway"), "{reason}");
        }
        assert_eq!(env.live_counts().open_intents, 0, "{sub}: settled");
        // A start after that records nothing more.
        let _ = run_at(&env, &state, &[], &["true"]);
        assert_eq!(records_of(sub).len(), 1);
    }
    // A key creation cut the same way: the key was stored with its intent (its secret was
    // never printed, so nobody holds it), and the next start records its creation once.
    let mut create = cmd_at(&env, &state, "keys");
    create.args(["create", "--tenant", "acme", "--scopes", "exec", "--json"]);
    let out = under_strace(
        &create,
        &["-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"],
    );
    assert!(
        !out.status.success(),
        "create was not killed: {}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("sbxk_"),
        "no secret printed"
    );
    let keys = env.store().list_credentials(Some("acme")).unwrap();
    assert_eq!(
        keys.len(),
        1,
        "the key took effect with its commit: {keys:?}"
    );
    assert!(
        records_of("key_create").is_empty(),
        "recorded before the kill"
    );
    ok(
        run_at(&env, &state, &[], &["true"]),
        "the start after create",
    );
    let recs = records_of("key_create");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["tenant_id"], "acme", "{recs:?}");
    let reason = recs[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&keys[0].id) && reason.contains("recorded at recovery"),
        "{reason}"
    );
    // A key revocation cut the same way is recorded with the key's id and tenant, as its
    // own record would have been (the id read redacted, the tenant `default`).
    let created = ok(
        cmd_at(&env, &state, "keys")
            .args(["create", "--tenant", "acme", "--scopes", "exec", "--json"])
            .output()
            .unwrap(),
        "keys create",
    );
    let id = serde_json::from_slice::<serde_json::Value>(&created.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut revoke = cmd_at(&env, &state, "keys");
    revoke.args(["revoke", &id]);
    let out = under_strace(
        &revoke,
        &["-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"],
    );
    assert!(
        !out.status.success(),
        "revoke was not killed: {}",
        text(&out)
    );
    ok(run_at(&env, &state, &[], &["true"]), "the next start");
    let recs = records_of("key_revoke");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["arguments"]["key_id"], id.as_str(), "{recs:?}");
    assert_eq!(recs[0]["tenant_id"], "acme", "{recs:?}");
    assert_verifies(&state);
}

/// Sealing an egress secret changes a file, which cannot share the store's transaction: the
/// action commits its intent, then changes the file, then writes its record. Killed after
/// the intent (before the change) and after the change (before the record), the next start
/// records it either way, as `interrupted`, saying it may not have taken effect. The
/// change made just before the kill used to have no record at all.
#[test]
fn a_secret_change_killed_before_its_record_is_recorded_at_the_next_start() {
    if no_strace() {
        return;
    }
    let env = Env::new("secretkill", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let trail = state.join("audit.jsonl");
    let key = "ab".repeat(32);
    let value = env.path().join("value");
    std::fs::write(&value, b"value-of-the-secret").unwrap();
    let set = |name: &str| {
        let mut c = cmd_at(&env, &state, "secrets");
        c.args(["set", name, "--host", "api.example"])
            .env("SBX_SECRETS_KEY", &key);
        c
    };
    let listed = || -> Vec<String> {
        let out = cmd_at(&env, &state, "secrets")
            .args(["list", "--json"])
            .env("SBX_SECRETS_KEY", &key)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|i| i["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // A first secret, whole: its record is written and nothing is left open.
    ok(
        set("FIRST")
            .stdin(std::fs::File::open(&value).unwrap())
            .output()
            .unwrap(),
        "secrets set",
    );
    assert_eq!(listed(), ["FIRST"]);
    // Killed at the command's first sync (the intent's commit), and at the sync of the state
    // directory after the rename that puts the new secrets file in place: the second of
    // the syncs naming the state directory (the new file's, then the directory's; found by
    // path, as strace counts each thread's syscalls on their own).
    let dir = state.display().to_string();
    let at_commit: &[&str] = &["-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"];
    let after_rename: &[&str] = &[
        "-P",
        &dir,
        "-e",
        "trace=fsync",
        "-e",
        "inject=fsync:signal=KILL:when=2",
    ];
    for (base, strace, changed) in [("BEFORE", at_commit, false), ("AFTER", after_rename, true)] {
        // strace counts each thread's syscalls on their own, and which thread of the
        // blocking pool makes which sync varies: where the kill did not land, the secret
        // was set whole (recorded like any other), and the same kill is tried again under
        // another name.
        let mut name = String::new();
        let mut killed = None;
        for attempt in 0..5 {
            name = if attempt == 0 {
                base.to_string()
            } else {
                format!("{base}{attempt}")
            };
            let out = under_strace_with(
                &set(&name),
                strace,
                std::fs::File::open(&value).unwrap().into(),
            );
            if !out.status.success() {
                killed = Some(out);
                break;
            }
        }
        assert!(killed.is_some(), "{base}: not killed in 5 attempts");
        let name = name.as_str();
        assert_eq!(
            listed().contains(&name.to_string()),
            changed,
            "{name}: the file was changed: {:?}",
            listed()
        );
        assert_eq!(
            env.live_counts().open_intents,
            1,
            "{name}: its intent is open"
        );
        ok(run_at(&env, &state, &[], &["true"]), "the next start");
        let recs: Vec<serde_json::Value> = records(&trail)
            .into_iter()
            .filter(|v| {
                v["tool_name"] == "secret_set" && v["reason"].as_str().unwrap_or("").contains(name)
            })
            .collect();
        assert_eq!(recs.len(), 1, "{name}: one record: {recs:?}");
        assert_eq!(recs[0]["status"], "interrupted", "{recs:?}");
        let reason = recs[0]["reason"].as_str().unwrap();
        assert!(reason.contains("may not have taken effect"), "{reason}");
        assert_eq!(env.live_counts().open_intents, 0, "{name}: settled");
    }
    assert_verifies(&state);
}

/// With `on_sink_failure = "warn"` (the default) an operation goes on when the trail cannot
/// take its record (strace fails every write to the trail with ENOSPC: a full disk under
/// it). The record is kept in the store, in the transaction that closes the operation (or
/// on its own for a denial), and the next start writes it to the trail: once, chained and
/// signed like any other. Such records were never written at all.
#[test]
fn a_record_the_trail_could_not_take_is_written_at_the_next_start() {
    if no_strace() {
        return;
    }
    let env = Env::new("latewrite", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let trail = state.join("audit.jsonl");
    let enospc = full_disk(&trail);
    let full = |c: Command| under_strace(&c, &enospc);
    let mut allowed = cmd_at(&env, &state, "run");
    allowed.args([
        "--tier",
        "process",
        "--idempotency-key",
        "late-1",
        "--",
        "true",
    ]);
    let out = full(allowed);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warn mode goes on: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("SBX_E1601"),
        "the failure is said: {}",
        text(&out)
    );
    // The policy allows the process tier only: a denial, whose record fails the same way.
    let mut denied = cmd_at(&env, &state, "run");
    denied.args(["--tier", "namespace", "--", "true"]);
    let out = full(denied);
    assert_eq!(out.status.code(), Some(120), "{}", text(&out));
    let records = || records(&trail);
    assert!(
        !records().iter().any(|r| r["idempotency_key"] == "late-1"),
        "the trail took nothing"
    );
    let kept = env.store().unrecorded(100).unwrap();
    assert_eq!(kept.len(), 2, "both records are kept: {kept:?}");
    // The next start writes them.
    ok(run_at(&env, &state, &[], &["true"]), "the next run");
    assert!(
        env.store().unrecorded(100).unwrap().is_empty(),
        "written and forgotten"
    );
    for _ in 0..2 {
        let recs = records();
        for k in &kept {
            let mine: Vec<_> = recs
                .iter()
                .filter(|r| r["operation_id"] == k.operation_id.as_str())
                .collect();
            assert_eq!(mine.len(), 1, "one record of {}: {mine:?}", k.operation_id);
        }
        let keyed: Vec<_> = recs
            .iter()
            .filter(|r| r["idempotency_key"] == "late-1")
            .collect();
        assert_eq!(keyed.len(), 1, "{keyed:?}");
        assert_eq!(keyed[0]["status"], "ok", "{keyed:?}");
        assert!(
            recs.iter()
                .any(|r| r["operation_id"] == kept[1].operation_id.as_str()
                    && r["decision"] == "deny"),
            "the denial's record"
        );
        // A later start writes nothing again.
        ok(run_at(&env, &state, &[], &["true"]), "a later run");
    }
    assert_verifies(&state);
}

/// A full disk under the trail (strace fails every write to it with ENOSPC) must not stop
/// the brake: a start whose trail does not end with a clean close writes an `open`
/// checkpoint first, and that failed write stopped every command, `kill` included
/// (`SBX_E1602`, exit 125). Now the kill switch engages, its record is kept in the store,
/// and once the disk has room the next start writes it: one record, and the trail verifies.
#[test]
fn a_full_disk_under_the_trail_does_not_stop_the_kill_switch() {
    if no_strace() {
        return;
    }
    let env = Env::new("fullbrake", "process");
    let state = env.state();
    ok(run_at(&env, &state, &[], &["true"]), "first run");
    let trail = state.join("audit.jsonl");
    let full = full_disk(&trail);
    // A run killed after its record, before its closing checkpoint: the trail no longer
    // ends with a clean close, so the next opener has a checkpoint to write first.
    let mut run = cmd_at(&env, &state, "run");
    run.args(["--tier", "process", "--", "true"]);
    let out = under_strace(
        &run,
        &[
            "-e",
            "trace=fdatasync",
            "-e",
            "inject=fdatasync:signal=KILL:when=1",
        ],
    );
    assert!(
        !out.status.success(),
        "the run was not killed: {}",
        text(&out)
    );
    // A run on the full disk: it goes on (warn), its record kept in the store.
    let out = under_strace(&run, &full);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The brake, on the still-full disk.
    let mut kill = cmd_at(&env, &state, "kill");
    kill.args(["--reason", "disk-full"]);
    let out = under_strace(&kill, &full);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the kill switch engages: {}",
        text(&out)
    );
    assert!(env.store().kill_state().unwrap().is_some());
    let kills = || {
        records(&trail)
            .into_iter()
            .filter(|r| r["event"] == "admin" && r["tool_name"] == "kill")
            .count()
    };
    assert_eq!(kills(), 0, "nothing reached the trail");
    // Room again: the next start writes what was kept; the switch still holds.
    let next = run_at(&env, &state, &[], &["true"]);
    assert_eq!(next.status.code(), Some(120), "{}", text(&next));
    assert_eq!(kills(), 1);
    assert!(env.store().unrecorded(100).unwrap().is_empty());
    assert_verifies(&state);
}

/// A run killed while its program runs (the CLI SIGKILLed, so no outcome is recorded) is
/// charged its reservation at the next start: the most it could cost, never nothing. A
/// caller that kills its own runs before they end cannot use the sandbox free of its
/// budget.
#[test]
fn a_run_killed_while_it_runs_is_charged_its_reservation() {
    let env = Env::new("killedrun", "process");
    let cfg = env.write_config(
        "priced.toml",
        "[limits]\ntimeout = \"20s\"\n\n[budget]\nper_tenant = \"100\"\n\n[budget.rate_card]\ncpu_second = \"0.01\"\ngib_second = \"0\"\nper_call = \"0\"\n",
    );
    let script = format!("sleep 30 # {}", env.marker);
    let mut child = env
        .run_cmd(Some(&cfg), &[], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    // The program's shell (the CLI's own command line names the marker too).
    while !procs_with(&env.marker).iter().any(|p| *p != child.id()) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the program did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let _ = child.wait();
    let left = wait_no_procs(&env.marker, std::time::Duration::from_secs(10));
    assert!(left.is_empty(), "{}", describe_and_stop(&left));
    assert_eq!(env.live_counts().open_intents, 1, "its intent is open");
    // The next start recovers it.
    ok(
        env.run_cmd(Some(&cfg), &[], &["true"]).output().unwrap(),
        "the next run",
    );
    let ledger = ledger_of(&env);
    let charged: Vec<&sandboxio_gateway::store::LedgerLine> = ledger
        .iter()
        .filter(|l| l.description.starts_with("interrupted"))
        .collect();
    assert_eq!(charged.len(), 1, "{ledger:?}");
    // 20 s at one CPU at 0.01 a CPU-second: 0.20.
    assert_eq!(charged[0].amount, "0.20".parse::<Money>().unwrap());
    assert_eq!(env.live_counts().reservations, 0);
    let trail = std::fs::read_to_string(env.state().join("audit.jsonl")).unwrap();
    assert!(
        trail.contains("charged its reservation of 0.2"),
        "the interrupted record does not say what it was charged"
    );
}

/// A keyed run killed while it runs is recorded interrupted at the next start, and its key
/// answers "may have run; not run again". After the database is lost and rebuilt from the
/// trail, the key still answers so: the program is not run a second time.
#[test]
fn a_rebuilt_state_keeps_the_key_of_an_interrupted_run() {
    let env = Env::new("rebuiltkey", "process");
    let marker = env.path().join("side-effects");
    let script = format!(
        "echo once >> '{}'; sleep 30 # {}",
        marker.display(),
        env.marker
    );
    let keyed =
        |env: &Env| env.run_cmd(None, &["--idempotency-key", "once"], &["sh", "-c", &script]);
    let mut child = keyed(&env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let _ = child.wait();
    let left = wait_no_procs(&env.marker, std::time::Duration::from_secs(10));
    assert!(left.is_empty(), "{}", describe_and_stop(&left));
    ok(
        env.run_cmd(None, &[], &["true"]).output().unwrap(),
        "recovery",
    );
    let again = keyed(&env).output().unwrap();
    assert_eq!(again.status.code(), Some(123), "{}", text(&again));
    // The database is lost; the operator rebuilds it from the trail and resumes.
    let db = env.state().join("state.db");
    std::fs::rename(&db, env.path().join("state.db.lost")).unwrap();
    for ext in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(env.state().join(ext));
    }
    ok(
        env.cmd("state", None)
            .args(["recover", "--from-trail"])
            .output()
            .unwrap(),
        "recover",
    );
    ok(env.cmd("resume", None).output().unwrap(), "resume");
    let after = keyed(&env).output().unwrap();
    assert_eq!(after.status.code(), Some(123), "{}", text(&after));
    assert!(text(&after).contains("SBX_E1512"), "{}", text(&after));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "once\n",
        "the program ran again"
    );
}

/// A run SIGKILLed while it waits for its approval never ran: the next start records it
/// interrupted and releases its reservation (no charge, no ledger line).
#[test]
fn a_run_killed_while_it_waits_for_approval_is_not_charged() {
    use std::io::BufRead as _;
    let env = Env::new("killedask", "process");
    ask_policy(&env);
    let cfg = env.write_config(
        "priced.toml",
        "[limits]\ntimeout = \"20s\"\n\n[budget]\nper_tenant = \"100\"\n\n[budget.rate_card]\ncpu_second = \"0.01\"\ngib_second = \"0\"\nper_call = \"0\"\n",
    );
    let mut child = env
        .run_cmd(Some(&cfg), &["--approval-timeout", "60s"], &["true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed once it says it waits for a person.
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let waiting = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("waiting for approval"));
    assert!(waiting, "the run never waited for its approval");
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(env.live_counts().reservations, 1, "its reservation is held");
    // The next start recovers it (a denied run: the policy asks, nobody answers at once).
    let _ = env
        .run_cmd(Some(&cfg), &["--approval-timeout", "1s"], &["true"])
        .output()
        .unwrap();
    assert_eq!(env.live_counts().reservations, 0);
    assert!(
        ledger_of(&env).is_empty(),
        "a run that never started was charged: {:?}",
        ledger_of(&env)
    );
}
