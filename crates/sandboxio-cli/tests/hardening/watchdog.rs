//! Running a child with a deadline, and reading what it said.

#![allow(dead_code)]

use std::io::Read as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any one command of these tests may take before it counts as hung.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `c` (stdin from /dev/null unless set) to completion; panics, after killing it by
/// its pid, if it is still running after `DEADLINE`.
pub fn run(what: &str, c: &mut Command) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > DEADLINE {
            let pid = child.id();
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: hung: still running after {DEADLINE:?} (killed pid {pid})");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `error[CODE]: ` on stderr, the status, no panic.
pub fn assert_error(what: &str, o: &Output, code: &str, status: i32) {
    let err = text(&o.stderr);
    assert!(!err.contains("panicked"), "{what}: panicked: {err}");
    assert!(
        err.contains(&format!("error[{code}]: ")),
        "{what}: expected {code} on stderr: {err}"
    );
    assert_eq!(o.status.code(), Some(status), "{what}: {err}");
}

/// No byte a terminal obeys: ESC, BEL, CR, the other C0 controls but newline and tab,
/// DEL, and the C1 controls (UTF-8 `C2 80`..`C2 9F`, and the raw 8-bit bytes).
pub fn assert_no_controls(what: &str, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let c0 = *b < 0x20 && *b != b'\n' && *b != b'\t';
        let c1 = *b == 0xC2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9F).contains(n));
        assert!(
            !(c0 || *b == 0x7f || c1),
            "{what}: a raw control byte {b:#04x} at {i}: {:?}",
            text(bytes)
        );
    }
}

/// A FIFO at `path` (`mkfifo`).
pub fn mkfifo(path: &std::path::Path) {
    let st = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}
