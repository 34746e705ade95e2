//! Errors that used to exit 1 without a code, relative host paths, and replays that
//! answered differently from the run they replay.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

use crate::common::*;
use crate::util::*;

/// `error[CODE]: ...` on stderr and the documented status.
fn assert_error(what: &str, o: &std::process::Output, code: &str, status: i32) {
    assert_no_panic(what, o);
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("error[{code}]: ")),
        "{what}: expected {code} on stderr: {err}"
    );
    assert_eq!(o.status.code(), Some(status), "{what}: {err}");
}

#[test]
fn env_without_equals_is_a_usage_error_with_a_code() {
    let env = Env::new("noeq", "process");
    let o = run(env.run_cmd(None, &["--env", "NOEQ"], &["true"]));
    assert_error("--env NOEQ", &o, "SBX_E1701", 2);
    assert!(text(&o.stderr).contains("`NOEQ`"));
    // A secret given without `=` is not echoed back.
    let o = run(env.run_cmd(None, &["--secret-env", "hunter2-value"], &["true"]));
    assert_error("--secret-env without =", &o, "SBX_E1701", 2);
    assert!(!text(&o.stderr).contains("hunter2-value"), "{o:?}");
    let o = run(env.run_cmd(None, &["--env", "=v"], &["true"]));
    assert_error("--env =v", &o, "SBX_E1702", 2);
}

#[test]
fn json_tells_the_clis_status_from_the_programs_own() {
    let env = Env::new("jsonstatus", "process");
    // The program exits 2 ...
    let prog = run(env.run_cmd(None, &["--json"], &["sh", "-c", "exit 2"]));
    assert_eq!(prog.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&prog.stdout).unwrap();
    assert_eq!(v["record"]["status"], "failed", "{v}");
    assert!(v["error"].is_null(), "{v}");
    // ... and the CLI exits 2 for a usage error: the JSON says which is which.
    let cli = run(env.run_cmd(None, &["--json", "--env", "NOEQ"], &["sh", "-c", "exit 2"]));
    assert_eq!(cli.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(v["error"]["code"], "SBX_E1701", "{v}");
    assert_eq!(v["error"]["class"], "usage", "{v}");
    assert_eq!(v["exit_status"], 2, "{v}");
    // A `--json` that belongs to the sandboxed command does not switch the CLI's answer.
    let o = run(env.run_cmd(None, &["--env", "NOEQ"], &["sh", "-c", "true", "--json"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

#[test]
fn a_bad_command_line_is_a_usage_error_with_a_code() {
    let env = Env::new("badflags", "process");
    let o = run(env.run_cmd(None, &["--no-such-flag"], &["true"]));
    assert_error("unknown flag", &o, "SBX_E1712", 2);
    let o = run(Command::new(BIN));
    assert_error("no command", &o, "SBX_E1712", 2);
    // Help is not an error.
    let o = run(Command::new(BIN).arg("--help"));
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).contains("Usage"), "{o:?}");
}

#[test]
fn a_non_utf8_traceparent_is_skipped_not_a_refused_command_line() {
    use std::os::unix::ffi::OsStrExt as _;
    let env = Env::new("tracep", "process");
    let o = run(env
        .run_cmd(None, &[], &["sh", "-c", "echo ran"])
        .env("TRACEPARENT", std::ffi::OsStr::from_bytes(b"00-\xff")));
    assert_no_panic("non-UTF-8 TRACEPARENT", &o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ran\n");
}

#[test]
fn a_missing_stdin_file_is_a_usage_error_with_a_code() {
    let env = Env::new("stdinfile", "process");
    let o = run(env.run_cmd(None, &["--stdin-file", "no-such-file"], &["cat"]));
    assert_error("--stdin-file missing", &o, "SBX_E1704", 2);
    assert!(text(&o.stderr).contains("--stdin-file"), "{o:?}");
    let o = run(env.run_cmd(None, &["--input", "no-such-dir"], &["true"]));
    assert_error("--input missing", &o, "SBX_E1704", 2);
}

#[test]
fn a_malformed_rate_limit_section_is_a_config_error_with_a_code() {
    let env = Env::new("ratefmt", "process");
    let cfg = env.write_config("bad.toml", "[rate_limits]\nlimit = 3\n");
    let o = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    assert_error("[rate_limits] limit = 3", &o, "SBX_E1301", 2);
    assert!(text(&o.stderr).contains("rate_limits"), "{o:?}");
    let cfg = env.write_config(
        "bad2.toml",
        "[[rate_limits.limit]]\naction = \"exec\"\nlimit = \"often\"\n",
    );
    let o = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    assert_no_panic("limit = often", &o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("error[SBX_E13"), "{o:?}");
}

#[test]
fn a_state_dir_that_cannot_be_created_is_an_error_with_a_code() {
    let env = Env::new("statedir", "process");
    let file = env.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let o = run(Command::new(BIN)
        .args(["run", "--tier", "process", "--state-dir"])
        .arg(file.join("state"))
        .arg("--policy")
        .arg(env.path().join("policy.toml"))
        .args(["--", "true"]));
    assert_error("state dir under a file", &o, "SBX_E1509", 2);
    let o = run(Command::new(BIN)
        .arg("status")
        .arg("--state-dir")
        .arg(file.join("state")));
    assert_error("status, state dir under a file", &o, "SBX_E1509", 2);
}

#[test]
fn relative_host_paths_resolve_against_the_working_directory() {
    let env = Env::new("relpaths", "process");
    std::fs::write(env.path().join("in.txt"), "from a relative stdin file\n").unwrap();
    std::fs::create_dir(env.path().join("indir")).unwrap();
    std::fs::write(env.path().join("indir/data.txt"), "input data\n").unwrap();
    let o = run(env
        .run_cmd(
            None,
            &[
                "--stdin-file",
                "in.txt",
                "--input",
                "indir",
                "--output",
                "out/",
            ],
            &[
                "sh",
                "-c",
                "cat; cat \"$SANDBOX_INPUT/data.txt\"; echo written > \"$SANDBOX_OUTPUT/r.txt\"",
            ],
        )
        .current_dir(env.path()));
    assert_no_panic("relative paths", &o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "from a relative stdin file\ninput data\n");
    let out = env.path().join("out");
    assert_eq!(
        std::fs::read_to_string(out.join("r.txt")).unwrap(),
        "written\n"
    );
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o700,
        "a created --output directory is private: {mode:o}"
    );
}

/// The README's own example, in the default (namespace) tier, where it was refused.
#[test]
fn relative_output_works_in_the_namespace_tier() {
    let env = Env::new("relns", "namespace");
    let probe = run(env.run_cmd(None, &[], &["true"]));
    if probe.status.code() != Some(0) {
        println!(
            "SKIP: the namespace tier does not run here: {}",
            text(&probe.stderr)
        );
        return;
    }
    let o = run(env
        .run_cmd(
            None,
            &["--output", "out/"],
            &["sh", "-c", "echo data > \"$SANDBOX_OUTPUT/r.txt\""],
        )
        .current_dir(env.path()));
    assert_no_panic("namespace --output out/", &o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(env.path().join("out/r.txt")).unwrap(),
        "data\n"
    );
}

/// Runs the same keyed request twice; returns both outputs.
fn twice(env: &Env, key: &str, extra: &[&str], argv: &[&str]) -> [std::process::Output; 2] {
    let mut args = vec!["--idempotency-key", key];
    args.extend_from_slice(extra);
    let a = run(env.run_cmd(None, &args, argv));
    let b = run(env.run_cmd(None, &args, argv));
    [a, b]
}

#[test]
fn a_replayed_timeout_exits_124_like_the_original() {
    let env = Env::new("replayto", "process");
    let [a, b] = twice(&env, "k-timeout", &["--timeout", "1s"], &["sleep", "30"]);
    assert_eq!(a.status.code(), Some(124), "{}", text(&a.stderr));
    assert_no_panic("replay", &b);
    assert_eq!(b.status.code(), Some(124), "replay: {}", text(&b.stderr));
    assert!(text(&b.stderr).contains("replayed"), "{}", text(&b.stderr));
}

#[test]
fn a_replayed_error_exits_with_the_errors_status_and_code() {
    let env = Env::new("replayerr", "process");
    let [a, b] = twice(&env, "k-error", &[], &["/nonexistent/program"]);
    assert_eq!(a.status.code(), Some(125), "{}", text(&a.stderr));
    let code = text(&a.stderr)
        .split("sandboxio[")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no code on the original: {}", text(&a.stderr)));
    assert!(code.starts_with("SBX_E"), "{code}");
    assert_eq!(b.status.code(), Some(125), "replay: {}", text(&b.stderr));
    assert!(
        text(&b.stderr).contains(&format!("sandboxio[{code}]")),
        "the replay carries the original's code {code}: {}",
        text(&b.stderr)
    );
    // --json says it is a replay, and of what.
    let j = run(env.run_cmd(
        None,
        &["--idempotency-key", "k-error", "--json"],
        &["/nonexistent/program"],
    ));
    assert_eq!(j.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["record"]["status"], "replayed");
    assert_eq!(v["record"]["replayed_status"], "error");
    assert_eq!(v["record"]["error_code"], code.as_str());
}

#[test]
fn a_replayed_exit_status_is_the_programs_own() {
    let env = Env::new("replayexit", "process");
    let [a, b] = twice(&env, "k-exit", &[], &["sh", "-c", "echo once; exit 3"]);
    assert_eq!(a.status.code(), Some(3));
    assert_eq!(b.status.code(), Some(3), "{}", text(&b.stderr));
    assert_eq!(text(&b.stdout), "once\n");
}
