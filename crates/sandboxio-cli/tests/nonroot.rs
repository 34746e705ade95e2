//! The sandbox for everyone: the real `sandboxio` binary run as an unprivileged user, and on
//! simulated restricted hosts (user namespaces switched off by a sysctl inside a test-made
//! user namespace; a seccomp filter that refuses `CLONE_NEWUSER`, as a container's default
//! profile does; Landlock refused). Each test probes what this host allows first and skips
//! with a printed reason only where the host really cannot.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "nonroot/durable.rs"]
mod durable;
#[path = "nonroot/harness.rs"]
mod harness;
#[path = "nonroot/helper_death.rs"]
mod helper_death;

#[path = "nonroot/restricted.rs"]
mod restricted;
#[path = "nonroot/sweep.rs"]
mod sweep;
#[path = "nonroot/user.rs"]
mod user;
