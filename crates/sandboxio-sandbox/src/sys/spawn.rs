//! `posix_spawn`: a child started without running any code of ours between fork and exec
//! (glibc: `clone(CLONE_VM|CLONE_VFORK)`).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// Room for the argument and environment pointer arrays (entries, the NULL included).
const MAX_ENTRIES: usize = 8;

/// Why [`spawn`] failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SpawnError {
    /// Preparing the spawn failed (which part, and its error number); nothing was started.
    Setup(&'static str, i32),
    /// `posix_spawn` itself failed with this error number.
    Spawn(i32),
}

/// Fills `out` with pointers to `strs` and a NULL after them (`false`: too many).
fn pointers(strs: &[&CStr], out: &mut [*mut libc::c_char; MAX_ENTRIES]) -> bool {
    if strs.len() >= MAX_ENTRIES {
        return false;
    }
    for (slot, s) in out.iter_mut().zip(strs) {
        *slot = s.as_ptr().cast_mut();
    }
    out[strs.len()] = std::ptr::null_mut();
    true
}

/// `posix_spawn(prog, argv, envp)` with each `(source, target)` of `fds` `dup2`ed onto its
/// target (which clears close-on-exec on the target only), the child's signal mask empty and
/// `SIGPIPE` at its default action. At most 7 entries each in `argv` and `envp`. Returns the
/// child's pid. Allocates nothing.
pub(crate) fn spawn(
    prog: &CStr,
    argv: &[&CStr],
    envp: &[&CStr],
    fds: &[(BorrowedFd<'_>, RawFd)],
) -> Result<libc::pid_t, SpawnError> {
    let mut av = [std::ptr::null_mut(); MAX_ENTRIES];
    let mut ev = [std::ptr::null_mut(); MAX_ENTRIES];
    if !pointers(argv, &mut av) {
        return Err(SpawnError::Setup("argv", libc::E2BIG));
    }
    if !pointers(envp, &mut ev) {
        return Err(SpawnError::Setup("envp", libc::E2BIG));
    }
    // SAFETY: plain-data structs, initialised by the *_init calls below before any use.
    let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `actions` is a valid, exclusively borrowed file-actions object.
    let r = unsafe { libc::posix_spawn_file_actions_init(&mut actions) };
    if r != 0 {
        return Err(SpawnError::Setup("file actions", r));
    }
    // SAFETY: `attr` is a valid, exclusively borrowed attributes object.
    let r = unsafe { libc::posix_spawnattr_init(&mut attr) };
    if r != 0 {
        // SAFETY: initialised just above, not used afterwards.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut actions) };
        return Err(SpawnError::Setup("attributes", r));
    }
    let result = (|| {
        for (src, dst) in fds {
            // SAFETY: `actions` was initialised; both are plain fd numbers (`src` is
            // borrowed, so it stays open until posix_spawn has returned).
            let r = unsafe {
                libc::posix_spawn_file_actions_adddup2(&mut actions, src.as_raw_fd(), *dst)
            };
            if r != 0 {
                return Err(SpawnError::Setup("dup2 action", r));
            }
        }
        let empty = super::signal::empty_set();
        let def = super::signal::sigset(&[libc::SIGPIPE])
            .map_err(|e| SpawnError::Setup("signal attributes", e))?;
        // SAFETY: `empty`, `def` and `attr` are valid and initialised, `attr` exclusively
        // borrowed; the flags are the POSIX ones for "set the mask" and "reset these signals
        // to their default".
        let r = unsafe {
            let r = libc::posix_spawnattr_setsigmask(&mut attr, &empty);
            if r != 0 {
                r
            } else {
                let r = libc::posix_spawnattr_setsigdefault(&mut attr, &def);
                if r != 0 {
                    r
                } else {
                    libc::posix_spawnattr_setflags(
                        &mut attr,
                        (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF)
                            as libc::c_short,
                    )
                }
            }
        };
        if r != 0 {
            return Err(SpawnError::Setup("signal attributes", r));
        }
        let mut pid: libc::pid_t = 0;
        // SAFETY: every pointer is valid for the call: `prog` and the strings of `argv` and
        // `envp` are borrowed across it, `av` and `ev` are NULL-terminated arrays of them,
        // `actions` and `attr` are initialised, `pid` is a writable pid_t.
        let r = unsafe {
            libc::posix_spawn(
                &mut pid,
                prog.as_ptr(),
                &actions,
                &attr,
                av.as_ptr(),
                ev.as_ptr(),
            )
        };
        if r != 0 {
            return Err(SpawnError::Spawn(r));
        }
        Ok(pid)
    })();
    // SAFETY: both objects were initialised above and are not used afterwards.
    unsafe {
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_spawned_child_gets_its_argv_env_and_descriptors() {
        let (r, w) = super::super::fd::pipe().unwrap();
        let pid = spawn(
            c"/bin/sh",
            &[
                c"sh",
                c"-c",
                c"printf '%s:%s' \"$1\" \"$X\" >&7",
                c"sh",
                c"arg",
            ],
            &[c"X=env"],
            &[(w.as_fd(), 7)],
        )
        .unwrap();
        drop(w);
        let st = super::super::proc::waitpid(pid).unwrap();
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "{st}");
        let mut buf = [0u8; 32];
        let n = super::super::fd::read(r.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"arg:env");
    }

    #[test]
    fn failures_are_reported_with_their_error_number() {
        assert_eq!(
            spawn(c"/nonexistent/sandboxio", &[c"x"], &[], &[]),
            Err(SpawnError::Spawn(libc::ENOENT))
        );
        let many = [c"x"; MAX_ENTRIES];
        assert_eq!(
            spawn(c"/bin/true", &many, &[], &[]),
            Err(SpawnError::Setup("argv", libc::E2BIG))
        );
    }
}
