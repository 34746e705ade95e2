//! An idempotency key binds the whole request, standard input included, also when it comes
//! through a pipe (the common `producer | sandboxio run --idempotency-key K ...`): the same
//! key with other bytes on the pipe is refused (`SBX_E1505`), never answered with the first
//! run's output. A pipe used to be streamed and its bytes never bound.

use std::io::Write as _;
use std::process::{Output, Stdio};

use crate::common::*;

fn piped(env: &Env, key: &str, input: &[u8]) -> Output {
    let mut c = env.run_cmd(None, &["--idempotency-key", key], &["cat"]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut w = child.stdin.take().unwrap();
    w.write_all(input).unwrap();
    drop(w);
    child.wait_with_output().unwrap()
}

#[test]
fn a_keyed_run_binds_the_bytes_of_a_piped_stdin() {
    let env = Env::new("boundstdin", "process");
    let first = piped(&env, "k1", b"foo\n");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert_eq!(first.stdout, b"foo\n");
    // The same bytes: the recorded outcome, not a second run.
    let again = piped(&env, "k1", b"foo\n");
    assert_eq!(again.stdout, b"foo\n", "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("replayed"),
        "{again:?}"
    );
    // Other bytes, even of the same length, binary included: refused.
    for other in [&b"bar\n"[..], b"\x00\xff\x01\n"] {
        let o = piped(&env, "k1", other);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("SBX_E1505"), "{other:?}: {err}");
        assert!(o.stdout.is_empty(), "{other:?}: {:?}", o.stdout);
    }
}

/// The host variables a run inherits (`PATH`, `LANG`, `LC_ALL`, `TZ`) are facts of the
/// request too: the same key with another `TZ` or `PATH` is refused (`PATH` decides which
/// program runs). Only their names used to be bound, and a replay answered another value.
#[test]
fn a_keyed_run_binds_the_values_of_the_variables_it_inherits() {
    let env = Env::new("boundenv", "process");
    let run = |tz: &str, path: &str| {
        env.run_cmd(
            None,
            &["--idempotency-key", "k-env"],
            &["sh", "-c", "echo $TZ"],
        )
        .env("TZ", tz)
        .env("PATH", path)
        .output()
        .unwrap()
    };
    let first = run("UTC", "/usr/bin:/bin");
    assert_eq!(first.stdout, b"UTC\n", "{first:?}");
    let same = run("UTC", "/usr/bin:/bin");
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert_eq!(same.stdout, b"UTC\n");
    for (tz, path) in [
        ("Asia/Tokyo", "/usr/bin:/bin"),
        ("UTC", "/tmp:/usr/bin:/bin"),
    ] {
        let o = run(tz, path);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("SBX_E1505"), "TZ={tz} PATH={path}: {err}");
        assert!(o.stdout.is_empty(), "{o:?}");
    }
}
