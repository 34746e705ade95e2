//! File descriptors: pipes, plain reads and writes, flags, duplicates, pipe sizes,
//! `FIONREAD`, `fstat`, `poll`, inherited descriptors, and the registration of a descriptor
//! with the tokio reactor.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::unix::AsyncFd;

/// `open(path, flags, mode)`; the caller adds `O_CLOEXEC`. Async-signal-safe.
#[inline]
pub(crate) fn open(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd, i32> {
    // SAFETY: `path` is a NUL-terminated C string that lives across the call; the other
    // arguments are integers.
    super::owned(unsafe { libc::open(path.as_ptr(), flags, mode) })
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
#[inline]
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    super::cvt0(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((super::owned(fds[0])?, super::owned(fds[1])?))
}

/// One `read(2)` into `buf`. Async-signal-safe.
#[inline]
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which is exclusively
    // borrowed for the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| super::errno())
}

/// `getdents64(dir, buf)`: fills `buf` with `struct linux_dirent64` records of the open
/// directory `dir` from its current offset; returns the bytes filled (0 at the end).
/// Async-signal-safe.
#[inline]
pub(crate) fn getdents64(dir: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `dir` is an open descriptor and `buf` writable memory of the length passed,
    // exclusively borrowed for the call; the kernel writes at most that many bytes.
    let n = super::cvt_long(unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            dir.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    })?;
    usize::try_from(n).map_err(|_| libc::EIO)
}

/// One `write(2)` from `data`. Async-signal-safe.
#[inline]
pub(crate) fn write(fd: BorrowedFd<'_>, data: &[u8]) -> Result<usize, i32> {
    // SAFETY: the kernel reads at most `data.len()` bytes from `data`, borrowed for the call.
    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    usize::try_from(n).map_err(|_| super::errno())
}

/// Sets `O_NONBLOCK` on the open file description of `fd`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), i32> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl(F_GETFL) takes integer arguments only.
    let fl = super::cvt(unsafe { libc::fcntl(raw, libc::F_GETFL) })?;
    // SAFETY: fcntl(F_SETFL) takes integer arguments only.
    super::cvt0(unsafe { libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) })
}

/// Bytes waiting to be read (`ioctl(FIONREAD)`).
#[inline]
pub(crate) fn unread_bytes(fd: BorrowedFd<'_>) -> Result<libc::c_int, i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points to `n`.
    super::cvt0(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n)
}

/// `fstat(fd)`. Async-signal-safe.
#[inline]
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat, i32> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is writable memory of the size and alignment of a `stat`.
    super::cvt0(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded and filled `st` (which was zeroed before, too).
    Ok(unsafe { st.assume_init() })
}

/// `lseek(fd, off, whence)`: the new offset. Async-signal-safe.
#[inline]
pub(crate) fn lseek(
    fd: BorrowedFd<'_>,
    off: libc::off_t,
    whence: libc::c_int,
) -> Result<libc::off_t, i32> {
    // SAFETY: lseek takes integer arguments and touches no memory of ours.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    if r < 0 {
        return Err(super::errno());
    }
    Ok(r)
}

/// `close(fd)` by number. Async-signal-safe. For descriptors no `OwnedFd` of this process
/// will use or drop any more (e.g. in a child that never returns into the code holding
/// them); an owned descriptor is closed by dropping it.
#[inline]
pub(crate) fn close_raw(fd: RawFd) -> Result<(), i32> {
    // SAFETY: close takes an integer and touches no memory of ours.
    super::cvt0(unsafe { libc::close(fd) })
}

/// `close_range(first, last, 0)` (see [`close_raw`] for which descriptors). Async-signal-safe.
#[inline]
pub(crate) fn close_range(first: u32, last: u32) -> Result<(), i32> {
    // SAFETY: close_range takes integers and touches no memory of ours.
    super::cvt0(unsafe { libc::close_range(first, last, 0) })
}

/// `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`: every descriptor from `first` on closes
/// at the next execve (none is closed now). Async-signal-safe.
#[inline]
pub(crate) fn set_cloexec_from(first: u32) -> Result<(), i32> {
    let cloexec = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
    // SAFETY: close_range takes integers and touches no memory of ours.
    super::cvt0(unsafe { libc::close_range(first, u32::MAX, cloexec) })
}

/// `fcntl(F_DUPFD_CLOEXEC)`: a close-on-exec duplicate of `fd` on the lowest free number
/// `>= min`.
#[inline]
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, min: RawFd) -> Result<OwnedFd, i32> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes integer arguments only and returns a new fd.
    super::owned(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })
}

/// The buffer size of the pipe `fd` (`fcntl(F_GETPIPE_SZ)`).
#[inline]
pub(crate) fn pipe_size(fd: BorrowedFd<'_>) -> Result<libc::c_int, i32> {
    // SAFETY: fcntl(F_GETPIPE_SZ) takes integer arguments only.
    super::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) })
}

/// Sets the buffer size of the pipe `fd` to at least `size` (`fcntl(F_SETPIPE_SZ)`): the
/// size set.
#[inline]
pub(crate) fn set_pipe_size(fd: BorrowedFd<'_>, size: libc::c_int) -> Result<libc::c_int, i32> {
    // SAFETY: fcntl(F_SETPIPE_SZ) takes integer arguments only.
    super::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, size) })
}

/// `poll(fds, timeout_ms)`: how many entries have events. An entry's fd is a plain number
/// (a negative one is skipped by the kernel).
#[inline]
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> Result<usize, i32> {
    let n = libc::nfds_t::try_from(fds.len()).map_err(|_| libc::EINVAL)?;
    // SAFETY: `fds` is a valid, exclusively borrowed array of `n` pollfd structs.
    let r = super::cvt(unsafe { libc::poll(fds.as_mut_ptr(), n, timeout_ms) })?;
    usize::try_from(r).map_err(|_| libc::EIO)
}

/// Whether the other end of the pipe `fd` is closed (`POLLERR` on a write end whose
/// readers are gone, `POLLHUP` on a read end whose writers are): the process that held it
/// died or let go. Does not block. Async-signal-safe.
pub(crate) fn peer_closed(fd: BorrowedFd<'_>) -> bool {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    }];
    matches!(poll(&mut p, 0), Ok(1)) && p[0].revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Descriptor numbers below 64 that [`claim_inherited`] has taken (each at most once).
static CLAIMED: AtomicU64 = AtomicU64::new(0);

/// Takes ownership of `fd`, a descriptor this process inherited open across `execve` (the
/// helper's fixed fds, named in its argv), and sets close-on-exec on it. `Err(EBADF)`: not
/// open, or not below 64; `Err(EBUSY)`: that number was claimed before. For the numbers a
/// process received at exec, claimed before it opens anything of its own: nothing else in
/// the process owns them then, and each can be claimed only once.
pub(crate) fn claim_inherited(fd: RawFd) -> Result<OwnedFd, i32> {
    let bit = u32::try_from(fd)
        .ok()
        .filter(|n| *n < 64)
        .map(|n| 1u64 << n)
        .ok_or(libc::EBADF)?;
    // SAFETY: fcntl(F_GETFD) takes integer arguments only; it fails on a number not open.
    let flags = super::cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    if CLAIMED.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
        return Err(libc::EBUSY);
    }
    // SAFETY: fcntl(F_SETFD) takes integer arguments only.
    super::cvt0(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: `fd` is open (F_GETFD succeeded), it is one this process inherited at exec and
    // has not opened itself (the caller's contract above), and `CLAIMED` lets each number be
    // taken once: the new OwnedFd is its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Registers `fd` with the current tokio reactor for `interest`.
pub(crate) fn async_fd(fd: OwnedFd, interest: tokio::io::Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it stays open (and its number is
    // not reused) for the AsyncFd's whole lifetime, and `as_raw_fd` always returns it, as
    // registering requires.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

/// Registers a borrowed `fd` with the current tokio reactor for `interest`; the `AsyncFd`
/// cannot outlive the borrow.
pub(crate) fn async_fd_borrowed(
    fd: BorrowedFd<'_>,
    interest: tokio::io::Interest,
) -> io::Result<AsyncFd<BorrowedFd<'_>>> {
    // SAFETY: the BorrowedFd keeps `fd` open (and its number not reused) for its lifetime,
    // which bounds the AsyncFd's, and `as_raw_fd` always returns that number.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn pipe_read_write_and_nonblocking() {
        let (r, w) = pipe().unwrap();
        set_nonblocking(r.as_fd()).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(read(r.as_fd(), &mut buf), Err(libc::EAGAIN));
        assert_eq!(write(w.as_fd(), b"abc"), Ok(3));
        assert_eq!(unread_bytes(r.as_fd()), Ok(3));
        assert_eq!(read(r.as_fd(), &mut buf), Ok(3));
        assert_eq!(&buf[..3], b"abc");
        let st = fstat(r.as_fd()).unwrap();
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFIFO);
        drop(w);
        assert_eq!(read(r.as_fd(), &mut buf), Ok(0));
    }

    #[test]
    fn seeking_and_closing() {
        let f = tempfile::tempfile().unwrap();
        assert_eq!(lseek(f.as_fd(), 5, libc::SEEK_SET), Ok(5));
        assert_eq!(lseek(f.as_fd(), -1, libc::SEEK_SET), Err(libc::EINVAL));
        let (r, w) = pipe().unwrap();
        assert_eq!(lseek(r.as_fd(), 0, libc::SEEK_SET), Err(libc::ESPIPE));
        // Give up ownership, then close by number.
        use std::os::fd::IntoRawFd;
        let raw = w.into_raw_fd();
        close_raw(raw).unwrap();
        assert_eq!(close_raw(raw), Err(libc::EBADF));
        let mut buf = [0u8; 1];
        assert_eq!(read(r.as_fd(), &mut buf), Ok(0));
        // An empty range (first > last) is refused.
        assert_eq!(close_range(10, 9), Err(libc::EINVAL));
    }

    #[test]
    fn a_high_duplicate_reads_the_same_pipe() {
        let (r, w) = pipe().unwrap();
        let d = dup_at_least(w.as_fd(), 20).unwrap();
        assert!(d.as_raw_fd() >= 20);
        assert_eq!(write(d.as_fd(), b"x"), Ok(1));
        let mut buf = [0u8; 2];
        assert_eq!(read(r.as_fd(), &mut buf), Ok(1));
        assert!(pipe_size(r.as_fd()).unwrap() > 0);
        let want = 2 * pipe_size(r.as_fd()).unwrap();
        assert!(set_pipe_size(w.as_fd(), want).unwrap() >= want);
        assert!(pipe_size(r.as_fd()).unwrap() >= want);
    }

    #[test]
    fn poll_sees_a_readable_pipe() {
        let (r, w) = pipe().unwrap();
        let mut fds = [
            libc::pollfd {
                fd: r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: -1,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        assert_eq!(poll(&mut fds, 0), Ok(0));
        write(w.as_fd(), b"x").unwrap();
        assert_eq!(poll(&mut fds, 0), Ok(1));
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
        assert_eq!(fds[1].revents, 0);
    }

    #[test]
    fn an_inherited_number_is_claimed_once() {
        let (r, _w) = pipe().unwrap();
        if r.as_raw_fd() >= 64 {
            println!("skipping: no free descriptor number below 64");
            return;
        }
        // A number this test owns: moved out of its OwnedFd, then claimed back.
        let n = std::os::fd::IntoRawFd::into_raw_fd(r);
        let owned = claim_inherited(n).unwrap();
        assert_eq!(owned.as_raw_fd(), n);
        assert_eq!(claim_inherited(n).map(|_| ()), Err(libc::EBUSY));
        assert_eq!(claim_inherited(64).map(|_| ()), Err(libc::EBADF));
        assert_eq!(claim_inherited(-1).map(|_| ()), Err(libc::EBADF));
    }

    #[tokio::test]
    async fn a_borrowed_descriptor_wakes_the_reactor() {
        let (r, w) = pipe().unwrap();
        let afd = async_fd_borrowed(r.as_fd(), tokio::io::Interest::READABLE).unwrap();
        write(w.as_fd(), b"x").unwrap();
        let mut g = afd.readable().await.unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(read(afd.get_ref().as_fd(), &mut buf), Ok(1));
        g.clear_ready();
    }

    #[test]
    fn open_reports_the_errno() {
        assert_eq!(
            open(
                c"/nonexistent/sandboxio",
                libc::O_RDONLY | libc::O_CLOEXEC,
                0
            )
            .map(|_| ()),
            Err(libc::ENOENT)
        );
    }
}
