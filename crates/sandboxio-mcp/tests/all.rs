//! sandboxio's MCP server against the official Rust SDK's client (`rmcp`), in process over
//! a duplex pipe, with a real runtime (state store, policy, audit trail, sandbox).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod suite;
