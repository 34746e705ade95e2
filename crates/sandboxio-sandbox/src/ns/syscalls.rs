//! Syscall numbers by name, for the architectures the seccomp filter is built for.
//!
//! The filter's rules name syscalls; each architecture numbers them differently, and some
//! exist on one only (aarch64 has no `open`, `creat`, `chmod`, `mknod`, `iopl`, `ioperm`:
//! its libc uses the `*at` forms, so there is nothing to deny). Plain data, reviewed like
//! the deny table: x86_64 from `arch/x86/entry/syscalls/syscall_64.tbl`, aarch64 from
//! `include/uapi/asm-generic/unistd.h` (numbers from 424 up are the same on every
//! architecture). The unit tests check the host's table against libc's constants and a
//! few numbers of each table by hand.

/// An architecture with a syscall table here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// `AUDIT_ARCH_X86_64` (`EM_X86_64` | 64-bit | little endian).
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// `AUDIT_ARCH_AARCH64` (`EM_AARCH64` | 64-bit | little endian).
pub const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;

impl Arch {
    /// Every architecture with a table.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture this crate was built for.
    #[cfg(target_arch = "x86_64")]
    pub const fn host() -> Arch {
        Arch::X86_64
    }

    /// The architecture this crate was built for.
    #[cfg(target_arch = "aarch64")]
    pub const fn host() -> Arch {
        Arch::Aarch64
    }

    /// The value of `seccomp_data.arch` for this architecture.
    pub const fn audit_arch(self) -> u32 {
        match self {
            Arch::X86_64 => AUDIT_ARCH_X86_64,
            Arch::Aarch64 => AUDIT_ARCH_AARCH64,
        }
    }

    /// The name in words, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn table(self) -> &'static [(&'static str, u32)] {
        match self {
            Arch::X86_64 => X86_64,
            Arch::Aarch64 => AARCH64,
        }
    }

    /// The number of syscall `name` on this architecture; `None` when it has no such call.
    pub fn nr(self, name: &str) -> Option<u32> {
        self.table()
            .binary_search_by(|(n, _)| n.cmp(&name))
            .ok()
            .map(|i| self.table()[i].1)
    }

    /// Every name this architecture's table knows.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.table().iter().map(|(n, _)| *n)
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the namespace tier's seccomp tables cover x86_64 and aarch64 only");

/// x86_64, sorted by name (the lookup is a binary search).
const X86_64: &[(&str, u32)] = &[
    ("acct", 163),
    ("add_key", 248),
    ("adjtimex", 159),
    ("bpf", 321),
    ("chmod", 90),
    ("chroot", 161),
    ("clock_adjtime", 305),
    ("clock_settime", 227),
    ("clone", 56),
    ("clone3", 435),
    ("creat", 85),
    ("delete_module", 176),
    ("fanotify_init", 300),
    ("fchmod", 91),
    ("fchmodat", 268),
    ("fchmodat2", 452),
    ("finit_module", 313),
    ("fsconfig", 431),
    ("fsmount", 432),
    ("fsopen", 430),
    ("fspick", 433),
    ("init_module", 175),
    ("io_uring_enter", 426),
    ("io_uring_register", 427),
    ("io_uring_setup", 425),
    ("ioctl", 16),
    ("ioperm", 173),
    ("iopl", 172),
    ("kexec_file_load", 320),
    ("kexec_load", 246),
    ("keyctl", 250),
    ("memfd_create", 319),
    ("mknod", 133),
    ("mknodat", 259),
    ("mount", 165),
    ("mount_setattr", 442),
    ("move_mount", 429),
    ("open", 2),
    ("open_by_handle_at", 304),
    ("open_tree", 428),
    ("openat", 257),
    ("openat2", 437),
    ("perf_event_open", 298),
    ("personality", 135),
    ("pidfd_getfd", 438),
    ("pivot_root", 155),
    ("process_vm_readv", 310),
    ("process_vm_writev", 311),
    ("ptrace", 101),
    ("quotactl", 179),
    ("quotactl_fd", 443),
    ("reboot", 169),
    ("request_key", 249),
    ("setns", 308),
    ("settimeofday", 164),
    ("socket", 41),
    ("socketpair", 53),
    ("swapoff", 168),
    ("swapon", 167),
    ("syslog", 103),
    ("umount2", 166),
    ("unshare", 272),
    ("userfaultfd", 323),
];

/// aarch64 (asm-generic numbering), sorted by name. `fchmodat2` is 452 as on every
/// architecture (libc 0.2.191 has no constant for it on aarch64).
const AARCH64: &[(&str, u32)] = &[
    ("acct", 89),
    ("add_key", 217),
    ("adjtimex", 171),
    ("bpf", 280),
    ("chroot", 51),
    ("clock_adjtime", 266),
    ("clock_settime", 112),
    ("clone", 220),
    ("clone3", 435),
    ("delete_module", 106),
    ("fanotify_init", 262),
    ("fchmod", 52),
    ("fchmodat", 53),
    ("fchmodat2", 452),
    ("finit_module", 273),
    ("fsconfig", 431),
    ("fsmount", 432),
    ("fsopen", 430),
    ("fspick", 433),
    ("init_module", 105),
    ("io_uring_enter", 426),
    ("io_uring_register", 427),
    ("io_uring_setup", 425),
    ("ioctl", 29),
    ("kexec_file_load", 294),
    ("kexec_load", 104),
    ("keyctl", 219),
    ("memfd_create", 279),
    ("mknodat", 33),
    ("mount", 40),
    ("mount_setattr", 442),
    ("move_mount", 429),
    ("open_by_handle_at", 265),
    ("open_tree", 428),
    ("openat", 56),
    ("openat2", 437),
    ("perf_event_open", 241),
    ("personality", 92),
    ("pidfd_getfd", 438),
    ("pivot_root", 41),
    ("process_vm_readv", 270),
    ("process_vm_writev", 271),
    ("ptrace", 117),
    ("quotactl", 60),
    ("quotactl_fd", 443),
    ("reboot", 142),
    ("request_key", 218),
    ("setns", 268),
    ("settimeofday", 170),
    ("socket", 198),
    ("socketpair", 199),
    ("swapoff", 225),
    ("swapon", 224),
    ("syslog", 116),
    ("umount2", 39),
    ("unshare", 97),
    ("userfaultfd", 282),
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn tables_are_sorted_and_unique() {
        for arch in Arch::ALL {
            let t = arch.table();
            for w in t.windows(2) {
                assert!(
                    w[0].0 < w[1].0,
                    "{}: {} before {}",
                    arch.name(),
                    w[0].0,
                    w[1].0
                );
            }
            let mut nrs: Vec<u32> = t.iter().map(|(_, n)| *n).collect();
            nrs.sort_unstable();
            nrs.dedup();
            assert_eq!(
                nrs.len(),
                t.len(),
                "{}: a number appears twice",
                arch.name()
            );
        }
    }

    #[test]
    fn numbers_checked_by_hand() {
        let x = Arch::X86_64;
        for (name, nr) in [
            ("open", 2),
            ("ioctl", 16),
            ("socket", 41),
            ("clone", 56),
            ("chmod", 90),
            ("ptrace", 101),
            ("mount", 165),
            ("unshare", 272),
            ("bpf", 321),
            ("clone3", 435),
            ("fchmodat2", 452),
        ] {
            assert_eq!(x.nr(name), Some(nr), "x86_64 {name}");
        }
        let a = Arch::Aarch64;
        for (name, nr) in [
            ("ioctl", 29),
            ("mount", 40),
            ("openat", 56),
            ("personality", 92),
            ("unshare", 97),
            ("ptrace", 117),
            ("socket", 198),
            ("clone", 220),
            ("memfd_create", 279),
            ("bpf", 280),
            ("clone3", 435),
            ("fchmodat2", 452),
        ] {
            assert_eq!(a.nr(name), Some(nr), "aarch64 {name}");
        }
        for missing in ["open", "creat", "chmod", "mknod", "iopl", "ioperm"] {
            assert_eq!(a.nr(missing), None, "aarch64 has no {missing}");
            assert!(x.nr(missing).is_some());
        }
        assert_eq!(x.nr("no_such_call"), None);
    }

    #[test]
    fn audit_arch_values() {
        assert_eq!(Arch::X86_64.audit_arch(), 0xc000_003e);
        assert_eq!(Arch::Aarch64.audit_arch(), 0xc000_00b7);
    }

    /// The host's table against libc's own constants for the host.
    #[test]
    fn host_table_matches_libc() {
        let libc_nr: &[(&str, libc::c_long)] = &[
            ("ptrace", libc::SYS_ptrace),
            ("mount", libc::SYS_mount),
            ("umount2", libc::SYS_umount2),
            ("pivot_root", libc::SYS_pivot_root),
            ("unshare", libc::SYS_unshare),
            ("setns", libc::SYS_setns),
            ("clone", libc::SYS_clone),
            ("clone3", libc::SYS_clone3),
            ("ioctl", libc::SYS_ioctl),
            ("personality", libc::SYS_personality),
            ("socket", libc::SYS_socket),
            ("socketpair", libc::SYS_socketpair),
            ("openat", libc::SYS_openat),
            ("openat2", libc::SYS_openat2),
            ("fchmod", libc::SYS_fchmod),
            ("fchmodat", libc::SYS_fchmodat),
            ("mknodat", libc::SYS_mknodat),
            ("memfd_create", libc::SYS_memfd_create),
            ("bpf", libc::SYS_bpf),
            ("keyctl", libc::SYS_keyctl),
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("userfaultfd", libc::SYS_userfaultfd),
            ("perf_event_open", libc::SYS_perf_event_open),
            ("kexec_load", libc::SYS_kexec_load),
            ("syslog", libc::SYS_syslog),
            ("settimeofday", libc::SYS_settimeofday),
            ("adjtimex", libc::SYS_adjtimex),
            ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ];
        let host = Arch::host();
        for (name, nr) in libc_nr {
            assert_eq!(host.nr(name).map(i64::from), Some(*nr), "{name}");
        }
    }
}
