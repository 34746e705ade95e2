//! Handing a sandbox's egress listener to the supervisor.
//!
//! A sandbox with network keeps its own network namespace with loopback only. The helper
//! opens a listening TCP socket on 127.0.0.1 inside that namespace (`ns::egress`) and sends
//! it, as a file descriptor, over a Unix socket pair to the supervisor, whose egress proxy
//! accepts on it from outside. No relay process runs beside the program and no socket path
//! is mounted into the sandbox: the only thing inside is a listening port.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::error::SandboxError;
use crate::sys;

/// One marker byte travels with the descriptor.
pub(crate) const MARK: u8 = b'L';

/// A connected `AF_UNIX` stream pair, close-on-exec.
pub(crate) fn socketpair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    sys::net::socketpair().map_err(|e| SandboxError::Pipe {
        source: io::Error::from_raw_os_error(e),
    })
}

/// Waits (blocking) for the descriptor the helper sends; `None` when the helper closed the
/// socket without sending one (it failed, or the run ended first).
pub(crate) fn recv_fd(from: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    match sys::net::recv_fd(from.as_fd())? {
        Some((MARK, got)) => Ok(got),
        _ => Ok(None),
    }
}

/// Receives the listener and checks that it is a listening TCP socket.
pub(crate) fn recv_listener(from: &OwnedFd) -> io::Result<Option<std::net::TcpListener>> {
    let Some(fd) = recv_fd(from)? else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::from(fd);
    // A socket that is not a bound TCP listener has no local inet address.
    listener.local_addr()?;
    Ok(Some(listener))
}
