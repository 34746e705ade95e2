//! One integration binary for the sandbox crate: every test runs the real helper binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod suite;
