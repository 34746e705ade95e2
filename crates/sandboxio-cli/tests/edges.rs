//! The CLI's edges, against the real `sandboxio` binary: every command with a non-UTF-8
//! environment variable and a reader that goes away, exit statuses and codes of errors
//! and replays, denial messages that name their own layer, the approval wait, `status`.
//!
//! Every test uses its own temporary state directory and a policy that allows the process
//! tier (the namespace tier where a test needs it, after a preflight).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "edges/approvals.rs"]
mod approvals;
#[path = "reliability/common.rs"]
mod common;
#[path = "edges/denials.rs"]
mod denials;
#[path = "edges/errors.rs"]
mod errors;
#[path = "edges/pipes.rs"]
mod pipes;
#[path = "edges/status.rs"]
mod status;
#[path = "edges/util.rs"]
mod util;
