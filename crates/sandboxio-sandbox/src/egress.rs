//! Handing a sandbox's egress listener to the supervisor.
//!
//! A sandbox with network keeps its own network namespace with loopback only. The helper
//! opens a listening TCP socket on 127.0.0.1 inside that namespace (`ns::egress`) and sends
//! it, as a file descriptor, over a Unix socket pair to the supervisor, whose egress proxy
//! accepts on it from outside. No relay process runs beside the program and no socket path
//! is mounted into the sandbox: the only thing inside is a listening port.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{last_os_error, SandboxError};

/// One marker byte travels with the descriptor.
const MARK: u8 = b'L';

/// A connected `AF_UNIX` stream pair, close-on-exec.
pub(crate) fn socketpair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(SandboxError::Pipe {
            source: last_os_error(),
        });
    }
    // SAFETY: socketpair succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `fd` over the Unix socket `to` (SCM_RIGHTS, with one marker byte).
pub(crate) fn send_fd(to: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [MARK];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor, aligned like a cmsghdr.
    let mut space = [0u64; 4];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let cmsg_len = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    if cmsg_len > std::mem::size_of_val(&space) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_len;
    // SAFETY: `msg` has a control buffer of `cmsg_len` bytes, enough for one header and
    // one fd (checked above), so CMSG_FIRSTHDR is non-null and CMSG_DATA is in bounds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` and everything it points to are valid for the call.
    let n = unsafe { libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) };
    if n != 1 {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::from_raw_os_error(libc::EIO)
        });
    }
    Ok(())
}

/// Waits (blocking) for the descriptor the helper sends; `None` when the helper closed the
/// socket without sending one (it failed, or the run ended first).
pub(crate) fn recv_fd(from: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    let n = loop {
        // SAFETY: `msg` and its buffers are valid for the call; received fds get
        // close-on-exec (MSG_CMSG_CLOEXEC).
        let n = unsafe { libc::recvmsg(from.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break n;
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Ok(None);
    }
    let mut got: Option<OwnedFd> = None;
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; the CMSG macros walk
    // only within it. Each SCM_RIGHTS fd is new in this process and owned from here on.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count =
                    ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if got.is_none() {
                        got = Some(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if byte[0] != MARK {
        return Ok(None);
    }
    Ok(got)
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
