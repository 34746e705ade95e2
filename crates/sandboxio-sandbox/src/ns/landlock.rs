//! Landlock on top of the mount namespace (defence in depth), with raw syscalls.
//!
//! The plan carries `LandlockRule`s (paths inside the sandbox and an access class); `apply`
//! runs in the payload after pivot_root, just before capabilities are dropped. It uses the
//! highest ABI the kernel offers up to 6 and reports the ABI it used.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::sys;

/// An access class for one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// List directories only.
    ListDir,
    /// Read files and directories.
    Read,
    /// Read and execute.
    ReadExec,
    /// Read, write, create, remove; no execute.
    ReadWrite,
    /// Read, write, create, remove and execute.
    ReadWriteExec,
    /// A device file or a directory of device files: read, write, ioctl.
    Device,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockRule {
    /// Path inside the sandbox.
    pub path: PathBuf,
    pub access: Access,
}

// Access rights (include/uapi/linux/landlock.h).
const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// Rights that make sense on a non-directory.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;

/// The highest ABI this code knows.
pub const MAX_ABI: u32 = 6;

/// Filesystem rights handled at an ABI.
pub fn handled_fs(abi: u32) -> u64 {
    let mut r = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= IOCTL_DEV;
    }
    r
}

/// The rights an access class grants (before masking by ABI and file type).
pub fn rights(access: Access) -> u64 {
    let read = READ_FILE | READ_DIR;
    let write = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_SYM
        | REFER
        | TRUNCATE;
    match access {
        Access::ListDir => READ_DIR,
        Access::Read => read,
        Access::ReadExec => read | EXECUTE,
        Access::ReadWrite => read | write,
        Access::ReadWriteExec => read | write | EXECUTE,
        Access::Device => READ_FILE | READ_DIR | WRITE_FILE | TRUNCATE | IOCTL_DEV,
    }
}

/// The Landlock ABI version the kernel offers, or `None` when Landlock is unavailable.
pub fn abi_version() -> Option<u32> {
    let v = sys::landlock::abi_version().ok()?;
    u32::try_from(v).ok().filter(|v| *v > 0)
}

/// Rules prepared before fork: paths as C strings, so `apply` does not allocate.
pub struct Prepared {
    rules: Vec<(CString, Access)>,
    deny_tcp: bool,
}

pub fn prepare(rules: &[LandlockRule], deny_tcp: bool) -> Option<Prepared> {
    let mut out = Vec::with_capacity(rules.len());
    for r in rules {
        out.push((
            CString::new(r.path.as_os_str().as_encoded_bytes()).ok()?,
            r.access,
        ));
    }
    Some(Prepared {
        rules: out,
        deny_tcp,
    })
}

/// What went wrong while applying Landlock: the step and errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    CreateRuleset(i32),
    OpenPath(usize, i32),
    AddRule(usize, i32),
    RestrictSelf(i32),
}

/// Applies the rules to the calling process. `no_new_privs` must be set.
/// Returns the ABI used, or `Ok(None)` when the kernel has no Landlock.
/// Paths that do not exist are skipped (the plan lists optional ones).
pub fn apply(p: &Prepared) -> Result<Option<u32>, Failure> {
    let Some(abi) = abi_version() else {
        return Ok(None);
    };
    let abi = abi.min(MAX_ABI);
    let fs = handled_fs(abi);
    let attr = sys::landlock::RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: if abi >= 4 && p.deny_tcp {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    let size: usize = if abi >= 6 {
        24
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // The first `size` bytes of `attr` hold the fields this ABI knows; the kernel copies it.
    let ruleset = sys::landlock::create_ruleset(&attr, size).map_err(Failure::CreateRuleset)?;
    // The ruleset fd is closed when `ruleset` drops (no allocation).
    add_rules(p, ruleset.as_fd(), fs)?;
    sys::landlock::restrict_self(ruleset.as_fd()).map_err(Failure::RestrictSelf)?;
    Ok(Some(abi))
}

fn add_rules(p: &Prepared, ruleset: BorrowedFd<'_>, handled: u64) -> Result<(), Failure> {
    for (i, (path, access)) in p.rules.iter().enumerate() {
        let fd = match sys::fd::open(path, libc::O_PATH | libc::O_CLOEXEC, 0) {
            Ok(fd) => fd,
            Err(libc::ENOENT) => continue,
            Err(e) => return Err(Failure::OpenPath(i, e)),
        };
        let is_dir =
            sys::fd::fstat(fd.as_fd()).is_ok_and(|st| (st.st_mode & libc::S_IFMT) == libc::S_IFDIR);
        let mut allowed = rights(*access) & handled;
        if !is_dir {
            allowed &= FILE_RIGHTS;
        }
        if allowed != 0 {
            // The O_PATH fd is closed when `fd` drops, after the call.
            sys::landlock::add_path_rule(ruleset, fd.as_fd(), allowed)
                .map_err(|e| Failure::AddRule(i, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn read_only_classes_never_write_or_execute() {
        for a in [Access::ListDir, Access::Read] {
            let r = rights(a);
            assert_eq!(
                r & (WRITE_FILE | MAKE_REG | REMOVE_FILE | EXECUTE),
                0,
                "{a:?}"
            );
        }
        assert_eq!(rights(Access::ReadWrite) & EXECUTE, 0);
        assert_ne!(rights(Access::ReadExec) & EXECUTE, 0);
        assert_eq!(rights(Access::Device) & (EXECUTE | MAKE_REG), 0);
    }

    #[test]
    fn abi_masks_newer_rights() {
        assert_eq!(handled_fs(1) & (REFER | TRUNCATE | IOCTL_DEV), 0);
        assert_ne!(handled_fs(2) & REFER, 0);
        assert_ne!(handled_fs(5) & IOCTL_DEV, 0);
    }
}
