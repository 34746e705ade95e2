//! Path and mount calls. All take prepared C strings and are async-signal-safe.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// `access(path, mode) == 0`.
#[inline]
pub(crate) fn access(path: &CStr, mode: libc::c_int) -> bool {
    // SAFETY: `path` is a NUL-terminated C string that lives across the call; `mode` is
    // an integer.
    unsafe { libc::access(path.as_ptr(), mode) == 0 }
}

/// `statfs(path).f_type`.
#[inline]
pub(crate) fn statfs_type(path: &CStr) -> Result<libc::__fsword_t, i32> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `path` is a valid C string and `st` writable memory of a `statfs`'s size.
    super::cvt0(unsafe { libc::statfs(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statfs succeeded and filled `st` (all-zero before, a valid value too).
    Ok(unsafe { st.assume_init() }.f_type)
}

/// `statvfs(path).f_flag` (`ST_*` bits).
#[inline]
pub(crate) fn statvfs_flags(path: &CStr) -> Result<libc::c_ulong, i32> {
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a valid C string; `s` is writable memory of a `statvfs`'s size.
    super::cvt0(unsafe { libc::statvfs(path.as_ptr(), s.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded and filled `s`.
    Ok(unsafe { s.assume_init() }.f_flag)
}

/// `mkdir(path, mode)`.
#[inline]
pub(crate) fn mkdir(path: &CStr, mode: libc::mode_t) -> Result<(), i32> {
    // SAFETY: `path` is a valid C string living across the call.
    super::cvt0(unsafe { libc::mkdir(path.as_ptr(), mode) })
}

/// `chmod(path, mode)`.
#[inline]
pub(crate) fn chmod(path: &CStr, mode: libc::mode_t) -> Result<(), i32> {
    // SAFETY: `path` is a valid C string living across the call.
    super::cvt0(unsafe { libc::chmod(path.as_ptr(), mode) })
}

/// `symlink(target, path)`.
#[inline]
pub(crate) fn symlink(target: &CStr, path: &CStr) -> Result<(), i32> {
    // SAFETY: both are valid C strings living across the call.
    super::cvt0(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) })
}

/// `mkdirat(dir, name, mode)`; does not follow a symlink in the last component.
#[inline]
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> Result<(), i32> {
    // SAFETY: `dir` is an open descriptor and `name` a valid C string living across the call.
    super::cvt0(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

/// `unlinkat(dir, name, flags)` (`AT_REMOVEDIR` for a directory); follows no symlink.
#[inline]
pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: `dir` is an open descriptor and `name` a valid C string living across the call.
    super::cvt0(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// `linkat(AT_FDCWD, old, dir, name, AT_SYMLINK_FOLLOW)`: a new name in `dir` for the file
/// `old` names (a `/proc/self/fd/N` link names an open file, whatever path it had).
#[inline]
pub(crate) fn link_into(old: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<(), i32> {
    // SAFETY: `old` and `name` are valid C strings and `dir` an open descriptor, all living
    // across the call; the kernel only reads them.
    super::cvt0(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            old.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, path, {flags, mode, resolve})`.
pub(crate) fn openat2(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Result<OwnedFd, i32> {
    openat2_at(dir.as_raw_fd(), path, flags, mode, resolve)
}

/// `openat2(AT_FDCWD, path, {flags, mode, resolve})`: like [`openat2`], relative paths
/// from the working directory.
pub(crate) fn openat2_cwd(
    path: &CStr,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Result<OwnedFd, i32> {
    openat2_at(libc::AT_FDCWD, path, flags, mode, resolve)
}

/// The call behind both: `dir` is an open directory (borrowed by the caller) or `AT_FDCWD`.
fn openat2_at(
    dir: libc::c_int,
    path: &CStr,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Result<OwnedFd, i32> {
    let how = OpenHow {
        flags,
        mode,
        resolve,
    };
    // SAFETY: `dir` is an open descriptor or AT_FDCWD, `path` a valid NUL-terminated path,
    // `how` a properly initialised `open_how` whose size we pass; the kernel only reads them.
    super::owned_long(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// `chdir(path)`.
#[inline]
pub(crate) fn chdir(path: &CStr) -> Result<(), i32> {
    // SAFETY: `path` is a valid C string living across the call.
    super::cvt0(unsafe { libc::chdir(path.as_ptr()) })
}

/// `pivot_root(new_root, put_old)`.
#[inline]
pub(crate) fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), i32> {
    // SAFETY: both are valid C strings living across the call.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    super::cvt_long(r).map(|_| ())
}

/// `umount2(target, flags)`.
#[inline]
pub(crate) fn umount2(target: &CStr, flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: `target` is a valid C string living across the call.
    super::cvt0(unsafe { libc::umount2(target.as_ptr(), flags) })
}

/// `mount(src, target, fstype, flags, data)`; `None` passes NULL.
#[inline]
pub(crate) fn mount(
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), i32> {
    // SAFETY: every pointer is either null or a valid C string living across the call.
    super::cvt0(unsafe {
        libc::mount(
            src.map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
}

/// `struct mount_attr` (linux/mount.h, MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE)` setting the `MOUNT_ATTR_*` bits in
/// `attr_set`.
#[inline]
pub(crate) fn mount_setattr_recursive(path: &CStr, attr_set: u64) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a valid C string; `attr` is a live, correctly laid out struct whose
    // size is passed with it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    super::cvt_long(r).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;

    fn c(p: &std::path::Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    #[test]
    fn paths_are_made_changed_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::File::open(d.path()).unwrap();
        let sub = d.path().join("a");
        mkdir(&c(&sub), 0o700).unwrap();
        assert_eq!(mkdir(&c(&sub), 0o700), Err(libc::EEXIST));
        chmod(&c(&sub), 0o750).unwrap();
        assert!(access(&c(&sub), libc::F_OK));
        symlink(c"/", &c(&d.path().join("l"))).unwrap();
        mkdirat(root.as_fd(), c"b", 0o755).unwrap();
        // RESOLVE_BENEATH refuses a symlink out of the directory.
        let beneath = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        let flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        assert!(openat2(root.as_fd(), c"b", flags, 0, beneath).is_ok());
        assert_eq!(
            openat2(root.as_fd(), c"l", flags, 0, beneath).map(|_| ()),
            Err(libc::EXDEV)
        );
        assert_eq!(
            openat2_cwd(&c(&d.path().join("l")), flags, 0, libc::RESOLVE_NO_SYMLINKS).map(|_| ()),
            Err(libc::ELOOP)
        );
        assert!(openat2_cwd(&c(d.path()), flags, 0, 0).is_ok());
        unlinkat(root.as_fd(), c"b", libc::AT_REMOVEDIR).unwrap();
        unlinkat(root.as_fd(), c"l", 0).unwrap();
        assert_eq!(unlinkat(root.as_fd(), c"a", 0), Err(libc::EISDIR));
        assert!(!access(c"/nonexistent/sandboxio", libc::F_OK));
    }

    #[test]
    fn filesystem_facts() {
        assert_eq!(statfs_type(c"/proc"), Ok(libc::PROC_SUPER_MAGIC));
        assert!(statvfs_flags(c"/").is_ok());
        assert_eq!(statvfs_flags(c"/nonexistent/sandboxio"), Err(libc::ENOENT));
        assert_eq!(chdir(c"/nonexistent/sandboxio"), Err(libc::ENOENT));
        assert_eq!(umount2(c"/nonexistent/sandboxio", 0), Err(libc::ENOENT));
    }
}
