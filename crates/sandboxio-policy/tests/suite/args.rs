//! `args` matchers in a policy file: a deny on one argument value beside an allow of the
//! tool, an ask on a range, and refusals at load.

use sandboxio_core::{Operation, OperationArgs, Principal, Verdict};
use sandboxio_policy::PolicySet;

use super::common::{ctx, policy};

fn call(tool: &str, arguments: serde_json::Value) -> Operation {
    Operation::new(
        Principal::tenant("acme"),
        OperationArgs::ToolCall {
            tool: tool.into(),
            arguments,
        },
    )
}

const TEXT: &str = r#"
[[rule]]
id = "fs-tools"
effect = "allow"
kind = "tool_call"
tool = "fs__*"
reason = "the filesystem server"

[[rule]]
id = "no-etc"
effect = "deny"
kind = "tool_call"
tool = "fs__*"
args = [{ pointer = "/path", glob = "/etc/**" }]
reason = "not /etc"

[[rule]]
id = "big-writes-ask"
effect = "ask"
kind = "tool_call"
tool = "fs__write"
args = [{ pointer = "/size", min = 1000000 }, { pointer = "/force", present = true }]
reason = "big forced writes need a person"
"#;

#[test]
fn a_deny_on_an_argument_beats_the_allow_of_the_tool() {
    let p = policy(TEXT);
    let c = ctx();
    let d = p.evaluate(
        &call("fs__read", serde_json::json!({"path": "/etc/passwd"})),
        &c,
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.rules[0].id, "no-etc");
    let d = p.evaluate(
        &call("fs__read", serde_json::json!({"path": "/data/a"})),
        &c,
    );
    assert_eq!(d.verdict, Verdict::Allow);
    // A list where a string is expected cannot be judged: the deny holds.
    let d = p.evaluate(
        &call("fs__read", serde_json::json!({"path": ["/etc/passwd"]})),
        &c,
    );
    assert_eq!(d.verdict, Verdict::Deny);
}

#[test]
fn every_condition_of_a_rule_must_hold() {
    let p = policy(TEXT);
    let c = ctx();
    let big = serde_json::json!({"path": "/data/x", "size": 2000000, "force": true});
    assert_eq!(
        p.evaluate(&call("fs__write", big), &c).verdict,
        Verdict::Ask
    );
    let unforced = serde_json::json!({"path": "/data/x", "size": 2000000});
    assert_eq!(
        p.evaluate(&call("fs__write", unforced), &c).verdict,
        Verdict::Allow
    );
    let small = serde_json::json!({"path": "/data/x", "size": 10, "force": true});
    assert_eq!(
        p.evaluate(&call("fs__write", small), &c).verdict,
        Verdict::Allow
    );
}

#[test]
fn bad_args_are_refused_at_load_with_a_code() {
    for (rule, code) in [
        (
            "kind = \"exec\"\nargv_prefix = [\"ls\"]\nargs = [{ pointer = \"/a\", equals = 1 }]",
            "SBX_E1214",
        ),
        ("kind = \"tool_call\"\ntool = \"x\"\nargs = []", "SBX_E1206"),
        (
            "kind = \"tool_call\"\ntool = \"x\"\nargs = [{ pointer = \"/a\", regex = \"(\" }]",
            "SBX_E1206",
        ),
    ] {
        let text = format!("[[rule]]\nid = \"r\"\neffect = \"deny\"\nreason = \"r\"\n{rule}\n");
        let e = PolicySet::from_str("t.toml", &text).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), code, "{rule}: {e}");
    }
}
