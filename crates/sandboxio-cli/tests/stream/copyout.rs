//! Output files: a copy-out that fails (a cap, a full host disk) keeps the program's stdout,
//! stderr and record, with a stable code and no host path; file names with control bytes,
//! newlines and invalid UTF-8 arrive exactly and are shown escaped.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use crate::common::{root, World, BIN};

/// Names a program can give its files that must neither break a record nor drive a
/// terminal, as Python bytes literals and as the bytes they are.
const NAMES: [(&str, &[u8]); 3] = [
    (r"b'line\nbreak'", b"line\nbreak"),
    (r"b'osc\x1b]52;c;aGk=\x07'", b"osc\x1b]52;c;aGk=\x07"),
    (r"b'bad\xff\xfe'", b"bad\xff\xfe"),
];

fn python_writing(files: &str) -> String {
    format!(
        "import os\nfor n in [{files}]:\n    open(b'/output/' + n, 'wb').write(b'x')\n\
         print('hello')\nimport sys; print('oops', file=sys.stderr)\n"
    )
}

#[test]
fn file_names_with_control_bytes_and_invalid_utf8_arrive_exactly() {
    let w = World::new("names");
    let out = w.path().join("out");
    let list: Vec<&str> = NAMES.iter().map(|(py, _)| *py).collect();
    let script = python_writing(&list.join(", "));
    let o = w
        .run(
            &["--output", out.to_str().unwrap()],
            &["python3", "-c", &script],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"hello\n");
    let mut got: Vec<Vec<u8>> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    got.sort();
    let mut want: Vec<Vec<u8>> = NAMES.iter().map(|(_, b)| b.to_vec()).collect();
    want.sort();
    assert_eq!(got, want);
    for (_, name) in NAMES {
        assert_eq!(
            std::fs::read(out.join(OsStr::from_bytes(name))).unwrap(),
            b"x"
        );
    }
}

/// The checks every failed copy-out must pass: output and record kept, the code, the entry
/// named as inside and escaped, no host path, nothing partial left on the host.
fn assert_copy_out_failed(w: &World, o: &std::process::Output, code: &str, out: &[u8]) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{stderr}");
    assert_eq!(o.stdout, b"hello\n", "stdout lost: {stderr}");
    assert!(stderr.contains("oops"), "stderr lost: {stderr}");
    assert!(stderr.contains(&format!("[{code}]")), "{stderr}");
    assert!(stderr.contains("`/output/"), "{stderr}");
    assert!(
        !stderr.contains("sandboxio-ns-"),
        "a host staging path: {stderr}"
    );
    assert!(
        !o.stderr.contains(&0x1b) && !o.stderr.contains(&0xff),
        "raw control or invalid bytes reached stderr: {stderr}"
    );
    assert!(
        std::fs::read_dir(std::path::Path::new(OsStr::from_bytes(out)))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "a partial copy was left on the host"
    );
    // The trail holds one record of this run, with the code, in one JSON line.
    let trail = std::fs::read_dir(w.state())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    let rec = trail
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        // A trail line wraps the event (`{"event": {...}, ...}`).
        .map(|v| {
            if v["event"].is_object() {
                v["event"].clone()
            } else {
                v
            }
        })
        .find(|v| v["event"] == "exec" && v["status"] == "error")
        .unwrap_or_else(|| panic!("no error record in {trail}"));
    assert_eq!(rec["error_code"], code);
    assert_eq!(rec["exit_code"], 0);
}

#[test]
fn a_copy_out_over_the_output_cap_keeps_the_output_and_the_record() {
    let w = World::new("cap");
    // The landlock tier stages output on the host work root (no tmpfs), so only the
    // copy-out cap bounds it: 3 x 40 KiB against `output_size = 64KiB` is refused whole.
    std::fs::write(
        w.path().join("config.toml"),
        "[sandbox]\nallow_landlock_fallback = true\n[limits]\noutput_size = \"64KiB\"\n",
    )
    .unwrap();
    let policy = std::fs::read_to_string(w.path().join("policy.toml")).unwrap();
    std::fs::write(
        w.path().join("policy.toml"),
        policy.replace(
            r#"tier = ["namespace", "process"]"#,
            r#"tier = ["namespace", "process", "landlock"]"#,
        ),
    )
    .unwrap();
    let out = w.path().join("out");
    let script = "import os, sys\nd = os.environb[b'SANDBOX_OUTPUT']\n\
                  for n in [b'a', b'osc\\x1b]0;t\\x07\\xff', b'c']:\n    \
                  open(d + b'/' + n, 'wb').write(b'x' * 40960)\n\
                  print('hello')\nprint('oops', file=sys.stderr)\n";
    let args = ["--tier", "landlock", "--output", out.to_str().unwrap()];
    let o = w.run(&args, &["python3", "-c", script]).output().unwrap();
    if String::from_utf8_lossy(&o.stderr).contains("SBX_E1469") {
        eprintln!("SKIP: the landlock tier is unavailable here (SBX_E1469)");
        return;
    }
    assert_copy_out_failed(&w, &o, "SBX_E1470", out.as_os_str().as_bytes());

    let json = w
        .run(
            &[&["--json"], &args[..]].concat(),
            &["python3", "-c", script],
        )
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["stdout"], "hello\n");
    assert_eq!(v["stderr"], "oops\n");
    assert_eq!(v["exit"], serde_json::json!({"code": 0}), "{v}");
    assert_eq!(v["copy_out_error"]["code"], "SBX_E1470");
    assert_eq!(v["record"]["error_code"], "SBX_E1470");
    assert_eq!(v["record"]["status"], "error");
}

#[test]
fn a_full_host_disk_during_copy_out_keeps_the_output_and_the_record() {
    if !root() {
        eprintln!("SKIP: mounting a tiny tmpfs for the output needs root");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("SKIP: no unshare(1) to make a private mount namespace");
        return;
    }
    let w = World::new("full");
    let out = w.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // 1 MiB inside the sandbox, into a 64 KiB tmpfs on the host: ENOSPC while copying.
    // The failing file's name carries an escape sequence and a byte that is not UTF-8.
    let script =
        python_writing(r"b'\x1b[2J\nbig\xff'").replace("write(b'x')", "write(b'x' * (1 << 20))");
    let inner = "mount -t tmpfs -o size=64k tmpfs \"$1\" && exec \"$0\" run --state-dir \"$2\" \
         --policy \"$3\" --config \"$4\" --output \"$1\" -- python3 -c \"$5\"";
    let o = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            inner,
            BIN,
        ])
        .arg(&out)
        .arg(w.state())
        .arg(w.path().join("policy.toml"))
        .arg(w.path().join("config.toml"))
        .arg(&script)
        .env_remove("SBX_STATE_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_copy_out_failed(&w, &o, "SBX_E1459", out.as_os_str().as_bytes());
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains(r"\x1b[2J\x0abig\xff"), "{stderr}");
}
