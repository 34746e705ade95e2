//! Helpers of the edge tests: running the binary and reading what it said.

#![allow(dead_code)] // each test module uses a subset

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::process::{Command, Output};

/// The text the allow rule of `common::policy_for` gives as its reason.
pub const ALLOW_REASON: &str = "tests run commands in the";

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Adds environment variables whose name or value is not UTF-8.
pub fn non_utf8_env(c: &mut Command) -> &mut Command {
    c.env(OsStr::from_bytes(b"SBX_EDGE_\xffNAME"), "v")
        .env("SBX_EDGE_VALUE", OsStr::from_bytes(b"\xfe\xff-not-utf8"))
}

/// Runs a command (owned or borrowed) to completion.
pub fn run(mut c: impl std::borrow::BorrowMut<Command>) -> Output {
    c.borrow_mut().output().unwrap()
}

/// No panic, no backtrace, and the process exited (was not killed by a signal).
pub fn assert_no_panic(what: &str, o: &Output) {
    let err = text(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{what}: panicked: {err}"
    );
    assert!(
        o.status.code().is_some(),
        "{what}: killed by a signal: {o:?}"
    );
    assert_ne!(
        o.status.code(),
        Some(101),
        "{what}: exit 101 (panic): {err}"
    );
}
