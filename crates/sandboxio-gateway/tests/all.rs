#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Integration tests of the gateway crate: one binary, modules under `suite/`.

#[path = "support/pgcluster.rs"]
mod pgcluster;
mod suite;
