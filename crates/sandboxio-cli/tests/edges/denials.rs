//! A denial names its own layer, its own reason and its own code; the allow rule's reason
//! and rules appear only when the policy is what decided.

use crate::common::*;
use crate::util::*;

/// The one status line the CLI adds on stderr.
fn status_line(o: &std::process::Output) -> String {
    text(&o.stderr)
        .lines()
        .find(|l| l.starts_with("sandboxio"))
        .unwrap_or_else(|| panic!("no status line: {}", text(&o.stderr)))
        .to_string()
}

fn assert_denied_by(what: &str, o: &std::process::Output, layer: &str, code: &str) -> String {
    assert_no_panic(what, o);
    assert_eq!(o.status.code(), Some(120), "{what}: {}", text(&o.stderr));
    let line = status_line(o);
    assert!(
        line.starts_with(&format!("sandboxio[{code}]: denied at {layer}: ")),
        "{what}: {line}"
    );
    assert!(
        !line.contains(ALLOW_REASON) && !line.contains("rules:"),
        "{what}: the allow rule's reason leaked into another layer's denial: {line}"
    );
    line
}

#[test]
fn a_rate_limit_denial_names_the_rate_limit_not_the_allow_rule() {
    let env = Env::new("deny-rate", "process");
    let cfg = env.write_config(
        "rate.toml",
        "[[rate_limits.limit]]\naction = \"exec\"\nlimit = \"1/hour\"\n",
    );
    let ok = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let o = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    let line = assert_denied_by("rate limit", &o, "rate_limit", "SBX_E1552");
    assert!(line.contains("1/hour"), "{line}");
}

#[test]
fn a_kill_switch_denial_names_the_kill_switch() {
    let env = Env::new("deny-kill", "process");
    let k = run(env.cmd("kill", None).args(["--reason", "edge maintenance"]));
    assert_eq!(k.status.code(), Some(0), "{k:?}");
    let o = run(env.run_cmd(None, &[], &["true"]));
    let line = assert_denied_by("kill switch", &o, "kill_switch", "SBX_E1551");
    assert!(line.contains("edge maintenance"), "{line}");
}

#[test]
fn a_budget_denial_names_the_budget() {
    let env = Env::new("deny-budget", "process");
    let cfg = env.write_config("budget.toml", "[budget]\nglobal = \"0.10\"\n");
    let o = run(env.run_cmd(Some(&cfg), &["--estimated-cost", "5"], &["true"]));
    assert_denied_by("budget", &o, "budget", "SBX_E1553");
}

#[test]
fn a_policy_denial_carries_a_code_and_the_policys_reason() {
    let env = Env::new("deny-policy", "process");
    // The policy allows the process tier only.
    let o = run(env
        .cmd("run", None)
        .args(["--tier", "landlock", "--", "true"]));
    assert_no_panic("policy", &o);
    assert_eq!(o.status.code(), Some(120), "{}", text(&o.stderr));
    let line = status_line(&o);
    assert!(
        line.starts_with("sandboxio[SBX_E1550]: denied at policy: "),
        "{line}"
    );
    assert!(!line.contains(ALLOW_REASON), "{line}");
    let j = run(env
        .cmd("run", None)
        .args(["--json", "--tier", "landlock", "--", "true"]));
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["record"]["layer"], "policy");
    assert_eq!(v["record"]["error_code"], "SBX_E1550");
}

#[test]
fn a_timeout_says_which_limit_not_the_allow_rule() {
    let env = Env::new("deny-timeout", "process");
    let o = run(env.run_cmd(None, &["--timeout", "1s"], &["sleep", "30"]));
    assert_no_panic("timeout", &o);
    assert_eq!(o.status.code(), Some(124), "{}", text(&o.stderr));
    let line = status_line(&o);
    assert!(line.contains("timed_out at sandbox"), "{line}");
    assert!(line.contains("1s wall-clock limit"), "{line}");
    assert!(
        !line.contains(ALLOW_REASON) && !line.contains("rules:"),
        "{line}"
    );
}
