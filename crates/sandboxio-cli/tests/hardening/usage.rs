//! A usage error changes nothing: every flag is checked before the state is opened, so a
//! refused command line leaves the trail, the database and its write-ahead log byte for
//! byte as they were (no checkpoint line, no store write).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::*;
use crate::watchdog::*;

/// Every file of the state directory with its bytes.
fn snapshot(dir: &std::path::Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect()
}

#[test]
fn a_usage_error_leaves_the_state_as_it_was() {
    let env = Env::new("usage-nochange", "process");
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let before = snapshot(&env.state());
    assert!(
        before.keys().any(|p| p.ends_with("audit.jsonl")),
        "{before:?}"
    );
    let missing = env.path().join("no-such-input");
    let missing = missing.to_str().unwrap();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "run --idempotency-key ''",
            vec!["--idempotency-key", ""],
            "SBX_E1006",
        ),
        ("run --workdir rel", vec!["--workdir", "rel"], "SBX_E1021"),
        ("run --mount bad", vec!["--mount", "nocolon"], "SBX_E1020"),
        (
            "run --mount reserved",
            vec!["--mount", ".:/proc"],
            "SBX_E1020",
        ),
        ("run --input missing", vec!["--input", missing], "SBX_E1704"),
        (
            "run --estimated-cost garbage",
            vec!["--estimated-cost", "garbage"],
            "SBX_E1003",
        ),
    ];
    let o = run(
        "run --tier bogus",
        env.cmd("run", None).args(["--tier", "bogus", "--", "true"]),
    );
    assert_error("run --tier bogus", &o, "SBX_E1007", 2);
    assert_eq!(
        snapshot(&env.state()),
        before,
        "--tier bogus changed the state"
    );
    for (what, extra, code) in cases {
        let o = run(what, &mut env.run_cmd(None, &extra, &["true"]));
        assert_error(what, &o, code, 2);
        assert_eq!(snapshot(&env.state()), before, "{what} changed the state");
    }
    let others: Vec<(&str, &str, Vec<&str>)> = vec![
        ("approvals approve ''", "approvals", vec!["approve", ""]),
        ("approvals deny 'a b'", "approvals", vec!["deny", "a b"]),
        ("approvals approve x", "approvals", vec!["approve", "x"]),
        (
            "budget --reopen garbage",
            "budget",
            vec!["--reopen", "garbage"],
        ),
        (
            "browse --tier bogus",
            "browse",
            vec!["--tier", "bogus", "https://example.com/"],
        ),
    ];
    for (what, sub, args) in others {
        let o = run(what, env.cmd(sub, None).args(&args));
        assert_eq!(o.status.code(), Some(2), "{what}: {o:?}");
        assert!(text(&o.stderr).contains("error[SBX_E"), "{what}: {o:?}");
        assert_eq!(snapshot(&env.state()), before, "{what} changed the state");
    }
}

#[test]
fn an_empty_kill_reason_and_odd_ids_are_refused_and_change_nothing() {
    let env = Env::new("usage-ids", "process");
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let before = snapshot(&env.state());
    for reason in ["", "   ", "\t\n"] {
        let o = run(
            "kill --reason",
            env.cmd("kill", None).args(["--reason", reason]),
        );
        assert_error("empty kill reason", &o, "SBX_E1720", 2);
        assert_eq!(
            snapshot(&env.state()),
            before,
            "kill {reason:?} changed the state"
        );
    }
    // The kill switch was never engaged: a run still goes ahead.
    let o = run("run after", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let before = snapshot(&env.state());
    for id in ["a/b", "../t", "\u{fc}", ".hidden", "a b", "x%2Fy"] {
        for flag in ["--tenant", "--agent"] {
            let o = run(flag, &mut env.run_cmd(None, &[flag, id], &["true"]));
            assert_error(&format!("{flag} {id:?}"), &o, "SBX_E1006", 2);
            assert_eq!(
                snapshot(&env.state()),
                before,
                "{flag} {id:?} changed the state"
            );
        }
        let o = run(
            "status --tenant",
            env.cmd("status", None).args(["--tenant", id]),
        );
        assert_error(&format!("status --tenant {id:?}"), &o, "SBX_E1006", 2);
    }
    // The ids the project uses still run: an e-mail address, a window-like name.
    for id in ["alice@example.com", "bob@day:2026-12-06", "lab-chem"] {
        let o = run(
            "good id",
            &mut env.run_cmd(None, &["--tenant", id, "--agent", id], &["true"]),
        );
        assert_eq!(o.status.code(), Some(0), "{id}: {}", text(&o.stderr));
    }
}
