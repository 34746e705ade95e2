//! Simulated restricted hosts: each refusal gives its own code and exact fix, in `run` and
//! in `doctor`; the landlock tier is used instead only when the config allows it, and the
//! result and the record say so.

use crate::harness::*;

const FALLBACK_ON: &str = "[sandbox]\nallow_landlock_fallback = true\n";

/// Users to try each simulation as: root (when we are) and `nobody` (when user namespaces
/// are allowed for it, which the simulations need).
fn users() -> Vec<User> {
    let mut out = vec![User::new(current_uid())];
    if is_root() {
        match userns_works_for(NOBODY) {
            Ok(()) => out.push(User::new(NOBODY)),
            Err(why) => eprintln!("SKIP (uid {NOBODY} part): {why}"),
        }
    }
    out
}

fn assert_refused(o: &std::process::Output, code: &str, fix: &str) {
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(125),
        "expected the setup status 125:\n{err}"
    );
    assert!(err.contains(code), "expected {code}:\n{err}");
    assert!(err.contains(fix), "expected the fix `{fix}`:\n{err}");
    assert!(
        err.contains("[sandbox] allow_landlock_fallback"),
        "the message must name the config key:\n{err}"
    );
    assert!(!err.contains("SandboxConfig"), "a Rust struct named: {err}");
}

#[test]
fn user_namespaces_off_by_sysctl_gives_its_code_and_fix() {
    if let Err(why) = userns_works_for(current_uid()) {
        eprintln!("SKIP: cannot create the test's own user namespace: {why}");
        return;
    }
    for user in users() {
        let o = output(user.cli_on(Host::UsernsOff, &["run", "--", "/usr/bin/true"]));
        assert_refused(&o, "SBX_E1490", "sysctl -w user.max_user_namespaces=");

        let d = output(user.cli_on(Host::UsernsOff, &["doctor", "--json"]));
        let (ok, detail, fix) = doctor_tier(&json(&d), "namespace");
        assert!(!ok, "doctor says ok where run fails: {detail}");
        assert!(detail.contains("SBX_E1490"), "{detail}");
        assert!(fix.contains("user.max_user_namespaces"), "{fix}");
    }
}

#[test]
fn landlock_fallback_happens_only_when_configured_and_is_recorded() {
    if let Err(why) = userns_works_for(current_uid()) {
        eprintln!("SKIP: cannot create the test's own user namespace: {why}");
        return;
    }
    for user in users() {
        let marker = format!("ran-{}", user.uid);
        let argv = ["run", "--json", "--", "/bin/echo", marker.as_str()];
        // Not configured: refused, and nothing ran.
        let o = output(user.cli_on(Host::UsernsOff, &argv));
        assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
        assert!(!text(&o.stdout).contains(&format!("{marker}\n")), "it ran");

        // Configured: the landlock tier runs it, and says why.
        user.config(FALLBACK_ON);
        let o = output(user.cli_on(Host::UsernsOff, &argv));
        let r = json(&o);
        assert_eq!(r["exit"]["code"], 0, "{r}\n{}", text(&o.stderr));
        assert_eq!(r["stdout"], format!("{marker}\n"), "{r}");
        assert_eq!(r["enforcement"]["tier"], "landlock", "{r}");
        let first = gaps(&r).first().cloned().unwrap_or_default();
        assert!(
            first.contains("fell back from namespace to landlock"),
            "{first}"
        );
        assert!(
            first.contains("`[sandbox] allow_landlock_fallback` is true"),
            "{first}"
        );
        assert!(first.contains("SBX_E1490"), "{first}");
        assert_eq!(
            r["record"]["isolation"], "landlock",
            "record: {}",
            r["record"]
        );
        assert!(
            r["record"]["enforcement"]["gaps"][0]
                .as_str()
                .is_some_and(|g| g.contains("fell back")),
            "record: {}",
            r["record"]
        );
    }
}

#[test]
fn seccomp_refusing_new_user_namespaces_gives_the_container_code_and_fix() {
    let Some(tool) = deny_tool() else { return };
    for user in users() {
        let o = output(user.cli_on(
            Host::Seccomp(&tool, "userns"),
            &["run", "--", "/usr/bin/true"],
        ));
        assert_refused(
            &o,
            "SBX_E1493",
            "seccomp profile that allows unshare and clone",
        );

        let d = output(user.cli_on(Host::Seccomp(&tool, "userns"), &["doctor", "--json"]));
        let (ok, detail, fix) = doctor_tier(&json(&d), "namespace");
        assert!(!ok, "doctor says ok where run fails: {detail}");
        assert!(detail.contains("SBX_E1493"), "{detail}");
        assert!(fix.contains("seccomp"), "{fix}");
    }
}

#[test]
fn landlock_refused_by_the_kernel_is_named_with_its_fix() {
    let Some(tool) = deny_tool() else { return };
    for user in users() {
        // Namespace tier without Landlock: runs, and the gap says so.
        let o = output(user.cli_on(
            Host::Seccomp(&tool, "landlock"),
            &["run", "--json", "--", "/usr/bin/true"],
        ));
        let r = json(&o);
        assert_eq!(r["exit"]["code"], 0, "{r}");
        assert!(r["enforcement"]["landlock_abi"].is_null(), "{r}");
        assert!(
            gaps(&r).iter().any(|g| g.contains("landlock unavailable")),
            "{r}"
        );
        // No user namespaces and no Landlock, fallback allowed: the landlock tier refuses
        // rather than run with less than it promises.
        user.config(FALLBACK_ON);
        let o = output(user.cli_on(
            Host::Seccomp(&tool, "userns,landlock"),
            &["run", "--", "/usr/bin/true"],
        ));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert!(err.contains("SBX_E1469"), "{err}");
        assert!(err.contains("CONFIG_SECURITY_LANDLOCK"), "{err}");
        std::fs::remove_file(user.state().join("sandboxio.toml")).unwrap();

        let d = output(user.cli_on(Host::Seccomp(&tool, "landlock"), &["doctor", "--json"]));
        let doctor = json(&d);
        assert_eq!(doctor["landlock"]["available"], false, "{doctor}");
        let (ok, detail, fix) = doctor_tier(&doctor, "landlock");
        assert!(!ok, "{detail}");
        assert!(fix.contains("CONFIG_SECURITY_LANDLOCK"), "{fix}");
    }
}

#[test]
fn no_seccomp_is_named_with_its_fix_and_nothing_falls_back() {
    let Some(tool) = deny_tool() else { return };
    for user in users() {
        // Even with the fallback allowed: the landlock tier needs seccomp too.
        user.config(FALLBACK_ON);
        let o = output(user.cli_on(
            Host::Seccomp(&tool, "seccomp"),
            &["run", "--", "/usr/bin/true"],
        ));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert!(err.contains("SBX_E1495"), "{err}");
        assert!(err.contains("CONFIG_SECCOMP_FILTER"), "{err}");
        assert!(!err.contains("fell back"), "{err}");
        std::fs::remove_file(user.state().join("sandboxio.toml")).unwrap();

        let d = output(user.cli_on(Host::Seccomp(&tool, "seccomp"), &["doctor", "--json"]));
        let doctor = json(&d);
        assert_eq!(doctor["seccomp"]["available"], false, "{doctor}");
        for tier in ["namespace", "landlock"] {
            let (ok, detail, fix) = doctor_tier(&doctor, tier);
            assert!(!ok, "doctor says {tier} ok without seccomp: {detail}");
            assert!(detail.contains("SBX_E1495"), "{detail}");
            assert!(fix.contains("CONFIG_SECCOMP_FILTER"), "{fix}");
        }
    }
}
