//! The sandbox's egress listener, opened by the helper (namespace tier with network).
//!
//! A child of the single-threaded helper enters the sandbox's network namespace (the init
//! is cloned and waiting for its release, so no program runs yet), brings loopback up,
//! listens on 127.0.0.1:`port` and sends the listening socket to the supervisor. The
//! helper itself never changes namespace (a non-root helper could not come back), and the
//! child exits at once, so nothing of ours stays in the sandbox.

use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};

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
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(fail(5, errno()));
    }
    // SAFETY: pipe2 succeeded; both fds are ours alone.
    let (r, w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    // SAFETY: the helper is single-threaded, so the child may run Rust code on its copy of
    // the address space; it only makes syscalls and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(fail(1, errno()));
    }
    if pid == 0 {
        drop(r);
        let out = match child(ns.as_raw_fd(), port, to) {
            Ok(()) => [0u8; 5],
            Err((step, e)) => {
                let b = e.to_ne_bytes();
                [step as u8 + 1, b[0], b[1], b[2], b[3]]
            }
        };
        // SAFETY: writing 5 bytes from a live array to our pipe, then leaving at once.
        unsafe {
            libc::write(w.as_raw_fd(), out.as_ptr().cast(), out.len());
            libc::_exit(0);
        }
    }
    drop(w);
    let mut buf = Vec::new();
    let read = (&r).read_to_end(&mut buf);
    let mut status = 0;
    // SAFETY: reaping the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    match (read, buf.as_slice()) {
        (Ok(_), [0, ..]) => Ok(()),
        (Ok(_), [step, a, b, c, d]) => Err(fail(
            usize::from(*step) - 1,
            i32::from_ne_bytes([*a, *b, *c, *d]),
        )),
        _ => Err(fail(5, libc::EIO)),
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// In the forked child: setns, loopback up, listen, send.
fn child(ns: RawFd, port: u16, to: RawFd) -> Result<(), (usize, i32)> {
    // SAFETY: `ns` is an open namespace fd; the child is single-threaded.
    if unsafe { libc::setns(ns, libc::CLONE_NEWNET) } != 0 {
        return Err((1, errno()));
    }
    loopback_up().map_err(|e| (2, e))?;
    // SAFETY: plain socket creation.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err((3, errno()));
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in of the size given; `s` is our socket.
    let ok = unsafe {
        libc::bind(
            s,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0
            && libc::listen(s, 1024) == 0
    };
    if !ok {
        return Err((4, errno()));
    }
    crate::egress::send_fd(to, s).map_err(|e| (5, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// `ip link set lo up` in the current network namespace.
fn loopback_up() -> Result<(), i32> {
    // SAFETY: plain socket creation, closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(errno());
    }
    // SAFETY: ifreq is plain data; the name fits (with its NUL) in IFNAMSIZ.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags of `req`, a valid ifreq;
    // the union field read is the one SIOCGIFFLAGS filled.
    let rc = unsafe {
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) != 0 {
            -1
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS, &req)
        }
    };
    let e = errno();
    // SAFETY: closing the socket created above.
    unsafe { libc::close(s) };
    if rc != 0 {
        return Err(e);
    }
    Ok(())
}
