//! Files named on the command line: `/dev/zero` and a FIFO with no writer are refused
//! quickly with a code (a regular file is required, or the read is capped), never read
//! without end, never waited on.

use std::io::Write as _;
use std::process::Command;

use crate::common::*;
use crate::watchdog::*;

/// The limit of `--stdin-file`, a code file and standard input given whole.
const INPUT_LIMIT: u64 = 16 << 20;

#[test]
fn config_and_policy_must_be_regular_files() {
    let env = Env::new("files-cfg", "process");
    let fifo = env.path().join("fifo");
    mkfifo(&fifo);
    let zero = std::path::Path::new("/dev/zero");
    for (what, path, kind) in [
        ("fifo", fifo.as_path(), "FIFO"),
        ("zero", zero, "character device"),
    ] {
        // --config
        let o = run(what, &mut env.run_cmd(Some(path), &[], &["true"]));
        assert_error(&format!("--config {what}"), &o, "SBX_E1104", 2);
        assert!(text(&o.stderr).contains(kind), "{}", text(&o.stderr));
        // --policy
        let mut c = Command::new(BIN);
        c.args(["run", "--tier", "process", "--state-dir"])
            .arg(env.state())
            .arg("--policy")
            .arg(path)
            .args(["--", "true"])
            .env_remove("SBX_STATE_DIR");
        let o = run(what, &mut c);
        assert_error(&format!("--policy {what}"), &o, "SBX_E1217", 2);
        assert!(text(&o.stderr).contains(kind), "{}", text(&o.stderr));
        // policy check: its own report, on stdout
        let o = run(what, Command::new(BIN).args(["policy", "check"]).arg(path));
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let out = text(&o.stdout);
        assert!(
            out.contains("error[SBX_E1217]") && out.contains(kind),
            "{out}"
        );
        assert!(!out.contains("0 bytes"), "{out}");
    }
    assert!(!env.state().exists(), "a refused command created the state");
}

#[test]
fn a_policy_over_the_cap_names_the_limit_not_a_size() {
    let env = Env::new("files-bigpol", "process");
    let big = env.path().join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(2 << 20).unwrap();
    let o = run(
        "big policy",
        Command::new(BIN).args(["policy", "check"]).arg(&big),
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let out = text(&o.stdout);
    assert!(
        out.contains("error[SBX_E1215]") && out.contains("larger than the 1048576-byte limit"),
        "{out}"
    );
}

#[test]
fn a_code_file_must_be_a_regular_file_within_the_limit() {
    let env = Env::new("files-code", "process");
    let fifo = env.path().join("code.fifo");
    mkfifo(&fifo);
    let big = env.path().join("big.py");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(INPUT_LIMIT + 1)
        .unwrap();
    for (path, code, needle) in [
        (fifo.as_path(), "SBX_E1704", "FIFO"),
        (
            std::path::Path::new("/dev/zero"),
            "SBX_E1704",
            "character device",
        ),
        (big.as_path(), "SBX_E1715", "limit"),
    ] {
        let mut c = env.cmd("run-code", None);
        c.args(["--tier", "process", "--lang", "python"]).arg(path);
        let o = run("run-code", &mut c);
        assert_error(&format!("run-code {}", path.display()), &o, code, 2);
        assert!(text(&o.stderr).contains(needle), "{}", text(&o.stderr));
    }
    assert!(!env.state().exists(), "a refused command created the state");
}

#[test]
fn stdin_file_is_read_up_to_its_limit_from_a_file_a_device_or_a_fifo() {
    let env = Env::new("files-stdin", "process");
    // /dev/zero: refused one byte past the limit, not read for ever.
    let o = run(
        "stdin zero",
        &mut env.run_cmd(None, &["--stdin-file", "/dev/zero"], &["wc", "-c"]),
    );
    assert_error("--stdin-file /dev/zero", &o, "SBX_E1715", 2);
    // A FIFO whose writer gives a few bytes: the program gets them.
    let fifo = env.path().join("in.fifo");
    mkfifo(&fifo);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            f.write_all(b"hello from a fifo\n").unwrap();
        })
    };
    let mut c2 = env.cmd("run", None);
    c2.args(["--tier", "process", "--stdin-file"])
        .arg(&fifo)
        .args(["--", "cat"]);
    let o = run("stdin fifo", &mut c2);
    writer.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "hello from a fifo\n");
    // A FIFO whose writer gives more than the limit: refused, nothing ran.
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..(INPUT_LIMIT >> 20) + 2 {
                if f.write_all(&chunk).is_err() {
                    break; // the reader stopped at the limit
                }
            }
        })
    };
    let o = run("stdin big fifo", &mut c2);
    writer.join().unwrap();
    assert_error("--stdin-file big FIFO", &o, "SBX_E1715", 2);
}
