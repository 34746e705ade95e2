use sandboxio_core::{IsolationTier, Language, OperationArgs, Verdict};
use sandboxio_policy::{NetAccess, PolicySet, DEFAULT_POLICY_NAME};

use super::common::*;

fn default() -> PolicySet {
    PolicySet::builtin_default().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn default_policy_loads_without_warnings() {
    let p = default();
    assert_eq!(p.rule_count(), 8);
    assert!(p.warnings().is_empty(), "{:?}", p.warnings());
}

#[test]
fn default_policy_file_on_disk_loads() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/default.toml");
    PolicySet::load_files(&[path]).unwrap();
}

#[test]
fn example_policies_load() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/examples");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let set = PolicySet::load_files(&[&path]).unwrap_or_else(|e| panic!("{e}"));
        assert!(set.rule_count() > 0);
        n += 1;
    }
    assert!(n >= 2);
}

#[test]
fn default_allows_code_in_namespace_without_network() {
    let p = default();
    let mut o = op(OperationArgs::RunCode {
        language: Language::Python,
        code: "print(1)".into(),
    });
    let d = p.evaluate(&o, &ctx());
    assert_eq!(d.verdict, Verdict::Allow, "{}", d.reason);
    assert_eq!(d.rules[0].id, "run-in-namespace");
    assert_eq!(d.rules[0].file.as_deref(), Some(DEFAULT_POLICY_NAME));
    assert!(d.rules[0].line.unwrap() > 1);

    o.tier = Some(IsolationTier::Process);
    assert_eq!(p.evaluate(&o, &ctx()).verdict, Verdict::Deny);

    o.tier = None;
    let mut c = ctx();
    c.network = NetAccess::Full;
    assert_eq!(p.evaluate(&o, &c).verdict, Verdict::Deny);

    // An unspecified tier means the configured default; a weaker default is not allowed.
    let mut c = ctx();
    c.default_tier = IsolationTier::Process;
    assert_eq!(p.evaluate(&o, &c).verdict, Verdict::Deny);
}

#[test]
fn default_keeps_files_in_the_workspace() {
    let p = default();
    assert_eq!(
        p.evaluate(&read("data/x.csv"), &ctx()).verdict,
        Verdict::Allow
    );
    for bad in ["../x", "/etc/passwd", "a/../../x", "./../x", "a//..//../x"] {
        let d = p.evaluate(&read(bad), &ctx());
        assert_eq!(d.verdict, Verdict::Deny, "{bad}");
        assert_eq!(d.rules[0].id, "files-outside-workspace", "{bad}");
    }
}

#[test]
fn default_asks_before_deleting_outside_the_workspace() {
    let p = default();
    assert_eq!(p.evaluate(&delete("tmp/x"), &ctx()).verdict, Verdict::Allow);
    let d = p.evaluate(&delete("/home/u/thesis.tex"), &ctx());
    assert_eq!(d.verdict, Verdict::Ask);
    assert!(d.reason.contains("approval"));
}

#[test]
fn default_denies_network_and_everything_else() {
    let p = default();
    let d = p.evaluate(&net("example.com", 443), &ctx());
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.rules[0].id, "no-network");
    let d = p.evaluate(&tool("send_email"), &ctx());
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(d.rules.is_empty());
    assert!(
        d.reason.starts_with("no policy rule allows"),
        "{}",
        d.reason
    );
}

#[test]
fn symlink_out_of_the_workspace_is_not_allowed() {
    let p = default();
    // `link` looks inside, but resolves to /etc/passwd.
    let c = ctx().with_resolved_path("/etc/passwd", "/tmp/ws");
    let d = p.evaluate(&read("link"), &c);
    assert_eq!(d.verdict, Verdict::Deny);
    // A delete through such a link asks (either form outside the workspace is enough).
    assert_eq!(p.evaluate(&delete("link"), &c).verdict, Verdict::Ask);
    // Resolved inside the workspace: allowed.
    let c = ctx().with_resolved_path("/tmp/ws/data/real.csv", "/tmp/ws");
    assert_eq!(p.evaluate(&read("link"), &c).verdict, Verdict::Allow);
}

#[test]
fn default_denies_mounts_of_system_and_credential_paths_and_rw_system_mounts() {
    let p = default();
    let with = |spec: &str| {
        let mut o = op(OperationArgs::Exec {
            argv: vec!["ls".into()],
        });
        let mut req = sandboxio_core::ExecRequest::new(["ls"]);
        req.mounts = vec![sandboxio_core::Mount::parse(spec, std::path::Path::new("/")).unwrap()];
        o.exec = Some(req);
        p.evaluate(&o, &ctx())
    };
    for spec in [
        "/:/host",
        "/proc:/p",
        "/home/u/.ssh:/k",
        "/home/u/.aws/credentials:/c",
        "/var/lib/sandboxio:/s",
        "/etc:/e:rw",
        "/usr/local:/u:rw",
    ] {
        let d = with(spec);
        assert_eq!(d.verdict, Verdict::Deny, "`{spec}`: {}", d.reason);
        assert!(
            d.rules.iter().any(|r| r.id.starts_with("no-")),
            "`{spec}` was denied by no mount rule: {:?}",
            d.rules
        );
    }
    for spec in [
        "/home/u/proj:/p:rw",
        "/etc:/e",
        "/srv/data:/d",
        "/tmp/x:/x:rw",
    ] {
        let d = with(spec);
        assert_eq!(d.verdict, Verdict::Allow, "`{spec}`: {}", d.reason);
    }
}
