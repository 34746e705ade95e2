#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `sandboxio browse` refusals through the real binary: each is a denial (exit 120) with
//! its code in the JSON answer's record, before any browser starts. Loading pages for real
//! needs a network namespace playing the internet: `scripts/suites/browse.sh`.

use std::path::Path;
use std::process::Command;

const CHROMIUM: &str = "/usr/lib/chromium/chromium";

struct Run {
    status: i32,
    answer: serde_json::Value,
}

fn browse(dir: &Path, config: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandboxio"));
    cmd.current_dir(dir)
        .arg("browse")
        .arg("--json")
        .arg("--state-dir")
        .arg(dir.join("state"));
    if let Some(c) = config {
        let path = dir.join("sandboxio-test.toml");
        std::fs::write(&path, c).unwrap();
        cmd.arg("--config").arg(path);
    }
    let out = cmd.args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Run {
        status: out.status.code().unwrap_or(-1),
        answer,
    }
}

const ALLOWLIST: &str = "[network]\nmode = \"allowlist\"\nallow = [\"site.test:80\"]\n";

fn code(r: &Run) -> &str {
    r.answer["record"]["error_code"].as_str().unwrap_or("")
}

#[test]
fn browse_in_the_process_tier_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let r = browse(
        d.path(),
        Some(ALLOWLIST),
        &["--tier", "process", "http://site.test/"],
    );
    assert_eq!(code(&r), "SBX_E1560", "{}", r.answer);
    assert_eq!(r.status, 120);
    assert_eq!(r.answer["record"]["event"], "browse");
    assert_eq!(r.answer["record"]["arguments"]["url"], "http://site.test/");
}

#[test]
fn browse_with_network_none_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let r = browse(d.path(), None, &["http://site.test/"]);
    assert_eq!(code(&r), "SBX_E1561", "{}", r.answer);
    assert_eq!(r.status, 120);
}

#[test]
fn browse_of_a_file_url_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let r = browse(d.path(), Some(ALLOWLIST), &["file:///etc/passwd"]);
    assert_eq!(code(&r), "SBX_E1005", "{}", r.answer);
    assert_eq!(r.status, 120);
}

#[test]
fn the_default_policy_allows_no_browse() {
    let d = tempfile::tempdir().unwrap();
    let r = browse(d.path(), Some(ALLOWLIST), &["http://site.test/"]);
    assert_eq!(r.status, 120, "{}", r.answer);
    if Path::new(CHROMIUM).exists() {
        assert_eq!(code(&r), "SBX_E1550", "{}", r.answer);
        assert_eq!(r.answer["record"]["layer"], "policy");
    } else {
        // The browser is looked up before policy; without it the refusal says so.
        eprintln!("no Chromium at {CHROMIUM}: checking the refusal that names it instead");
        assert_eq!(code(&r), "SBX_E1562", "{}", r.answer);
    }
}
