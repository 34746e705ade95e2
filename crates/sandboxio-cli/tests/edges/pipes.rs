//! Every command with a non-UTF-8 environment variable, and with its output read by a
//! reader that goes away (`| head -c1`, or a pipe closed before anything was written):
//! no panic, no error spew, and the same exit status as with a reader that reads it all.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;
use crate::util::*;

/// Builds a command line from the test dir and a run number (for paths that must differ).
type Args = Box<dyn Fn(&Path, usize) -> Vec<String>>;

/// One command line.
struct Case {
    name: &'static str,
    args: Args,
}

fn case(name: &'static str, f: impl Fn(&Path, usize) -> Vec<String> + 'static) -> Case {
    Case {
        name,
        args: Box::new(f),
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn with_state(dir: &Path, v: &[&str]) -> Vec<String> {
    let mut a = s(v);
    a.extend(s(&[
        "--state-dir",
        &dir.join("state").display().to_string(),
        "--policy",
        &dir.join("policy.toml").display().to_string(),
        "--config",
        &dir.join("config.toml").display().to_string(),
    ]));
    a
}

fn cases() -> Vec<Case> {
    // Output larger than a pipe buffer, so a closed reader is always hit.
    let big = "yes sandboxio | head -c 300000";
    vec![
        case("run", move |d, _| {
            let mut a = with_state(d, &["run", "--tier", "process"]);
            a.extend(s(&["--", "sh", "-c", big]));
            a
        }),
        case("run --json", move |d, _| {
            let mut a = with_state(d, &["run", "--json", "--tier", "process"]);
            a.extend(s(&["--", "sh", "-c", big]));
            a
        }),
        case("run-code", |d, _| {
            let mut a = with_state(d, &["run-code", "--tier", "process", "--lang", "bash"]);
            a.push(d.join("big.sh").display().to_string());
            a
        }),
        case("init", |d, i| {
            s(&[
                "init",
                &d.join(format!("init-{i}.toml")).display().to_string(),
            ])
        }),
        case("doctor", |_, _| s(&["doctor"])),
        case("doctor --json", |_, _| s(&["doctor", "--json"])),
        case("policy check", |d, _| {
            s(&[
                "policy",
                "check",
                &d.join("policy.toml").display().to_string(),
            ])
        }),
        case("policy explain", |d, _| {
            s(&[
                "policy",
                "explain",
                "--op",
                r#"{"args":{"kind":"exec","argv":["ls"]}}"#,
                &d.join("policy.toml").display().to_string(),
            ])
        }),
        case("policy replay", |d, _| {
            s(&[
                "policy",
                "replay",
                "--audit",
                &d.join("state/audit.jsonl").display().to_string(),
                &d.join("policy.toml").display().to_string(),
            ])
        }),
        case("audit verify", |d, _| {
            s(&[
                "audit",
                "verify",
                &d.join("state/audit.jsonl").display().to_string(),
            ])
        }),
        case("audit tail", |d, _| {
            with_state(d, &["audit", "tail", "-n", "100"])
        }),
        case("audit query", |d, _| {
            with_state(d, &["audit", "query", "--json"])
        }),
        case("approvals list", |d, _| {
            with_state(d, &["approvals", "list", "--all"])
        }),
        case("approvals approve (unknown id)", |d, _| {
            with_state(d, &["approvals", "approve", "apr_0000000000000000"])
        }),
        case("approvals deny (unknown id)", |d, _| {
            with_state(d, &["approvals", "deny", "apr_0000000000000000"])
        }),
        case("keys create", |d, _| {
            with_state(
                d,
                &["keys", "create", "--tenant", "edge", "--scopes", "read"],
            )
        }),
        case("keys list", |d, _| with_state(d, &["keys", "list"])),
        case("keys revoke (unknown id)", |d, _| {
            with_state(d, &["keys", "revoke", "key_0000000000000000"])
        }),
        case("state recover (nothing to recover)", |d, _| {
            with_state(d, &["state", "recover", "--from-trail"])
        }),
        case("audit rotate-key", |d, _| {
            with_state(d, &["audit", "rotate-key"])
        }),
        case("costs", |d, _| with_state(d, &["costs", "--json"])),
        case("budget", |d, _| with_state(d, &["budget"])),
        case("kill", |d, _| {
            with_state(d, &["kill", "--reason", "edge test"])
        }),
        case("status", |d, _| with_state(d, &["status"])),
        case("status --json", |d, _| with_state(d, &["status", "--json"])),
        case("run (denied by the kill switch)", |d, _| {
            with_state(d, &["run", "--tier", "process", "--", "true"])
        }),
        case("resume", |d, _| with_state(d, &["resume"])),
        case("--help", |_, _| s(&["--help"])),
        case("--version", |_, _| s(&["--version"])),
    ]
}

fn command(args: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("SBX_STATE_DIR")
        // `init` trusts what it writes: never in the host's own list.
        .env(
            "SBX_TRUSTED_CONFIGS",
            std::env::temp_dir().join("sbx-edges-trusted-configs"),
        )
        .stdin(Stdio::null());
    non_utf8_env(&mut c);
    c
}

/// Reads at most `n` bytes of stdout (none when 0), then closes it, like `head -c n`.
fn with_early_close(args: &[String], n: usize, close_stderr: bool) -> std::process::Output {
    let mut c = command(args);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    if n > 0 {
        let mut buf = vec![0u8; n];
        let _ = out.read(&mut buf);
    }
    drop(out);
    if close_stderr {
        drop(child.stderr.take());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn every_command_with_non_utf8_env_and_a_closed_pipe_exits_quietly() {
    let env = Env::new("pipes", "process");
    let d = env.path().to_path_buf();
    std::fs::write(d.join("big.sh"), "yes sandboxio | head -c 300000\n").unwrap();
    // A trail for the audit and replay commands.
    let first = run(env.run_cmd(None, &[], &["true"]));
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let mut checked = 0;
    for c in cases() {
        let args = |i: usize| (c.args)(&d, i);
        let full = run(&mut command(&args(0)));
        assert_no_panic(c.name, &full);
        let want = full.status.code();
        for (variant, i, n, close_err) in [
            ("stdout closed before any write", 1, 0, false),
            ("| head -c1", 2, 1, false),
            ("stdout and stderr closed", 3, 0, true),
        ] {
            let o = with_early_close(&args(i), n, close_err);
            let what = format!("`{}` with {variant}", c.name);
            assert_no_panic(&what, &o);
            assert_eq!(
                o.status.code(),
                want,
                "{what}: exit status differs from a full read ({want:?}): {}",
                text(&o.stderr)
            );
            let err = text(&o.stderr);
            assert!(
                !err.to_lowercase().contains("broken pipe") && !err.contains("os error 32"),
                "{what}: error spew about the closed pipe: {err}"
            );
        }
        checked += 1;
    }
    println!("{checked} commands checked with a non-UTF-8 environment and closed pipes");
}

#[test]
fn a_non_utf8_variable_is_skipped_and_counted_not_a_panic() {
    let env = Env::new("nonutf8", "process");
    let mut c = env.run_cmd(None, &[], &["sh", "-c", "echo ran"]);
    non_utf8_env(&mut c);
    let o = run(&mut c);
    assert_no_panic("run", &o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ran\n");
    // Counted: one warning with the number skipped (a name and a value here).
    let err = text(&o.stderr);
    assert!(
        err.contains("not UTF-8") && err.contains("\"skipped\":2"),
        "the skipped variables are counted in a warning: {err}"
    );
}

#[test]
fn audit_tail_follow_stops_when_its_reader_goes_away() {
    let env = Env::new("tailf", "process");
    let first = run(env.run_cmd(None, &[], &["true"]));
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let args = with_state(env.path(), &["audit", "tail", "-f", "-n", "1"]);
    let mut child = command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    out.read_exact(&mut one).unwrap();
    drop(out);
    // A new event makes `tail -f` write, find the reader gone, and stop.
    let again = run(env.run_cmd(None, &[], &["true"]));
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("`audit tail -f` kept running after its reader went away");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Descriptors the caller left open (a shell's, a harness's) never reach the program, in
/// the process tier as in the others.
#[test]
fn descriptors_the_caller_left_open_do_not_reach_the_program() {
    for tier in ["process", "namespace"] {
        let env = Env::new("inherited-fds", tier);
        let run = env.run_cmd(None, &[], &["sh", "-c", "ls /proc/self/fd"]);
        // A shell opens fds 7 and 9 (not close-on-exec) and then becomes the CLI.
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("exec 7</dev/null 9</dev/null; exec \"$@\"")
            .arg("sh")
            .arg(run.get_program())
            .args(run.get_args());
        for (k, v) in run.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{tier}: {}", text(&o.stderr));
        let fds: Vec<String> = text(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(
            !fds.iter().any(|f| f == "7" || f == "9"),
            "{tier}: the program holds {fds:?}"
        );
    }
}
