//! Standard output and standard error for every command.
//!
//! `println!` panics when the reader has gone away (`sandboxio ... | head -c1`: EPIPE).
//! Here a closed pipe ends that stream quietly: the rest of the output is dropped, the
//! command finishes its work and exits with the status it would have had. Any other write
//! error on standard output is an error with a code; standard error has nowhere to report
//! its own failure, so it drops the text.

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
    Ok(serde_json::to_string_pretty(v)?)
}

/// `v` as one line of JSON.
pub fn compact<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, CliError> {
    Ok(serde_json::to_string(v)?)
}

/// Whether the reader of standard output went away.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Writes formatted text to standard output.
pub fn stdout_fmt(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    write_to(&mut io::stdout().lock(), &STDOUT_CLOSED, |w| {
        w.write_fmt(args)
    })
}

/// Writes bytes to standard output, unchanged.
pub fn stdout_bytes(bytes: &[u8]) -> Result<(), CliError> {
    write_to(&mut io::stdout().lock(), &STDOUT_CLOSED, |w| {
        w.write_all(bytes)
    })
}

/// Writes formatted text to standard error.
pub fn stderr_fmt(args: fmt::Arguments<'_>) {
    let _ = write_to(&mut io::stderr().lock(), &STDERR_CLOSED, |w| {
        w.write_fmt(args)
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
    fn other_write_errors_are_reported_with_a_code() {
        let closed = AtomicBool::new(false);
        let mut w = Broken(io::ErrorKind::StorageFull);
        let e = write_to(&mut w, &closed, |w| w.write_all(b"x")).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1708");
        assert!(!closed.load(Ordering::Relaxed));
    }
}
