//! Standard output and standard error for every command.
//!
//! `println!` panics when the reader has gone away (`sandboxio ... | head -c1`: EPIPE).
//! Here a closed pipe ends that stream quietly: the rest of the output is dropped, the
//! command finishes its work and exits with the status it would have had. Any other write
//! error on standard output is an error with a code; standard error has nowhere to report
//! its own failure, so it drops the text.
//!
//! Every line printed with [`outln!`] or [`errln!`] is text for people and goes through
//! [`escape::text`](crate::output::escape::text): a control character in it (from a
//! rationale, a reason, argv, a tenant, a file name) is shown escaped, never obeyed, on a
//! terminal or not. JSON is rendered by [`compact`] and [`pretty`], which leave no control
//! character raw either, so a JSON line passes unchanged. Only the program's own output is
//! written as bytes ([`stdout_bytes`], [`stderr_bytes`]; see `crate::output`).

use std::fmt;
use std::io::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::CliError;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
static JSON: AtomicBool = AtomicBool::new(false);

/// The command line asked for `--json` (before any `--`): errors are answered as JSON too.
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Prints a line on standard output: `outln!("{x}")?`.
macro_rules! outln {
    () => { $crate::out::stdout_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::stdout_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints a line on standard error; never fails.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::stderr_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, outln};

/// `v` as pretty JSON (an error with a code if it cannot be rendered).
pub fn pretty<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, CliError> {
    Ok(json_safe(serde_json::to_string_pretty(v)?))
}

/// `v` as one line of JSON.
pub fn compact<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, CliError> {
    Ok(json_safe(serde_json::to_string(v)?))
}

/// JSON with DEL and the C1 controls (U+007F..U+009F, which serde leaves raw) written as
/// `\u` escapes: the same JSON value, and nothing in it a terminal obeys. Those characters
/// can only be inside strings, where the escape means the same character.
pub fn json_safe(json: String) -> String {
    if !json.chars().any(control_not_layout) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if control_not_layout(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters other than the newline pretty JSON puts between lines.
fn control_not_layout(c: char) -> bool {
    c.is_control() && c != '\n'
}

/// Whether the reader of standard output went away.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Writes formatted text for people to standard output, control characters escaped.
pub fn stdout_fmt(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    let text = fmt::format(args);
    let text = crate::output::escape::text(&text);
    write_to(&mut io::stdout().lock(), &STDOUT_CLOSED, |w| {
        w.write_all(text.as_bytes())
    })
}

/// Writes bytes to standard output, unchanged.
pub fn stdout_bytes(bytes: &[u8]) -> Result<(), CliError> {
    write_to(&mut io::stdout().lock(), &STDOUT_CLOSED, |w| {
        w.write_all(bytes)
    })
}

/// Writes formatted text for people to standard error, control characters escaped.
pub fn stderr_fmt(args: fmt::Arguments<'_>) {
    let text = fmt::format(args);
    let text = crate::output::escape::text(&text);
    let _ = write_to(&mut io::stderr().lock(), &STDERR_CLOSED, |w| {
        w.write_all(text.as_bytes())
    });
}

/// Writes bytes to standard error, unchanged.
pub fn stderr_bytes(bytes: &[u8]) {
    let _ = write_to(&mut io::stderr().lock(), &STDERR_CLOSED, |w| {
        w.write_all(bytes)
    });
}

fn write_to<W: io::Write>(
    w: &mut W,
    closed: &AtomicBool,
    f: impl FnOnce(&mut W) -> io::Result<()>,
) -> Result<(), CliError> {
    if closed.load(Ordering::Relaxed) {
        return Ok(());
    }
    match f(w).and_then(|()| w.flush()) {
        Ok(()) => Ok(()),
        Err(e) => quiet_if_closed(e, closed),
    }
}

fn quiet_if_closed(e: io::Error, closed: &AtomicBool) -> Result<(), CliError> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        closed.store(true, Ordering::Relaxed);
        return Ok(());
    }
    Err(CliError::Stdout { source: e })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    struct Broken(io::ErrorKind);
    impl io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_broken_pipe_closes_the_stream_quietly() {
        let closed = AtomicBool::new(false);
        let mut w = Broken(io::ErrorKind::BrokenPipe);
        assert!(write_to(&mut w, &closed, |w| w.write_all(b"x")).is_ok());
        assert!(closed.load(Ordering::Relaxed));
        // Later writes are dropped without touching the writer again.
        assert!(write_to(&mut w, &closed, |_| panic!("must not write")).is_ok());
    }

    #[test]
    fn json_keeps_its_value_and_holds_no_raw_control_character() {
        let hostile = "a\x1b]0;x\x07\u{7f}\u{9b}2J\nb";
        for line in [compact(&hostile).unwrap(), pretty(&[hostile]).unwrap()] {
            assert!(
                !line.contains(['\x1b', '\x07', '\u{7f}', '\u{9b}']),
                "{line:?}"
            );
            let back: serde_json::Value = serde_json::from_str(&line).unwrap();
            let s = back.as_str().or_else(|| back[0].as_str()).unwrap();
            assert_eq!(s, hostile);
        }
    }

    #[test]
    fn other_write_errors_are_reported_with_a_code() {
        let closed = AtomicBool::new(false);
        let mut w = Broken(io::ErrorKind::StorageFull);
        let e = write_to(&mut w, &closed, |w| w.write_all(b"x")).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1708");
        assert!(!closed.load(Ordering::Relaxed));
    }
}
