//! While a run waits for a person, it says so: the approval id and the exact command that
//! approves it, on stderr. The wait comes from `--approval-timeout` or `[approvals] timeout`.

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use crate::common::*;
use crate::util::*;

#[test]
fn the_printed_approve_command_approves_the_waiting_run() {
    let env = Env::new("ask-wait", "process");
    ask_policy(&env);
    let mut child = env
        .run_cmd(
            None,
            &["--approval-timeout", "60s"],
            &["sh", "-c", "echo approved-and-ran"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let approve = loop {
        let Some(line) = lines.next() else {
            let _ = child.kill();
            panic!("stderr ended without an approve command: {seen:?}");
        };
        let line = line.unwrap();
        seen.push(line.clone());
        if let Some(cmd) = line.strip_prefix("sandboxio: approve with: ") {
            break cmd.to_string();
        }
    };
    assert!(
        seen.iter().any(|l| l.contains("waiting for approval apr_")),
        "{seen:?}"
    );
    // Run exactly what was printed (no quoting needed: the temp path is plain).
    let words: Vec<&str> = approve.split_whitespace().collect();
    assert_eq!(words[0], "sandboxio", "{approve}");
    assert_eq!(&words[1..3], ["approvals", "approve"], "{approve}");
    let st = run(std::process::Command::new(BIN)
        .args(&words[1..])
        .env_remove("SBX_STATE_DIR"));
    assert_eq!(st.status.code(), Some(0), "{approve}: {st:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{rest:?}");
    assert_eq!(text(&out.stdout), "approved-and-ran\n");
}

#[test]
fn with_json_the_pending_approval_is_one_json_line_on_stderr() {
    let env = Env::new("ask-json", "process");
    ask_policy(&env);
    let o = run(env.run_cmd(None, &["--json", "--approval-timeout", "1s"], &["true"]));
    assert_eq!(o.status.code(), Some(120), "{}", text(&o.stderr));
    let pending: serde_json::Value = text(&o.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("approval_pending").is_some())
        .unwrap_or_else(|| panic!("no approval_pending line: {}", text(&o.stderr)));
    let id = pending["approval_pending"]["id"].as_str().unwrap();
    assert!(id.starts_with("apr_"), "{pending}");
    // The command names the configuration the run read (it may name a shared store)
    // and the state directory, so it reaches the same state from any directory.
    let approve = pending["approval_pending"]["approve"].as_str().unwrap();
    assert!(
        approve.starts_with(&format!("sandboxio approvals approve {id} --config /")),
        "{pending}"
    );
    assert!(approve.contains(" --state-dir "), "{pending}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["record"]["approval_id"], id);
    assert_eq!(v["record"]["error_code"], "SBX_E1555");
}

#[test]
fn the_approvals_timeout_key_sets_the_wait() {
    let env = Env::new("ask-timeout", "process");
    ask_policy(&env);
    let cfg = env.write_config("short.toml", "[approvals]\ntimeout = \"1s\"\n");
    let o = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    assert_no_panic("approval timeout", &o);
    assert_eq!(o.status.code(), Some(120), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("waiting for approval apr_"), "{err}");
    assert!(
        err.contains("sandboxio[SBX_E1555]: denied at approval: ") && err.contains("(1s)"),
        "{err}"
    );
    assert!(
        !err.contains(ALLOW_REASON) && !err.contains("rules:"),
        "{err}"
    );
    // A bad value names the key and line; a bad flag has its own code.
    let bad = env.write_config("bad.toml", "[approvals]\ntimeout = \"0s\"\n");
    let o = run(env.run_cmd(Some(&bad), &[], &["true"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("error[SBX_E1103]"), "{o:?}");
    let o = run(env.run_cmd(None, &["--approval-timeout", "3d"], &["true"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("error[SBX_E1710]"), "{o:?}");
}

/// Reads the waiting run's stderr up to the command that approves it; returns its words.
fn approve_command(child: &mut std::process::Child) -> Vec<String> {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let Some(line) = lines.next() else {
            let _ = child.kill();
            panic!("stderr ended without an approve command: {seen:?}");
        };
        let line = line.unwrap();
        if let Some(cmd) = line.strip_prefix("sandboxio: approve with: ") {
            // The rest of stderr is read by whoever waits for the child.
            std::thread::spawn(move || lines.for_each(drop));
            return cmd.split_whitespace().map(str::to_string).collect();
        }
        seen.push(line);
    }
}

fn approve(words: &[String]) {
    let st = run(std::process::Command::new(BIN)
        .args(&words[1..])
        .env_remove("SBX_STATE_DIR"));
    assert_eq!(st.status.code(), Some(0), "{words:?}: {st:?}");
}

/// The approval covers what the input directory holds, not only its name: a file changed
/// while the run waited is refused after the approval (`SBX_E1558`), and never read.
#[test]
fn what_the_input_directory_held_when_asked_is_what_runs() {
    let env = Env::new("ask-input", "process");
    ask_policy(&env);
    let input = env.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("payload"), "SAFE\n").unwrap();
    let start = || {
        env.run_cmd(
            None,
            &[
                "--approval-timeout",
                "60s",
                "--input",
                input.to_str().unwrap(),
            ],
            &["sh", "-c", "cat \"$SANDBOX_INPUT/payload\""],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    // Unchanged: approved, and it runs.
    let mut child = start();
    approve(&approve_command(&mut child));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "SAFE\n");
    // Changed after the ask: the approval holds for nothing that would run now.
    let mut child = start();
    let words = approve_command(&mut child);
    std::fs::write(input.join("payload"), "EVIL\n").unwrap();
    approve(&words);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(120), "{out:?}");
    assert!(!text(&out.stdout).contains("EVIL"), "{out:?}");
    let trail = std::fs::read_to_string(env.state().join("audit.jsonl")).unwrap();
    assert!(trail.contains("SBX_E1558"), "no refusal recorded");
}

/// A pipe on stdin is read whole when a person must approve the run: the approver sees its
/// digest, the approval binds those bytes, and the program gets exactly them.
#[test]
fn a_piped_stdin_is_read_whole_when_a_person_must_approve() {
    use sha2::Digest as _;
    let env = Env::new("ask-stdin", "process");
    ask_policy(&env);
    let script = "echo from-the-pipe\n";
    let mut child = env
        .run_cmd(None, &["--approval-timeout", "60s"], &["sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut w = child.stdin.take().unwrap();
        w.write_all(script.as_bytes()).unwrap();
    }
    let words = approve_command(&mut child);
    let listed = run(env.cmd("approvals", None).args(["list", "--json"]));
    let pending: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let op: serde_json::Value =
        serde_json::from_str(pending[0]["operation"].as_str().unwrap()).unwrap();
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(script)));
    assert_eq!(op["exec"]["stdin"], digest.as_str(), "{op}");
    assert!(op["exec"].get("stdin_stream").is_none(), "{op}");
    approve(&words);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "from-the-pipe\n");
}

/// An approved run reads a copy of its input taken after the approval: a write to the
/// original once the program has started (the moment a racing writer would pick) changes
/// nothing it reads.
#[test]
fn an_approved_run_reads_the_input_as_approved_whatever_is_written_after() {
    let env = Env::new("ask-snapshot", "process");
    ask_policy(&env);
    let input = env.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("payload"), "SAFE\n").unwrap();
    let gate = env.path().join("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&gate)
        .status()
        .unwrap();
    assert!(made.success());
    // The process tier sees the host's files: the program waits on the fifo before reading.
    let script = format!(
        "echo started; read go < {}; cat \"$SANDBOX_INPUT/payload\"",
        gate.display()
    );
    let mut child = env
        .run_cmd(
            None,
            &[
                "--approval-timeout",
                "60s",
                "--input",
                input.to_str().unwrap(),
            ],
            &["sh", "-c", &script],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    approve(&approve_command(&mut child));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    std::fs::write(input.join("payload"), "EVIL\n").unwrap();
    std::fs::write(&gate, "go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let pid = child.id();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert_eq!(
        rest, "SAFE\n",
        "the program read the original after the approval"
    );
    // The copy went with the run.
    let mine = format!("sandboxio-{pid}.");
    for root in ["/dev/shm", "/tmp"] {
        let left: Vec<String> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&mine) && n.contains("-input-"))
            .collect();
        assert!(left.is_empty(), "left in {root}: {left:?}");
    }
}
