//! Limit flags of zero, and a secret too short to redact: usage errors with their own code,
//! before anything is opened or created.

use crate::common::*;
use crate::watchdog::*;

#[test]
fn a_zero_limit_flag_is_refused_not_taken_as_the_default() {
    let env = Env::new("zero", "process");
    for (flag, value) in [("--timeout", "0s"), ("--memory", "0"), ("--pids", "0")] {
        let o = run(flag, &mut env.run_cmd(None, &[flag, value], &["true"]));
        assert_error(flag, &o, "SBX_E1716", 2);
        assert!(text(&o.stderr).contains(flag), "{}", text(&o.stderr));
    }
    assert!(!env.state().exists(), "a refused run created the state");
    // Above zero, they run.
    let o = run(
        "limits",
        &mut env.run_cmd(
            None,
            &["--timeout", "10s", "--memory", "256MiB", "--pids", "64"],
            &["true"],
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn a_secret_too_short_to_redact_says_so() {
    let env = Env::new("shortsecret", "process");
    let o = run(
        "short secret",
        &mut env.run_cmd(None, &["--secret-env", "TOK=abc"], &["true"]),
    );
    assert_error("--secret-env TOK=abc", &o, "SBX_E1607", 2);
    let err = text(&o.stderr);
    assert!(err.contains("`TOK`") && err.contains("too short"), "{err}");
    assert!(!err.contains("redactor unavailable"), "{err}");
    assert!(!env.state().exists(), "a refused run created the state");
    let o = run(
        "long enough secret",
        &mut env.run_cmd(None, &["--secret-env", "TOK=abcd-long"], &["true"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
