//! The CLI against hostile input, through the real `sandboxio` binary: text agents chose
//! (a rationale, argv, a tenant) printed for people without raw control characters; files
//! named on the command line that never end or never open (`/dev/zero`, a FIFO) refused
//! quickly with a code; a FIFO in place of a state file; a state directory owned by
//! another user; limit flags of zero; a secret too short to redact.
//!
//! Every child runs under a watchdog: a command that hangs fails its test (it is killed by
//! its pid) instead of hanging the suite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "reliability/common.rs"]
mod common;
#[path = "hardening/files.rs"]
mod files;
#[path = "hardening/limits.rs"]
mod limits;
#[path = "hardening/state.rs"]
mod state;
#[path = "hardening/statedir.rs"]
mod statedir;
#[path = "hardening/terminal.rs"]
mod terminal;
#[path = "hardening/usage.rs"]
mod usage;
#[path = "hardening/verify.rs"]
mod verify;
#[path = "hardening/watchdog.rs"]
mod watchdog;
