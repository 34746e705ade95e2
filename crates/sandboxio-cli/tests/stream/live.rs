//! Live output and stdin: the caller sees a line as soon as the program writes it, stdout
//! and stderr keep their order, and stdin streams in while the program runs. The handshake
//! tests cannot finish unless streaming works: the program waits for input that the test
//! sends only after it has read the program's previous line.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::Stdio;

use crate::common::World;

#[test]
fn first_line_arrives_before_the_program_exits() {
    let w = World::new("first");
    let mut child = w
        .run(&[], &["sh", "-c", "echo first; sleep 2; echo second"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "first\n");
    // The program is still sleeping: its first line reached us before it exited.
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited before its first line arrived"
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn stdin_streams_in_while_output_streams_out() {
    let w = World::new("handshake");
    let mut child = w
        .run(
            &["--timeout", "20s"],
            &[
                "sh",
                "-c",
                "echo ready; read a; echo got-$a; read b; echo got-$b",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for (expect, send) in [("ready\n", "one\n"), ("got-one\n", "two\n")] {
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, expect);
        stdin.write_all(send.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "got-two\n");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn stdout_and_stderr_keep_their_interleaving() {
    let w = World::new("interleave");
    // Both of our streams into one pipe, as `2>&1` would.
    let (r, wr) = std::io::pipe().unwrap();
    let mut child = w
        .run(
            &["--timeout", "20s"],
            &[
                "sh",
                "-c",
                "echo out1; read x; echo err1 >&2; read x; echo out2; read x; echo err2 >&2",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(wr.try_clone().unwrap())
        .stderr(wr)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut merged = BufReader::new(r);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let mut line = String::new();
        merged.read_line(&mut line).unwrap();
        seen.push(line.trim_end().to_string());
        let _ = stdin.write_all(b"\n");
        let _ = stdin.flush();
    }
    assert_eq!(seen, ["out1", "err1", "out2", "err2"]);
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn piped_stdin_reaches_the_program() {
    for tier in ["namespace", "process"] {
        let w = World::new("stdin");
        let mut child = w
            .run(&["--tier", tier], &["cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"hi\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{tier}");
        assert_eq!(out.stdout, b"hi\n", "{tier}");
    }
}
