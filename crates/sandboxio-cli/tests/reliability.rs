//! Reliability under real faults, against the real `sandboxio` binary: SIGKILL at random
//! points (crash test), 8 concurrent submitters against one budget ceiling, the kill switch
//! from another process, SIGTERM, and cancellation of a fork bomb (namespace tier only).
//!
//! Every test uses its own temporary state directory and a policy that allows the process
//! tier; processes are stopped by pid only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "reliability/bound_stdin.rs"]
mod bound_stdin;
#[path = "reliability/cancel.rs"]
mod cancel;
#[path = "reliability/common.rs"]
mod common;
#[path = "reliability/concurrency.rs"]
mod concurrency;
#[path = "reliability/crash.rs"]
mod crash;
#[path = "reliability/helper_death.rs"]
mod helper_death;
#[path = "reliability/killswitch.rs"]
mod killswitch;
#[path = "reliability/lost.rs"]
mod lost;
#[path = "reliability/sigterm.rs"]
mod sigterm;
#[path = "reliability/state.rs"]
mod state;
