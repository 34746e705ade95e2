//! Landlock syscalls. Async-signal-safe (used between fork and exec).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// `struct landlock_ruleset_attr` (up to `scoped`, ABI 6).
#[repr(C)]
pub(crate) struct RulesetAttr {
    pub(crate) handled_access_fs: u64,
    pub(crate) handled_access_net: u64,
    pub(crate) scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed, as in the uapi header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_uint = 1;

/// The ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`): `Err(errno)` when
/// Landlock is unavailable.
#[inline]
pub(crate) fn abi_version() -> Result<libc::c_long, i32> {
    // SAFETY: with a NULL attr, size 0 and the VERSION flag, landlock_create_ruleset only
    // returns the ABI version (or an error); it reads and writes no memory.
    super::cvt_long(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    })
}

/// `landlock_create_ruleset(attr, size, 0)`: the kernel reads the first `size` bytes of
/// `attr` (at most its whole size; larger is refused with EINVAL before the call).
#[inline]
pub(crate) fn create_ruleset(attr: &RulesetAttr, size: usize) -> Result<OwnedFd, i32> {
    if size > std::mem::size_of::<RulesetAttr>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `attr` is a valid ruleset_attr of at least `size` bytes (checked above) that
    // lives across the call; the kernel copies it.
    super::owned_long(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            attr as *const RulesetAttr,
            size,
            0u32,
        )
    })
}

/// `landlock_add_rule(ruleset, PATH_BENEATH, {allowed, parent})`.
#[inline]
pub(crate) fn add_path_rule(
    ruleset: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    allowed_access: u64,
) -> Result<(), i32> {
    let attr = PathBeneathAttr {
        allowed_access,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: `attr` is a valid, packed path_beneath_attr that lives across the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    super::cvt_long(rc).map(|_| ())
}

/// `landlock_restrict_self(ruleset, 0)`.
#[inline]
pub(crate) fn restrict_self(ruleset: BorrowedFd<'_>) -> Result<(), i32> {
    // SAFETY: plain syscall with integer arguments on a ruleset fd we hold.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    super::cvt_long(rc).map(|_| ())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_query_answers_a_version_or_why_not() {
        match super::abi_version() {
            Ok(v) => assert!(v > 0),
            Err(e) => assert!([libc::ENOSYS, libc::EOPNOTSUPP].contains(&e), "{e}"),
        }
    }

    #[test]
    fn an_oversized_attribute_is_refused_before_the_call() {
        let attr = super::RulesetAttr {
            handled_access_fs: 1,
            handled_access_net: 0,
            scoped: 0,
        };
        let size = std::mem::size_of::<super::RulesetAttr>() + 8;
        assert_eq!(
            super::create_ruleset(&attr, size).map(|_| ()),
            Err(libc::EINVAL)
        );
    }
}
