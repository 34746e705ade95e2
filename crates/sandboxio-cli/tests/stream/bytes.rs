//! Bytes end to end: what the program writes is what comes out, through the human output
//! (raw to a pipe) and through `--json` (UTF-8 text, or base64 with a flag), and the counts
//! agree.

use std::io::Write as _;
use std::process::{Command, Stdio};

use base64::Engine as _;

use crate::common::{random_bytes, World};

fn json_bytes(v: &serde_json::Value, field: &str) -> Vec<u8> {
    let text = v[field].as_str().unwrap();
    match v.get(format!("{field}_encoding")).and_then(|e| e.as_str()) {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap(),
        None | Some("utf8") => text.as_bytes().to_vec(),
        Some(other) => panic!("unknown encoding {other}"),
    }
}

#[test]
fn gzip_output_is_byte_exact_through_a_pipe_and_json() {
    let w = World::new("gzip");
    // The same gzip (no name, no time) on the host is the reference.
    let mut host = Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    host.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let want = host.wait_with_output().unwrap().stdout;
    assert!(
        std::str::from_utf8(&want).is_err(),
        "gzip output should not be UTF-8"
    );

    let argv = ["sh", "-c", "echo hello | gzip -c -n"];
    let human = w.run(&[], &argv).output().unwrap();
    assert!(
        human.status.success(),
        "{}",
        String::from_utf8_lossy(&human.stderr)
    );
    assert_eq!(human.stdout, want);

    let json = w.run(&["--json"], &argv).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["stdout_encoding"], "base64");
    assert_eq!(json_bytes(&v, "stdout"), want);
    assert_eq!(v["stdout_bytes"].as_u64().unwrap(), want.len() as u64);
}

#[test]
fn random_bytes_nul_and_invalid_utf8_round_trip_exactly() {
    let w = World::new("random");
    let data = random_bytes(200_000, 0x5eed);
    let file = w.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    let f = file.to_str().unwrap();

    // stdin from a file, echoed to stdout and (reversed order of streams) to stderr.
    let argv = ["sh", "-c", "cat > /tmp/d; cat /tmp/d; cat /tmp/d >&2"];
    let human = w.run(&["--stdin-file", f], &argv).output().unwrap();
    assert!(human.status.success());
    assert_eq!(human.stdout, data, "stdout differs");
    assert_eq!(human.stderr, data, "stderr differs");

    let json = w
        .run(&["--json", "--stdin-file", f], &argv)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json_bytes(&v, "stdout"), data);
    assert_eq!(json_bytes(&v, "stderr"), data);
    assert_eq!(v["stdout_bytes"].as_u64().unwrap(), data.len() as u64);
    assert_eq!(v["stderr_bytes"].as_u64().unwrap(), data.len() as u64);
    assert_eq!(v["stdout_truncated"], false);
}

#[test]
fn utf8_output_stays_text_in_json() {
    let w = World::new("utf8");
    let json = w
        .run(&["--json"], &["printf", "h\u{e9}llo\\n"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["stdout"], "h\u{e9}llo\n");
    assert!(v.get("stdout_encoding").is_none(), "{v}");
}

#[test]
fn output_over_the_cap_is_cut_at_the_cap_and_counted() {
    let w = World::new("cap");
    std::fs::write(
        w.path().join("config.toml"),
        "[limits]\nstdout_cap = \"1KiB\"\n",
    )
    .unwrap();
    let argv = ["sh", "-c", "head -c 5000 /dev/zero"];
    let out = w.run(&["--json"], &argv).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json_bytes(&v, "stdout"), vec![0u8; 1024]);
    assert_eq!(v["stdout_bytes"], 5000);
    assert_eq!(v["stdout_truncated"], true);
    // Live output stops at the cap too.
    let human = w.run(&[], &argv).output().unwrap();
    assert_eq!(human.stdout, vec![0u8; 1024]);
}
