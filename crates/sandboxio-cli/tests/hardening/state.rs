//! The state directory: a FIFO in place of the audit key or the trail is refused with a
//! code (never waited on); a directory owned by another user is refused before anything
//! is created in it.

use std::os::unix::fs::MetadataExt as _;
use std::process::Command;

use crate::common::*;
use crate::watchdog::*;

#[test]
fn a_fifo_as_the_audit_key_is_refused_not_waited_on() {
    let env = Env::new("state-keyfifo", "process");
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let key = env.state().join("audit.key");
    std::fs::remove_file(&key).unwrap();
    mkfifo(&key);
    let o = run(
        "run with a FIFO key",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_error("FIFO audit.key", &o, "SBX_E1602", 125);
    assert!(text(&o.stderr).contains("FIFO"), "{}", text(&o.stderr));
    // Still a FIFO: nothing replaced it.
    assert!(std::fs::symlink_metadata(&key)
        .unwrap()
        .file_type()
        .is_fifo_like());
}

#[test]
fn a_fifo_as_the_trail_is_refused_by_runs_and_by_verify() {
    let env = Env::new("state-trailfifo", "process");
    let fifo = env.path().join("trail.fifo");
    mkfifo(&fifo);
    let o = run(
        "audit verify FIFO",
        Command::new(BIN).args(["audit", "verify"]).arg(&fifo),
    );
    assert!(
        text(&o.stdout).contains("FIFO") || text(&o.stderr).contains("FIFO"),
        "{o:?}"
    );
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    // The active trail of a state directory replaced by a FIFO.
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let trail = env.state().join("audit.jsonl");
    std::fs::remove_file(&trail).unwrap();
    mkfifo(&trail);
    let o = run(
        "run with a FIFO trail",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("error[SBX_E"),
        "{}",
        text(&o.stderr)
    );
    let mut c = Command::new(BIN);
    c.args(["audit", "verify", "--state-dir"])
        .arg(env.state())
        .arg(&trail)
        .env_remove("SBX_STATE_DIR");
    let o = run("audit verify FIFO trail", &mut c);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn root_refuses_a_state_directory_another_user_owns() {
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: not root (only root can be given another user's directory)");
        return;
    }
    let env = Env::new("state-owner", "process");
    let state = env.state();
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let o = run(
        "root run in uid 65534's dir",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_error("foreign state dir", &o, "SBX_E1530", 2);
    let err = text(&o.stderr);
    assert!(err.contains("owned by uid 65534"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&state).unwrap().collect();
    assert!(left.is_empty(), "root created files there: {left:?}");
    // Given back to root, the same directory works.
    std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
    let o = run(
        "root run in its own dir",
        &mut env.run_cmd(None, &[], &["true"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt as _;
        self.is_fifo()
    }
}

/// `--input` and `--output` reach the host like mounts and get the same checks: neither may
/// name the state directory (or a path inside it, or one containing it), by any spelling;
/// the output directory is refused before it is made. They used to pass unchecked: a
/// sandbox read `audit.key` and `state.db` through `--input`, and `--output` wrote into
/// the state directory.
#[test]
fn input_and_output_directories_cannot_reach_the_state() {
    let env = Env::new("state-io", "process");
    let o = run("first run", &mut env.run_cmd(None, &[], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let st = env.state();
    let link = env.path().join("state-link");
    std::os::unix::fs::symlink(&st, &link).unwrap();
    let s = |p: &std::path::Path| p.display().to_string();
    for (what, args) in [
        ("input = state", vec!["--input".to_string(), s(&st)]),
        (
            "input through a link",
            vec!["--input".to_string(), s(&link)],
        ),
        (
            "input = its parent",
            vec!["--input".to_string(), s(env.path())],
        ),
        (
            "output inside",
            vec!["--output".to_string(), s(&st.join("x"))],
        ),
        (
            "output through a link",
            vec!["--output".to_string(), s(&link.join("y"))],
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(
            what,
            &mut env.run_cmd(None, &args, &["cat", "/input/audit.key"]),
        );
        let err = text(&o.stderr);
        assert!(err.contains("SBX_E1520"), "{what}: {err}");
        assert_ne!(o.status.code(), Some(0), "{what}: {err}");
    }
    assert!(
        !st.join("x").exists() && !st.join("y").exists(),
        "nothing made in the state"
    );
}

/// The configuration decides how the next run is governed (tier, policy, state directory,
/// which host variables a sandbox gets), so no sandbox may write it: a writable mount that
/// holds the configuration in use is refused, and a `sandboxio.toml` a program leaves in
/// the working directory through a writable mount is set aside, never read by the next
/// command. A sandbox used to plant one that ran the next command on the host with no
/// sandbox (`tier = "process"`) and another state directory (no kill switch, no budget).
#[test]
fn no_sandbox_can_write_the_configuration_the_next_command_reads() {
    let env = Env::new("state-config", "process");
    let proj = env.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    if nix_is_root() {
        // The namespace tier's root is uid 65534 on the host: it must be able to write.
        std::os::unix::fs::chown(&proj, Some(65534), Some(65534)).unwrap();
    }
    let trusted = env.path().join("trusted-configs");
    let run_in = |extra: &[&str], script: &str| {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--state-dir")
            .arg(env.state())
            .args(["--tier", "namespace", "--mount"])
            .arg(format!("{}:/project:rw", proj.display()))
            .args(extra)
            .args(["--", "sh", "-c", script])
            .current_dir(&proj)
            .env("SBX_TRUSTED_CONFIGS", &trusted)
            .env_remove("SBX_STATE_DIR");
        run("run in the project", &mut c)
    };
    let plant = "printf '[sandbox]\\ntier = \"process\"\\n' > /project/sandboxio.toml";
    let o = run_in(&[], plant);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        !proj.join("sandboxio.toml").exists(),
        "the planted configuration is still where the next command reads it"
    );
    let aside: Vec<String> = std::fs::read_dir(&proj)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sandboxio.toml.planted-"))
        .collect();
    assert_eq!(aside.len(), 1, "set aside once: {aside:?}");
    assert!(
        text(&o.stderr).contains("appeared while the sandbox ran"),
        "{}",
        text(&o.stderr)
    );
    // A configuration in use (trusted) inside a writable mount: refused before anything
    // runs.
    let cfg = proj.join("sandboxio.toml");
    std::fs::write(&cfg, "[sandbox]\n").unwrap();
    let o = run(
        "trust",
        Command::new(BIN)
            .arg("trust")
            .current_dir(&proj)
            .env("SBX_TRUSTED_CONFIGS", &trusted),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run_in(&[], "echo ran > /project/ran");
    assert!(text(&o.stderr).contains("SBX_E1520"), "{}", text(&o.stderr));
    assert!(!proj.join("ran").exists(), "it ran");
    let cfg_arg = cfg.display().to_string();
    let o = run_in(&["--config", &cfg_arg], "echo ran > /project/ran");
    assert!(text(&o.stderr).contains("SBX_E1520"), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), "[sandbox]\n");
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A `sandboxio.toml` found in the working directory (not named with `--config`) is read
/// only when its exact content was trusted (`sandboxio init` writes and trusts one;
/// `sandboxio trust` trusts one after review): one a sandbox wrote through a writable mount,
/// anywhere a later command might run, is refused with `SBX_E1717` and changes nothing. A
/// planted file used to be read by the next command run in its directory (the tier, the
/// policy, the state directory all its own).
#[test]
fn a_configuration_found_in_the_working_directory_is_read_only_once_trusted() {
    let env = Env::new("state-trust", "process");
    let dir = env.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    let trusted = env.path().join("trusted-configs");
    let cli = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(&dir)
            .env("SBX_TRUSTED_CONFIGS", &trusted)
            .env("SBX_STATE_DIR", env.state());
        run("cli", &mut c)
    };
    // `init` writes and trusts.
    let o = cli(&["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = cli(&["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // Changed since (as a program would): refused, nothing run, until trusted again.
    let cfg = dir.join("sandboxio.toml");
    let mut planted = std::fs::read_to_string(&cfg).unwrap();
    planted.push_str("\n# changed\n");
    std::fs::write(&cfg, &planted).unwrap();
    let o = cli(&["run", "--", "true"]);
    assert_error("changed config", &o, "SBX_E1717", 2);
    let o = cli(&["trust"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = cli(&["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // A file never trusted (another path, same bytes): refused; named with --config: read.
    let other = env.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("sandboxio.toml"), &planted).unwrap();
    let mut c = Command::new(BIN);
    c.args(["run", "--", "true"])
        .current_dir(&other)
        .env("SBX_TRUSTED_CONFIGS", &trusted)
        .env("SBX_STATE_DIR", env.state());
    let o = run("untrusted elsewhere", &mut c);
    assert_error("untrusted config", &o, "SBX_E1717", 2);
    let mut c = Command::new(BIN);
    c.args(["run", "--config", "sandboxio.toml", "--", "true"])
        .current_dir(&other)
        .env("SBX_TRUSTED_CONFIGS", &trusted)
        .env("SBX_STATE_DIR", env.state());
    let o = run("named config", &mut c);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
