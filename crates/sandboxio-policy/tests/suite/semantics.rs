use chrono::{DateTime, Utc};
use sandboxio_core::{ErrorCode, Money, Principal, Verdict};
use sandboxio_policy::{check, Context, PolicySet, PolicySource};

use super::common::*;

const LAYERED: &str = r#"
[[rule]]
id = "allow-git"
effect = "allow"
argv_prefix = ["git"]
reason = "git is fine"

[[rule]]
id = "ask-push"
effect = "ask"
argv_prefix = ["git", "push"]
reason = "pushing needs approval"

[[rule]]
id = "deny-force"
effect = "deny"
argv_glob = ["git", "push", "**"]
reason = "no pushes at all on fridays"
weekdays = ["fri"]
"#;

#[test]
fn deny_wins_over_ask_wins_over_allow() {
    let p = policy(LAYERED);
    assert_eq!(
        p.evaluate(&exec(&["git", "status"]), &ctx()).verdict,
        Verdict::Allow
    );
    let d = p.evaluate(&exec(&["git", "push"]), &ctx());
    assert_eq!(d.verdict, Verdict::Ask);
    assert_eq!(d.rules.len(), 1);
    assert_eq!(d.rules[0].id, "ask-push");
    assert_eq!(d.rules[0].line, Some(8));
    let friday: DateTime<Utc> = DateTime::parse_from_rfc3339("2024-01-05T12:00:00Z")
        .unwrap()
        .into();
    let d = p.evaluate(&exec(&["git", "push", "-f"]), &Context::new(friday));
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.reason, "no pushes at all on fridays");
}

#[test]
fn every_deciding_rule_is_listed_and_explain_shows_all_matches() {
    let p = policy(
        r#"
[[rule]]
id = "a"
effect = "deny"
tool = "rm*"
reason = "no rm"
[[rule]]
id = "b"
effect = "deny"
tool = ["rmdir"]
reason = "no rmdir"
[[rule]]
id = "c"
effect = "allow"
kind = "tool_call"
reason = "tools ok"
"#,
    );
    let e = p.explain(&tool("rmdir"), &ctx());
    assert_eq!(e.decision.verdict, Verdict::Deny);
    let ids: Vec<_> = e.decision.rules.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(e.decision.reason, "no rm; no rmdir");
    assert_eq!(e.matched.len(), 3);
    assert!(!e.matched[2].decided);
    assert_eq!(e.matched[2].effect, Verdict::Allow);
    assert_eq!(e.matched[2].rule.line, Some(12));
}

#[test]
fn later_file_cannot_weaken_an_earlier_deny() {
    let base = r#"
[[rule]]
id = "no-net"
effect = "deny"
kind = "net_connect"
reason = "no network"
"#;
    let overlay = r#"
[[rule]]
id = "allow-net"
effect = "allow"
kind = "net_connect"
reason = "network please"
"#;
    for order in [
        [("a.toml", base), ("b.toml", overlay)],
        [("b.toml", overlay), ("a.toml", base)],
    ] {
        let p = policies(&order);
        let d = p.evaluate(&net("example.com", 443), &ctx());
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(d.rules[0].file.as_deref(), Some("a.toml"));
        // Identical conditions across files are a warning, not an error.
        assert_eq!(p.warnings().len(), 1, "{:?}", p.warnings());
    }
}

#[test]
fn contradictory_rules_in_one_file_are_an_error() {
    let e = PolicySet::from_str(
        "c.toml",
        r#"
[[rule]]
id = "x"
effect = "allow"
kind = ["exec", "run_code"]
reason = "r"
[[rule]]
id = "y"
effect = "deny"
kind = ["run_code", "exec"]
reason = "r"
"#,
    )
    .unwrap_err();
    assert_eq!(e.code(), "SBX_E1209");
    assert!(e.to_string().starts_with("c.toml:7:1:"), "{e}");
}

#[test]
fn hosts_and_ports() {
    let p = policy(
        r#"
[[rule]]
id = "api"
effect = "allow"
host = ["*.example.com", "api.github.com"]
port = [443, "8000-8100"]
reason = "apis"
"#,
    );
    let v = |h, port| p.evaluate(&net(h, port), &ctx()).verdict;
    assert_eq!(v("a.example.com", 443), Verdict::Allow);
    assert_eq!(v("A.B.Example.COM.", 8050), Verdict::Allow);
    assert_eq!(v("example.com", 443), Verdict::Deny);
    assert_eq!(v("evilexample.com", 443), Verdict::Deny);
    assert_eq!(v("api.github.com", 80), Verdict::Deny);
    assert_eq!(v("api.github.com", 8100), Verdict::Allow);
}

#[test]
fn time_windows_wrap_midnight() {
    let p = policy(
        r#"
[[rule]]
id = "night"
effect = "allow"
kind = "exec"
time = "22:00-06:00"
reason = "nightly jobs"
"#,
    );
    let at = |t: &str| Context::new(DateTime::parse_from_rfc3339(t).unwrap().into());
    let o = exec(&["job"]);
    assert_eq!(
        p.evaluate(&o, &at("2024-01-01T23:59:00Z")).verdict,
        Verdict::Allow
    );
    assert_eq!(
        p.evaluate(&o, &at("2024-01-01T05:59:00Z")).verdict,
        Verdict::Allow
    );
    assert_eq!(
        p.evaluate(&o, &at("2024-01-01T06:00:00Z")).verdict,
        Verdict::Deny
    );
    assert_eq!(
        p.evaluate(&o, &at("2024-01-01T12:00:00Z")).verdict,
        Verdict::Deny
    );
}

#[test]
fn unknown_facts_resolve_toward_the_stricter_outcome() {
    let p = policy(
        r#"
[[rule]]
id = "cheap"
effect = "allow"
kind = "exec"
cost_at_most = "1.00"
reason = "cheap is fine"
[[rule]]
id = "pricey"
effect = "ask"
kind = "exec"
cost_above = "1.00"
reason = "expensive needs approval"
[[rule]]
id = "intern"
effect = "deny"
kind = "exec"
agent = "intern-*"
reason = "interns do not exec"
"#,
    );
    let mut o = exec(&["x"]);
    // No estimate: the allow rule does not match, the ask rule does.
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Deny);
    o.principal = Principal {
        tenant: "acme".into(),
        session: None,
        agent: Some("bot".into()),
    };
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Ask);
    o.estimated_cost = Some("0.50".parse::<Money>().unwrap());
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Allow);
    o.estimated_cost = Some("1.01".parse::<Money>().unwrap());
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Ask);
    o.principal.agent = Some("intern-7".into());
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Deny);
}

#[test]
fn paths_are_normalised_before_matching() {
    let p = policy(
        r#"
[[rule]]
id = "src"
effect = "allow"
path = "src/**"
reason = "src is readable"
[[rule]]
id = "no-keys"
effect = "deny"
path = ["**/*.pem", "secrets/**"]
reason = "no keys"
"#,
    );
    let v = |path: &str| p.evaluate(&read(path), &ctx()).verdict;
    assert_eq!(v("src/a.rs"), Verdict::Allow);
    assert_eq!(v("./src//lib/../a.rs"), Verdict::Allow);
    assert_eq!(v("src/../secrets/x"), Verdict::Deny);
    assert_eq!(v("src/../../src/a.rs"), Verdict::Deny);
    assert_eq!(v("src/k.pem"), Verdict::Deny);
    // A symlink in src pointing at secrets: the resolved form hits the deny.
    let c = ctx().with_resolved_path("/ws/secrets/id", "/ws");
    assert_eq!(p.evaluate(&read("src/link"), &c).verdict, Verdict::Deny);
}

#[test]
fn invalid_operations_are_denied_not_errors() {
    let p = policy(
        r#"
[[rule]]
id = "all-exec"
effect = "allow"
kind = "exec"
reason = "ok"
"#,
    );
    let d = p.evaluate(&exec(&[]), &ctx());
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(d.reason.contains("argv is empty"), "{}", d.reason);
}

#[test]
fn check_collects_every_error_across_files() {
    let r = check(&[
        PolicySource::new(
            "a.toml",
            "[[rule]]\nid = \"a\"\neffect = \"maybe\"\nreason = \"r\"\n[[rule]]\nid = \"b\"\neffect = \"allow\"\npath = \"[\"\nreason = \"r\"\n",
        ),
        PolicySource::new("b.toml", "[[rule]]\nid = \"a\"\neffect = \"deny\"\nkind = \"exec\"\nreason = \"r\"\n"),
    ]);
    let codes: Vec<_> = r.errors.iter().map(|e| e.code()).collect();
    assert_eq!(codes, ["SBX_E1207", "SBX_E1203"]);
    assert_eq!(r.errors[0].location().unwrap().line, 3);
    assert_eq!(r.rules, 1);
}

#[test]
fn no_files_is_an_error_and_deny_all_denies() {
    assert_eq!(
        PolicySet::from_sources(&[]).unwrap_err().code(),
        "SBX_E1218"
    );
    assert_eq!(
        PolicySet::deny_all()
            .evaluate(&exec(&["ls"]), &ctx())
            .verdict,
        Verdict::Deny
    );
}
