//! Lowering a process's capabilities, shared by the namespace and Landlock tiers. Both
//! calls only ever lower privileges, so any process may make them.

/// Clears the ambient capability set. On failure, the errno.
#[inline]
pub(crate) fn clear_ambient() -> Result<(), i32> {
    crate::sys::caps::clear_ambient()
}

/// Sets the effective, permitted and inheritable sets to zero (capset, v3 layout). On
/// failure, the errno.
#[inline]
pub(crate) fn zero_sets() -> Result<(), i32> {
    crate::sys::caps::capset(0, 0, 0)
}
