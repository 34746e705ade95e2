//! Lowering a process's capabilities, shared by the namespace and Landlock tiers. Both
//! calls only ever lower privileges, so any process may make them.

use std::io::Error;

/// Clears the ambient capability set. On failure, the errno.
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
    if rc < 0 {
        return Err(Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM));
    }
    Ok(())
}

/// Sets the effective, permitted and inheritable sets to zero (capset, v3 layout). On
/// failure, the errno.
pub(crate) fn zero_sets() -> Result<(), i32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut hdr = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let zero = || Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let data = [zero(), zero()];
    // SAFETY: a header and two data structs of the v3 layout, alive for the whole call; the
    // kernel reads them and writes nothing back for capset.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) };
    if rc < 0 {
        return Err(Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM));
    }
    Ok(())
}
