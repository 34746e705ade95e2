//! Sockets: Unix socket pairs, passing a descriptor (`SCM_RIGHTS`), and opening a loopback
//! listener inside another network namespace.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A connected `AF_UNIX` stream pair, close-on-exec.
pub(crate) fn socketpair() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
    super::cvt0(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    Ok((super::owned(fds[0])?, super::owned(fds[1])?))
}

/// Sends `fd` over the Unix socket `to` (`SCM_RIGHTS`) with the one byte `mark`. No
/// allocation (used in a forked child).
pub(crate) fn send_fd(to: RawFd, fd: RawFd, mark: u8) -> Result<(), i32> {
    let mut byte = [mark];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor, aligned like a cmsghdr.
    let mut space = [0u64; 4];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let cmsg_len = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    if cmsg_len > std::mem::size_of_val(&space) {
        return Err(libc::EINVAL);
    }
    // SAFETY: msghdr is plain data (integers and pointers): all-zero is a valid value.
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
            return Err(libc::EINVAL);
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` and everything it points to (`iov`, `byte`, `space`) live across the
    // call.
    let n = unsafe { libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) };
    if n != 1 {
        return Err(if n < 0 { super::errno() } else { libc::EIO });
    }
    Ok(())
}

/// Waits (blocking, EINTR retried) for one message on `from`: `None` at end of file, else
/// its first byte and the first descriptor it carried (close-on-exec; any further ones
/// are closed).
pub(crate) fn recv_fd(from: BorrowedFd<'_>) -> io::Result<Option<(u8, Option<OwnedFd>)>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data (integers and pointers): all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    let n = loop {
        // SAFETY: `msg` and its buffers (`iov`, `byte`, `space`) live across the call;
        // received fds get close-on-exec (MSG_CMSG_CLOEXEC).
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
    Ok(Some((byte[0], got)))
}

/// Opens a TCP listener on 127.0.0.1:`port` inside the network namespace open as `netns`
/// and sends it over `to` (see [`send_fd`], with `mark`). A forked child makes the raw
/// calls (this process never changes namespace) and `_exit`s; it reports its result
/// through a pipe. `Err((step, errno))`, steps: 1 enter the namespace (or fork), 2 bring
/// loopback up, 3 create the socket, 4 bind and listen, 5 send it (or the pipe, or the
/// child's report).
pub(crate) fn listen_in_netns(
    netns: BorrowedFd<'_>,
    port: u16,
    to: RawFd,
    mark: u8,
) -> Result<(), (usize, i32)> {
    let (r, w) = super::fd::pipe().map_err(|e| (5, e))?;
    // SAFETY: the child only makes raw syscalls (close, setns, socket, ioctl, bind, listen,
    // sendmsg, write) and `_exit`s without returning into the caller's code; it allocates
    // nothing and takes no lock, so forking is sound even from a multi-threaded process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err((1, super::errno()));
    }
    if pid == 0 {
        drop(r);
        let out = match listener_child(netns.as_raw_fd(), port, to, mark) {
            Ok(()) => [0u8; 5],
            Err((step, e)) => {
                let b = e.to_ne_bytes();
                [step as u8, b[0], b[1], b[2], b[3]]
            }
        };
        let _ = super::fd::write(w.as_fd(), &out);
        // SAFETY: leaving the forked child at once, running no destructor of the caller's.
        unsafe { libc::_exit(0) };
    }
    drop(w);
    let mut buf = [0u8; 8];
    let mut len = 0;
    let read = loop {
        if len == buf.len() {
            break Ok(());
        }
        match super::fd::read(r.as_fd(), &mut buf[len..]) {
            Ok(0) => break Ok(()),
            Ok(n) => len += n,
            Err(libc::EINTR) => {}
            Err(e) => break Err(e),
        }
    };
    let _ = super::proc::waitpid(pid);
    match (read, &buf[..len]) {
        (Ok(()), [0, ..]) => Ok(()),
        (Ok(()), [step, a, b, c, d]) if *step > 0 => {
            Err((usize::from(*step), i32::from_ne_bytes([*a, *b, *c, *d])))
        }
        _ => Err((5, libc::EIO)),
    }
}

/// In the forked child of [`listen_in_netns`]: setns, loopback up, listen, send.
fn listener_child(ns: RawFd, port: u16, to: RawFd, mark: u8) -> Result<(), (usize, i32)> {
    // SAFETY: setns(2) takes integers; `ns` is an open namespace fd.
    if unsafe { libc::setns(ns, libc::CLONE_NEWNET) } != 0 {
        return Err((1, super::errno()));
    }
    loopback_up().map_err(|e| (2, e))?;
    // SAFETY: plain socket creation, integer arguments.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err((3, super::errno()));
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in of the size given, living across the call; `s`
    // is our socket.
    let ok = unsafe {
        libc::bind(
            s,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0
            && libc::listen(s, 1024) == 0
    };
    if !ok {
        return Err((4, super::errno()));
    }
    send_fd(to, s, mark).map_err(|e| (5, e))
}

/// `ip link set lo up` in the current network namespace.
fn loopback_up() -> Result<(), i32> {
    // SAFETY: plain socket creation, integer arguments.
    let s = super::owned(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: ifreq is plain data (bytes, integers and a union of them): all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags of `req`, a valid ifreq
    // living across both calls; the union field read is the one SIOCGIFFLAGS filled.
    let rc = unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            -1
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req)
        }
    };
    if rc != 0 {
        return Err(super::errno());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::fs::File;

    /// A fresh network namespace (`None` without the privilege to make one).
    fn fresh_netns() -> Option<File> {
        std::thread::spawn(|| {
            // SAFETY: unshare(2) with integer flags; it moves only this short-lived test
            // thread into a new network namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return None;
            }
            File::open("/proc/thread-self/ns/net").ok()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_descriptor_and_its_mark_cross_a_socket_pair() {
        let (a, b) = socketpair().unwrap();
        let (r, _w) = super::super::fd::pipe().unwrap();
        send_fd(b.as_raw_fd(), r.as_raw_fd(), b'x').unwrap();
        let (mark, fd) = recv_fd(a.as_fd()).unwrap().unwrap();
        assert_eq!(mark, b'x');
        let fd = fd.unwrap();
        assert_ne!(fd.as_raw_fd(), r.as_raw_fd());
        drop(b);
        assert!(recv_fd(a.as_fd()).unwrap().is_none(), "end of file");
    }

    #[test]
    fn a_listener_opened_in_another_namespace_arrives_listening_on_loopback() {
        let Some(ns) = fresh_netns() else {
            println!("skipping: cannot create a network namespace here");
            return;
        };
        let (a, b) = socketpair().unwrap();
        listen_in_netns(ns.as_fd(), 0, b.as_raw_fd(), b'L').unwrap();
        let (mark, fd) = recv_fd(a.as_fd()).unwrap().unwrap();
        assert_eq!(mark, b'L');
        let l = std::net::TcpListener::from(fd.unwrap());
        assert!(l.local_addr().unwrap().ip().is_loopback());
    }

    #[test]
    fn a_failing_step_is_reported_with_its_errno() {
        // Not a namespace descriptor: setns fails in the child, step 1.
        let (r, _w) = super::super::fd::pipe().unwrap();
        let (_a, b) = socketpair().unwrap();
        assert_eq!(
            listen_in_netns(r.as_fd(), 0, b.as_raw_fd(), b'L'),
            Err((1, libc::EINVAL))
        );
    }
}
