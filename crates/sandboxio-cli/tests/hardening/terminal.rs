//! Text agents chose, printed for people: shown escaped (`\x1b`), never raw, on a pipe as on
//! a terminal; JSON stays JSON. A tenant with a control character is refused up front.

use crate::common::*;
use crate::watchdog::*;

const HOSTILE: &str = "please\x1b]0;PWNED\x07\x1b[2J\u{9b}1A\rforged";
const SHOWN: &str = "please\\x1b]0;PWNED\\x07\\x1b[2J\\u{9b}1A\\x0dforged";

#[test]
fn a_rationale_reaches_approvers_escaped() {
    let env = Env::new("esc-why", "process");
    ask_policy(&env);
    let o = run(
        "ask run",
        env.run_cmd(
            None,
            &["--approval-timeout", "1s", "--rationale", HOSTILE],
            &["true"],
        )
        .arg(HOSTILE),
    );
    assert_eq!(o.status.code(), Some(120), "{}", text(&o.stderr));
    assert_no_controls("run stderr", &o.stderr);
    for args in [&["list", "--all"][..], &["list", "--all", "--json"][..]] {
        let mut c = env.cmd("approvals", None);
        c.args(args);
        let l = run("approvals list", &mut c);
        assert_eq!(l.status.code(), Some(0), "{}", text(&l.stderr));
        assert_no_controls("approvals list", &l.stdout);
        assert_no_controls("approvals list stderr", &l.stderr);
        if args.contains(&"--json") {
            // The same text, as JSON: it reads back as the rationale it was.
            let v: serde_json::Value = serde_json::from_slice(&l.stdout).unwrap();
            assert_eq!(v[0]["rationale"], HOSTILE, "{v}");
        } else {
            let out = text(&l.stdout);
            assert!(out.contains(&format!("why: {SHOWN}")), "{out}");
        }
    }
}

#[test]
fn argv_in_a_denial_and_in_the_trail_is_shown_escaped() {
    let env = Env::new("esc-argv", "process");
    // Only run_code is allowed: an exec is denied by default, and the reason names argv[0].
    std::fs::write(
        env.path().join("policy.toml"),
        r#"[settings]
name = "code-only"
description = "only run_code"

[[rule]]
id = "code"
effect = "allow"
kind = ["run_code"]
reason = "code only"
"#,
    )
    .unwrap();
    let o = run("denied run", &mut env.run_cmd(None, &[], &[HOSTILE, "x"]));
    assert_eq!(o.status.code(), Some(120), "{}", text(&o.stderr));
    assert_no_controls("run stderr", &o.stderr);
    let err = text(&o.stderr);
    assert!(
        err.contains("sandboxio[SBX_E1550]: denied") && err.contains(SHOWN),
        "{err}"
    );
    // `--json`: valid JSON holding the very argv[0], nothing raw in it.
    let o = run(
        "denied run json",
        &mut env.run_cmd(None, &["--json"], &[HOSTILE]),
    );
    assert_no_controls("run --json stdout", &o.stdout);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["record"]["reason"].as_str().unwrap().contains(HOSTILE),
        "{v}"
    );
    for sub in ["tail", "query"] {
        let mut c = Command::new(BIN);
        c.args(["audit", sub, "--state-dir"])
            .arg(env.state())
            .env_remove("SBX_STATE_DIR");
        let t = run(sub, &mut c);
        assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
        assert_no_controls(sub, &t.stdout);
        assert_no_controls(sub, &t.stderr);
        assert!(text(&t.stdout).contains(SHOWN), "{}", text(&t.stdout));
    }
}

#[test]
fn a_tenant_with_a_control_character_is_refused_before_anything_is_created() {
    let env = Env::new("esc-tenant", "process");
    for tenant in ["acme\x1b]0;PWNED\x07", "a\nb", "a\u{9b}b"] {
        let o = run(
            "control tenant",
            &mut env.run_cmd(None, &["--tenant", tenant], &["true"]),
        );
        assert_error("control tenant", &o, "SBX_E1006", 2);
        assert_no_controls("control tenant stderr", &o.stderr);
        assert!(text(&o.stderr).contains("control characters"), "{o:?}");
    }
    assert!(!env.state().exists(), "a refused run created the state");
    // An ordinary tenant still runs.
    let o = run(
        "tenant",
        &mut env.run_cmd(None, &["--tenant", "acme"], &["true"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

use std::process::Command;
