#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! One integration binary for the budget crate.

mod suite;
