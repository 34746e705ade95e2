//! The sandbox's egress listener, opened by the helper (namespace tier with network).
//!
//! A child of the single-threaded helper enters the sandbox's network namespace (the init
//! is cloned and waiting for its release, so no program runs yet), brings loopback up,
//! listens on 127.0.0.1:`port` and sends the listening socket to the supervisor. The
//! helper itself never changes namespace (a non-root helper could not come back), and the
//! child exits at once, so nothing of ours stays in the sandbox.

use std::os::fd::{AsFd, RawFd};

use super::error::NsError;

/// Steps of the child, for the error it reports back.
const STEPS: [&str; 6] = [
    "open the sandbox's network namespace",
    "enter the sandbox's network namespace",
    "bring loopback up",
    "create the listening socket",
    "bind and listen on loopback",
    "hand the listener to the supervisor",
];

/// Opens the listener inside the network namespace of `init` and sends it over `to`.
pub(crate) fn open_listener(init: libc::pid_t, port: u16, to: RawFd) -> Result<(), NsError> {
    let fail = |step: usize, errno: i32| NsError::EgressListener {
        step: STEPS.get(step).copied().unwrap_or("unknown step"),
        source: std::io::Error::from_raw_os_error(errno),
    };
    let ns = std::fs::File::open(format!("/proc/{init}/ns/net"))
        .map_err(|e| fail(0, e.raw_os_error().unwrap_or(libc::EIO)))?;
    // A child enters the namespace and `_exit`s; the helper itself never changes namespace.
    crate::sys::net::listen_in_netns(ns.as_fd(), port, to, crate::egress::MARK)
        .map_err(|(step, errno)| fail(step, errno))
}
