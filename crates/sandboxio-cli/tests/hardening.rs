//! The CLI against hostile input, through the real `sandboxio` binary: text agents chose
//! (a rationale, argv, a tenant) printed for people without raw control characters.
//!
//! Every child runs under a watchdog: a command that hangs fails its test (it is killed by
//! its pid) instead of hanging the suite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "reliability/common.rs"]
mod common;
#[path = "hardening/terminal.rs"]
mod terminal;
#[path = "hardening/watchdog.rs"]
mod watchdog;
