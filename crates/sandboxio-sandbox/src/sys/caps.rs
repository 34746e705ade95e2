//! Capability calls (only ever lowering privileges).

/// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)`. Async-signal-safe.
#[inline]
pub(crate) fn clear_ambient() -> Result<(), i32> {
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integer arguments only and touches no memory.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    super::cvt0(rc)
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capset` (v3 layout) of the calling thread to the given 64-bit sets (low word first).
/// Async-signal-safe.
#[inline]
pub(crate) fn capset(effective: u64, permitted: u64, inheritable: u64) -> Result<(), i32> {
    let mut hdr = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let word = |i: u32| Data {
        effective: (effective >> (32 * i)) as u32,
        permitted: (permitted >> (32 * i)) as u32,
        inheritable: (inheritable >> (32 * i)) as u32,
    };
    let data = [word(0), word(1)];
    // SAFETY: a header and two data structs of the v3 layout, alive for the whole call; the
    // kernel reads them and writes nothing back for capset.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) };
    super::cvt_long(rc).map(|_| ())
}

/// `prctl(PR_CAPBSET_READ, cap)`: whether `cap` is in the bounding set; `Err(EINVAL)` past
/// the last capability the kernel knows. Async-signal-safe.
#[inline]
pub(crate) fn capbset_read(cap: libc::c_ulong) -> Result<bool, i32> {
    super::proc::prctl_int(libc::PR_CAPBSET_READ, cap).map(|r| r == 1)
}

/// `prctl(PR_CAPBSET_DROP, cap)`. Async-signal-safe.
#[inline]
pub(crate) fn capbset_drop(cap: libc::c_ulong) -> Result<(), i32> {
    super::proc::prctl_int(libc::PR_CAPBSET_DROP, cap).map(|_| ())
}

/// `prctl(PR_SET_SECUREBITS, bits)`. Async-signal-safe.
#[inline]
pub(crate) fn set_securebits(bits: libc::c_ulong) -> Result<(), i32> {
    super::proc::prctl_int(libc::PR_SET_SECUREBITS, bits).map(|_| ())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bounding_set_is_read_up_to_the_last_capability() {
        // CAP_CHOWN (0) exists on every kernel; 64 is past the last one.
        assert!(super::capbset_read(0).is_ok());
        assert_eq!(super::capbset_read(64), Err(libc::EINVAL));
    }
}
