//! The escape suite: hostile payloads run through the real `sandboxio` binary with
//! `--tier namespace`, each asserting the specific failure it must meet (DESIGN.md §6,
//! invariant 6; issue 3).
//!
//! Safety: see `escape/harness.rs`. No payload runs before the sandbox has been seen to hold;
//! destructive ones also preflight with their own flags; every run has a host watchdog.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "escape/harness.rs"]
mod harness;

#[path = "escape/fs.rs"]
mod fs;
#[path = "escape/kernel.rs"]
mod kernel;
#[path = "escape/mounts.rs"]
mod mounts;
#[path = "escape/network.rs"]
mod network;
#[path = "escape/privilege.rs"]
mod privilege;
#[path = "escape/proc.rs"]
mod proc;
#[path = "escape/resources.rs"]
mod resources;
