//! The seccomp filter of the namespace tier, kept as reviewed data.
//!
//! `DENY_TABLE` is the list of syscalls the payload may never make, one row per syscall with
//! the reason. `conditional_rules` adds the rules that look at arguments (clone flags, ioctl
//! requests, socket families and types, personality). `rules_for` (pure) turns a network mode
//! into the full rule set carried in the plan; `compile` (pure) turns it into classic BPF;
//! `install` (the only syscall here) loads it, last, just before `execve`.
//!
//! Everything not listed is allowed: this is a deny list on top of namespaces, capabilities
//! dropped to zero, `no_new_privs` and Landlock, not the only line of defence.

use serde::{Deserialize, Serialize};

use super::error::NsError;

/// What a rule applies to and what the payload gets back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeccompRule {
    /// Syscall name, for humans and reports.
    pub syscall: String,
    /// The syscall's number on the architecture the rules were made for.
    pub nr: u32,
    pub action: RuleAction,
    /// Why the rule exists (reviewed text).
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RuleAction {
    /// Always fail with this errno.
    Errno(i32),
    /// Check the arguments in order; the first check that matches decides its errno;
    /// when none matches, the call is allowed.
    Checks(Vec<ArgCheck>),
}

/// One test on the low 32 bits of a syscall argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgCheck {
    /// Argument index, 0..=5.
    pub arg: u8,
    pub test: ArgTest,
    pub errno: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ArgTest {
    /// Matches when `arg & mask != 0`.
    AnyBitOf(u32),
    /// Matches when `arg & mask == value`.
    MaskedEq { mask: u32, value: u32 },
    /// Matches when `arg` is none of these values.
    NotIn(Vec<u32>),
    /// Matches when `arg & mask` is none of these values.
    MaskedNotIn { mask: u32, values: Vec<u32> },
}

/// One syscall denied outright: its name (numbered per architecture by
/// [`super::syscalls::Arch::nr`]), the errno the payload gets, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deny {
    pub name: &'static str,
    pub errno: i32,
    pub why: &'static str,
}

impl Deny {
    const fn new(name: &'static str, errno: i32, why: &'static str) -> Deny {
        Deny { name, errno, why }
    }
}

/// Syscalls denied outright, one row per syscall, the same on every architecture (a call
/// an architecture does not have is simply not in its filter). Reviewed data: adding or
/// removing a row is a security change.
pub const DENY_TABLE: &[Deny] = &[
    // --- looking into or controlling other processes
    Deny::new(
        "ptrace",
        libc::EPERM,
        "debugging other processes reads and rewrites their memory",
    ),
    Deny::new(
        "process_vm_readv",
        libc::EPERM,
        "reads another process's memory",
    ),
    Deny::new(
        "process_vm_writev",
        libc::EPERM,
        "writes another process's memory",
    ),
    Deny::new(
        "pidfd_getfd",
        libc::EPERM,
        "steals file descriptors from another process",
    ),
    // --- the mount family: the filesystem view is fixed before the payload starts
    Deny::new("mount", libc::EPERM, "changes the filesystem view"),
    Deny::new(
        "umount2",
        libc::EPERM,
        "could uncover what the sandbox mounts hide",
    ),
    Deny::new("fsopen", libc::EPERM, "new mount API"),
    Deny::new("fsconfig", libc::EPERM, "new mount API"),
    Deny::new("fsmount", libc::EPERM, "new mount API"),
    Deny::new(
        "fspick",
        libc::EPERM,
        "new mount API: reconfigures an existing mount",
    ),
    Deny::new("move_mount", libc::EPERM, "new mount API"),
    Deny::new(
        "open_tree",
        libc::EPERM,
        "new mount API: clones mount trees",
    ),
    Deny::new(
        "mount_setattr",
        libc::EPERM,
        "changes mount flags such as read-only",
    ),
    Deny::new("pivot_root", libc::EPERM, "changes the root filesystem"),
    Deny::new("chroot", libc::EPERM, "changes the root directory"),
    Deny::new(
        "open_by_handle_at",
        libc::EPERM,
        "opens files by handle, bypassing path checks (the `shocker` escape)",
    ),
    // --- namespaces: no new ones, no joining others
    Deny::new(
        "unshare",
        libc::EPERM,
        "creates namespaces; nested user namespaces widen the kernel attack surface",
    ),
    Deny::new("setns", libc::EPERM, "joins other namespaces"),
    // --- large kernel attack surfaces the payload does not need
    Deny::new("bpf", libc::EPERM, "eBPF programs and maps"),
    Deny::new(
        "perf_event_open",
        libc::EPERM,
        "performance counters: side channels and a history of kernel bugs",
    ),
    Deny::new(
        "userfaultfd",
        libc::EPERM,
        "lets an exploit pause the kernel at a chosen page fault",
    ),
    Deny::new(
        "io_uring_setup",
        libc::EPERM,
        "io_uring bypasses per-syscall filtering",
    ),
    Deny::new(
        "io_uring_enter",
        libc::EPERM,
        "io_uring bypasses per-syscall filtering",
    ),
    Deny::new(
        "io_uring_register",
        libc::EPERM,
        "io_uring bypasses per-syscall filtering",
    ),
    Deny::new("add_key", libc::EPERM, "kernel keyrings are not namespaced"),
    Deny::new(
        "request_key",
        libc::EPERM,
        "kernel keyrings are not namespaced",
    ),
    Deny::new("keyctl", libc::EPERM, "kernel keyrings are not namespaced"),
    Deny::new(
        "fanotify_init",
        libc::EPERM,
        "filesystem-wide event monitoring",
    ),
    // --- the kernel and the machine itself
    Deny::new("kexec_load", libc::EPERM, "loads a new kernel"),
    Deny::new("kexec_file_load", libc::EPERM, "loads a new kernel"),
    Deny::new("init_module", libc::EPERM, "loads a kernel module"),
    Deny::new("finit_module", libc::EPERM, "loads a kernel module"),
    Deny::new("delete_module", libc::EPERM, "unloads a kernel module"),
    Deny::new("reboot", libc::EPERM, "reboots the machine"),
    Deny::new(
        "syslog",
        libc::EPERM,
        "reads the kernel log (addresses, other tenants' messages)",
    ),
    Deny::new("acct", libc::EPERM, "process accounting is host-wide"),
    Deny::new("swapon", libc::EPERM, "host-wide swap"),
    Deny::new("swapoff", libc::EPERM, "host-wide swap"),
    Deny::new("quotactl", libc::EPERM, "filesystem quotas are host-wide"),
    Deny::new(
        "quotactl_fd",
        libc::EPERM,
        "filesystem quotas are host-wide",
    ),
    Deny::new("iopl", libc::EPERM, "raw I/O port access"),
    Deny::new("ioperm", libc::EPERM, "raw I/O port access"),
    // --- the clock is host-wide (no time namespace is used)
    Deny::new("settimeofday", libc::EPERM, "sets the host clock"),
    Deny::new("clock_settime", libc::EPERM, "sets the host clock"),
    Deny::new("clock_adjtime", libc::EPERM, "adjusts the host clock"),
    Deny::new("adjtimex", libc::EPERM, "adjusts the host clock"),
    // --- clone3 passes flags in memory, where seccomp cannot look: ENOSYS makes libc
    //     fall back to clone, whose flags are checked below
    Deny::new(
        "clone3",
        libc::ENOSYS,
        "flags live in memory seccomp cannot inspect; libc falls back to clone",
    ),
];

/// Namespace flags that `clone` may not carry.
pub const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// `socket(2)` type bits (the rest are SOCK_NONBLOCK / SOCK_CLOEXEC).
const SOCK_TYPE_MASK: u32 = 0xf;
/// The obsolete `SOCK_PACKET` type (libc deprecates the constant).
const SOCK_PACKET: u32 = 10;

/// The network modes seccomp knows how to express.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketPolicy {
    /// Only AF_UNIX sockets (no network).
    UnixOnly,
    /// No network and no `socket()` of any family, AF_UNIX included; `socketpair` of
    /// AF_UNIX stream or seqpacket sockets (an anonymous connected pair) still works. For a
    /// sandbox with host directories bound in (mounts, an input directory): a Unix socket
    /// of a host daemon in one of them (a Docker or ssh-agent socket, journald's datagram
    /// socket) would be a way out that no network setting closes. A datagram pair is
    /// refused too: it can `sendto` any socket path.
    PairsOnly,
    /// AF_INET and AF_INET6 only (network through the namespace's interfaces), for the
    /// same sandbox with network: no AF_UNIX `socket()`, pairs as in [`PairsOnly`].
    InetNoUnix,
    /// AF_UNIX, AF_INET and AF_INET6 (network through the namespace's interfaces).
    Inet,
}

/// The rule for `syscall` on `arch`; `None` when `arch` has no such call.
fn rule(arch: Arch, syscall: &str, action: RuleAction, why: &str) -> Option<SeccompRule> {
    Some(SeccompRule {
        syscall: syscall.to_string(),
        nr: arch.nr(syscall)?,
        action,
        why: why.to_string(),
    })
}

/// `memfd_create`'s flag that makes the file non-executable for good (Linux 6.3+).
pub const MFD_NOEXEC_SEAL: u32 = 0x0008;

/// Where the sandbox cannot make `vm.memfd_noexec = 2` hold (the landlock tier shares the
/// host's pid namespace; kernels before 6.3 have no such sysctl), code written into an
/// anonymous memory file could be executed although every writable mount is noexec. So
/// `memfd_create` must ask for `MFD_NOEXEC_SEAL`, or fails with ENOSYS (libraries take their
/// fallbacks). A kernel without the seal refuses the flag (EINVAL): no memfd at all there.
pub fn memfd_rule() -> SeccompRule {
    memfd_rule_for(Arch::host())
}

/// [`memfd_rule`] for `arch` (`memfd_create` exists on every architecture with a table).
pub fn memfd_rule_for(arch: Arch) -> SeccompRule {
    let action = RuleAction::Checks(vec![ArgCheck {
        arg: 1,
        test: ArgTest::MaskedEq {
            mask: MFD_NOEXEC_SEAL,
            value: 0,
        },
        errno: libc::ENOSYS,
    }]);
    let why = "an executable memory file runs code that never touched a noexec mount";
    SeccompRule {
        syscall: "memfd_create".to_string(),
        nr: arch.nr("memfd_create").unwrap_or(u32::MAX),
        action,
        why: why.to_string(),
    }
}

/// Whether this kernel has `vm.memfd_noexec` and `MFD_NOEXEC_SEAL` (Linux 6.3+).
pub fn kernel_has_memfd_noexec() -> bool {
    std::path::Path::new(MEMFD_NOEXEC_SYSCTL).exists()
}

/// The sysctl that, set to 2 in a pid namespace, makes every memfd of that namespace
/// non-executable (`MFD_EXEC` refused, no flag means `MFD_NOEXEC_SEAL`).
pub const MEMFD_NOEXEC_SYSCTL: &str = "/proc/sys/vm/memfd_noexec";

/// Rules that look at arguments.
fn conditional_rules(arch: Arch, sockets: SocketPolicy) -> Vec<SeccompRule> {
    let families: Vec<u32> = match sockets {
        SocketPolicy::UnixOnly => vec![libc::AF_UNIX as u32],
        SocketPolicy::PairsOnly => Vec::new(),
        SocketPolicy::InetNoUnix => vec![libc::AF_INET as u32, libc::AF_INET6 as u32],
        SocketPolicy::Inet => vec![
            libc::AF_UNIX as u32,
            libc::AF_INET as u32,
            libc::AF_INET6 as u32,
        ],
    };
    // A connected pair is reachable from nowhere: AF_UNIX pairs stay in every mode, but
    // where host sockets may be bound in only stream and seqpacket ones (a datagram
    // socket can send to any path).
    let host_dirs = matches!(sockets, SocketPolicy::PairsOnly | SocketPolicy::InetNoUnix);
    let pair_families: Vec<u32> = if host_dirs {
        vec![libc::AF_UNIX as u32]
    } else {
        families.clone()
    };
    let family_check = |families: Vec<u32>| ArgCheck {
        arg: 0,
        test: ArgTest::NotIn(families),
        errno: libc::EAFNOSUPPORT,
    };
    let socket_checks = vec![
        // Families beyond the network mode (netlink, packet, vsock, bluetooth, ...).
        family_check(families.clone()),
        // Raw sockets craft arbitrary packets.
        ArgCheck {
            arg: 1,
            test: ArgTest::MaskedEq {
                mask: SOCK_TYPE_MASK,
                value: libc::SOCK_RAW as u32,
            },
            errno: libc::EPERM,
        },
        // SOCK_PACKET (10) is the obsolete raw link-layer type.
        ArgCheck {
            arg: 1,
            test: ArgTest::MaskedEq {
                mask: SOCK_TYPE_MASK,
                value: SOCK_PACKET,
            },
            errno: libc::EPERM,
        },
    ];
    vec![
        rule(
            arch,
            "clone",
            RuleAction::Checks(vec![ArgCheck {
                arg: 0,
                test: ArgTest::AnyBitOf(CLONE_NAMESPACE_FLAGS),
                errno: libc::EPERM,
            }]),
            "threads and processes yes, new namespaces no",
        ),
        rule(
            arch,
            "ioctl",
            RuleAction::Checks(vec![
                ArgCheck {
                    arg: 1,
                    test: ArgTest::MaskedEq {
                        mask: u32::MAX,
                        value: libc::TIOCSTI as u32,
                    },
                    errno: libc::EPERM,
                },
                ArgCheck {
                    arg: 1,
                    test: ArgTest::MaskedEq {
                        mask: u32::MAX,
                        value: libc::TIOCLINUX as u32,
                    },
                    errno: libc::EPERM,
                },
            ]),
            "TIOCSTI and TIOCLINUX inject input into a terminal shared with the host",
        ),
        rule(
            arch,
            "personality",
            RuleAction::Checks(vec![ArgCheck {
                arg: 0,
                // 0 = PER_LINUX (the default), 0xffffffff = query only.
                test: ArgTest::NotIn(vec![0, u32::MAX]),
                errno: libc::EPERM,
            }]),
            "other personas disable ASLR or change the syscall ABI",
        ),
        rule(
            arch,
            "socket",
            RuleAction::Checks(socket_checks.clone()),
            "socket families and types follow the network mode",
        ),
        rule(
            arch,
            "socketpair",
            RuleAction::Checks(
                std::iter::once(family_check(pair_families))
                    .chain(socket_checks.into_iter().skip(1))
                    .chain(host_dirs.then_some(ArgCheck {
                        arg: 1,
                        test: ArgTest::MaskedNotIn {
                            mask: SOCK_TYPE_MASK,
                            values: vec![libc::SOCK_STREAM as u32, libc::SOCK_SEQPACKET as u32],
                        },
                        errno: libc::EPERM,
                    }))
                    .collect(),
            ),
            "same as socket, but an AF_UNIX pair is always allowed (with host directories \
             bound in, a stream or seqpacket pair only)",
        ),
    ]
    .into_iter()
    .chain(SET_ID_BIT_CALLS.iter().map(|(name, arg)| {
        rule(
            arch,
            name,
            RuleAction::Checks(vec![ArgCheck {
                arg: *arg,
                test: ArgTest::AnyBitOf(SET_ID_BITS),
                errno: libc::EPERM,
            }]),
            "no setuid or setgid bit on a file: mounts inside are nosuid, but a file left \
             in a read-write mount keeps its bits on the host",
        )
    }))
    .chain(std::iter::once(rule(
        arch,
        "openat2",
        RuleAction::Errno(libc::ENOSYS),
        "its mode sits in a struct a filter cannot read (setuid bits); libraries fall back \
         to openat",
    )))
    .flatten()
    .collect()
}

/// `S_ISUID | S_ISGID`.
const SET_ID_BITS: u32 = 0o6000;

/// Calls that set a file's mode, with the index of their mode argument (the same on
/// every architecture that has the call).
const SET_ID_BIT_CALLS: &[(&str, u8)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
];

/// The full rule set for a network mode on the host's architecture (pure).
pub fn rules_for(sockets: SocketPolicy) -> Vec<SeccompRule> {
    rules_for_arch(Arch::host(), sockets)
}

/// The full rule set for a network mode on `arch` (pure): every row of [`DENY_TABLE`] and
/// every conditional rule whose syscall `arch` has.
pub fn rules_for_arch(arch: Arch, sockets: SocketPolicy) -> Vec<SeccompRule> {
    let mut rules: Vec<SeccompRule> = DENY_TABLE
        .iter()
        .filter_map(|d| rule(arch, d.name, RuleAction::Errno(d.errno), d.why))
        .collect();
    rules.extend(conditional_rules(arch, sockets));
    rules
}

// ---- classic BPF ------------------------------------------------------------------------

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// `struct seccomp_data` offsets.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARGS: u32 = 16;

pub use super::syscalls::{Arch, AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64};
/// Syscall numbers at or above this are the x32 ABI, which shares the x86_64 arch value.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn ret_errno(errno: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (u32::try_from(errno).unwrap_or(1) & libc::SECCOMP_RET_DATA)
}

fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Result<SockFilter, NsError> {
    let jt = u8::try_from(jt).map_err(|_| NsError::SeccompCompile {
        why: "a jump is longer than 255 instructions",
    })?;
    let jf = u8::try_from(jf).map_err(|_| NsError::SeccompCompile {
        why: "a jump is longer than 255 instructions",
    })?;
    Ok(SockFilter { code, jt, jf, k })
}

/// Instructions that evaluate one rule's checks, assuming the syscall number matched.
/// Ends with `ret` on every path.
fn compile_checks(checks: &[ArgCheck]) -> Result<Vec<SockFilter>, NsError> {
    let mut out = Vec::new();
    for c in checks {
        if c.arg > 5 {
            return Err(NsError::SeccompCompile {
                why: "argument index above 5",
            });
        }
        let off = OFF_ARGS + u32::from(c.arg) * 8; // low 32 bits on little-endian
        out.push(stmt(BPF_LD_W_ABS, off));
        match &c.test {
            ArgTest::AnyBitOf(mask) => {
                // match -> next (ret errno); no match -> skip it
                out.push(jump(BPF_JSET_K, *mask, 0, 1)?);
                out.push(stmt(BPF_RET_K, ret_errno(c.errno)));
            }
            ArgTest::MaskedEq { mask, value } => {
                out.push(stmt(BPF_AND_K, *mask));
                out.push(jump(BPF_JEQ_K, *value, 0, 1)?);
                out.push(stmt(BPF_RET_K, ret_errno(c.errno)));
            }
            ArgTest::NotIn(values) => {
                // each jeq: equal -> jump past the ret errno to the next check
                let n = values.len();
                for (i, v) in values.iter().enumerate() {
                    let remaining = n - i - 1; // jeq's still after this one
                    out.push(jump(BPF_JEQ_K, *v, remaining + 1, 0)?);
                }
                out.push(stmt(BPF_RET_K, ret_errno(c.errno)));
            }
            ArgTest::MaskedNotIn { mask, values } => {
                out.push(stmt(BPF_AND_K, *mask));
                let n = values.len();
                for (i, v) in values.iter().enumerate() {
                    let remaining = n - i - 1;
                    out.push(jump(BPF_JEQ_K, *v, remaining + 1, 0)?);
                }
                out.push(stmt(BPF_RET_K, ret_errno(c.errno)));
            }
        }
    }
    out.push(stmt(BPF_RET_K, RET_ALLOW));
    Ok(out)
}

/// Compiles a rule set of the host's architecture into a BPF program (pure).
pub fn compile(rules: &[SeccompRule]) -> Result<Vec<SockFilter>, NsError> {
    compile_for(Arch::host(), rules)
}

/// Compiles a rule set made for `arch` into a BPF program (pure).
///
/// Layout: architecture check (kill the process on any other `seccomp_data.arch`: a
/// 32-bit compat call would be numbered differently), on x86_64 the x32 check (ENOSYS),
/// then one block per rule, then allow.
pub fn compile_for(arch: Arch, rules: &[SeccompRule]) -> Result<Vec<SockFilter>, NsError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut prog = vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, arch.audit_arch(), 1, 0)?,
        stmt(BPF_RET_K, RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ];
    if arch == Arch::X86_64 {
        prog.push(jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1)?);
        prog.push(stmt(BPF_RET_K, ret_errno(libc::ENOSYS)));
    }
    for r in rules {
        if !seen.insert(r.nr) {
            return Err(NsError::SeccompCompile {
                why: "a syscall appears in two rules",
            });
        }
        let body = match &r.action {
            RuleAction::Errno(e) => vec![stmt(BPF_RET_K, ret_errno(*e))],
            RuleAction::Checks(checks) => compile_checks(checks)?,
        };
        // The accumulator holds the syscall number here: every block either returns or
        // is skipped without touching it.
        prog.push(jump(BPF_JEQ_K, r.nr, 0, body.len())?);
        prog.extend(body);
    }
    prog.push(stmt(BPF_RET_K, RET_ALLOW));
    if prog.len() > usize::from(u16::MAX) || prog.len() > 4096 {
        return Err(NsError::SeccompCompile {
            why: "the program is longer than the kernel accepts",
        });
    }
    Ok(prog)
}

/// Installs a compiled filter on the calling thread. `no_new_privs` must already be set.
/// Does not allocate, so it is safe between fork and exec.
pub fn install(prog: &[SockFilter]) -> Result<(), i32> {
    crate::sys::seccomp::set_mode_filter(prog)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn every_listed_syscall_has_a_reason_and_a_unique_number() {
        for arch in Arch::ALL {
            let mut nrs = std::collections::BTreeSet::new();
            for d in DENY_TABLE {
                assert!(!d.why.is_empty(), "{} has no reason", d.name);
                assert!(
                    d.errno == libc::EPERM || d.errno == libc::ENOSYS,
                    "{}",
                    d.name
                );
                if let Some(nr) = arch.nr(d.name) {
                    assert!(nrs.insert(nr), "{} listed twice", d.name);
                }
            }
        }
    }

    #[test]
    fn rule_set_contains_the_required_denials() {
        let rules = rules_for(SocketPolicy::UnixOnly);
        let names: Vec<&str> = rules.iter().map(|r| r.syscall.as_str()).collect();
        for required in [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "fsopen",
            "fsmount",
            "fsconfig",
            "move_mount",
            "open_tree",
            "fspick",
            "mount_setattr",
            "pivot_root",
            "chroot",
            "bpf",
            "perf_event_open",
            "add_key",
            "request_key",
            "keyctl",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "userfaultfd",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "unshare",
            "setns",
            "personality",
            "clone",
            "clone3",
            "ioctl",
            "syslog",
            "acct",
            "swapon",
            "swapoff",
            "reboot",
            "settimeofday",
            "clock_settime",
            "socket",
        ] {
            assert!(names.contains(&required), "{required} missing");
        }
        let clone3 = rules.iter().find(|r| r.syscall == "clone3").unwrap();
        assert_eq!(clone3.action, RuleAction::Errno(libc::ENOSYS));
    }

    #[test]
    fn socket_families_follow_the_network_mode() {
        let fams = |p| {
            rules_for(p)
                .into_iter()
                .find(|r| r.syscall == "socket")
                .map(|r| match r.action {
                    RuleAction::Checks(c) => c[0].test.clone(),
                    RuleAction::Errno(_) => panic!("socket must be conditional"),
                })
                .unwrap()
        };
        assert_eq!(fams(SocketPolicy::UnixOnly), ArgTest::NotIn(vec![1]));
        assert_eq!(fams(SocketPolicy::Inet), ArgTest::NotIn(vec![1, 2, 10]));
    }

    #[test]
    fn program_starts_with_the_architecture_check() {
        let prog = compile(&rules_for(SocketPolicy::UnixOnly)).unwrap();
        assert_eq!(prog[0], stmt(BPF_LD_W_ABS, OFF_ARCH));
        assert_eq!(prog[1].k, Arch::host().audit_arch());
        assert_eq!(prog[2], stmt(BPF_RET_K, RET_KILL_PROCESS));
        assert_eq!(prog.last().copied(), Some(stmt(BPF_RET_K, RET_ALLOW)));
    }

    /// Runs `nr(args)` in a forked child, optionally under `prog`; returns 0 on success
    /// or the errno. The child only makes raw syscalls (no allocation after fork).
    fn probe(prog: Option<&[SockFilter]>, nr: i64, a: [u64; 6]) -> i32 {
        crate::sys::seccomp::syscall_in_child(prog, nr, a)
    }

    /// Harmless arguments for each rule: invalid pointers, fds and flags, so that without
    /// the filter the kernel fails the call with a different errno (or succeeds harmlessly).
    fn harmless_args(name: &str) -> [u64; 6] {
        let m = u64::MAX;
        match name {
            "clone" => [(libc::CLONE_NEWUSER | libc::CLONE_FS) as u64, 0, 0, 0, 0, 0],
            "personality" => [8, 0, 0, 0, 0, 0], // PER_LINUX32
            "ioctl" => [m, libc::TIOCSTI, 0, 0, 0, 0],
            "socket" | "socketpair" => [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, m, 0, 0],
            "init_module" => [m, 0, m, 0, 0, 0],
            _ => [m; 6],
        }
    }

    #[test]
    fn every_rule_fires_and_the_kernel_alone_would_answer_differently() {
        let rules = rules_for(SocketPolicy::UnixOnly);
        let prog = compile(&rules).unwrap();
        for r in &rules {
            let expected = match &r.action {
                RuleAction::Errno(e) => *e,
                RuleAction::Checks(c) => c[0].errno,
            };
            let args = harmless_args(&r.syscall);
            let got = probe(Some(&prog), i64::from(r.nr), args);
            assert_eq!(got, expected, "rule `{}` did not fire", r.syscall);
            let control = probe(None, i64::from(r.nr), args);
            assert_ne!(
                control, expected,
                "`{}`: the kernel gives the same answer unfiltered",
                r.syscall
            );
        }
    }

    #[test]
    fn memfd_rule_requires_the_noexec_seal() {
        let mut rules = rules_for(SocketPolicy::UnixOnly);
        rules.push(memfd_rule());
        let prog = compile(&rules).unwrap();
        let call = |flags: u32| [0u64, u64::from(flags), 0, 0, 0, 0];
        let nr = libc::SYS_memfd_create;
        assert_eq!(probe(Some(&prog), nr, call(0)), libc::ENOSYS);
        assert_eq!(probe(Some(&prog), nr, call(1)), libc::ENOSYS); // MFD_CLOEXEC only
        assert_eq!(probe(Some(&prog), nr, call(0x10)), libc::ENOSYS); // MFD_EXEC
                                                                      // Let through to the kernel, which then fails on the NULL name (not ENOSYS).
        assert_eq!(
            probe(Some(&prog), nr, call(MFD_NOEXEC_SEAL | 1)),
            libc::EFAULT
        );
    }

    #[test]
    fn conditional_rules_let_the_allowed_cases_through() {
        let prog = compile(&rules_for(SocketPolicy::UnixOnly)).unwrap();
        let sock = |d: i32, t: i32| [d as u64, t as u64, 0, 0, 0, 0];
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_UNIX, libc::SOCK_STREAM)
            ),
            0
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC)
            ),
            0
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_UNIX, libc::SOCK_RAW)
            ),
            libc::EPERM
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_INET6, libc::SOCK_DGRAM)
            ),
            libc::EAFNOSUPPORT
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_NETLINK, libc::SOCK_RAW)
            ),
            libc::EAFNOSUPPORT
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_socket,
                sock(libc::AF_PACKET, libc::SOCK_RAW)
            ),
            libc::EAFNOSUPPORT
        );
        // personality query and default persona are allowed
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_personality,
                [u64::from(u32::MAX), 0, 0, 0, 0, 0]
            ),
            0
        );
        assert_eq!(probe(Some(&prog), libc::SYS_personality, [0; 6]), 0);
        // other ioctls reach the kernel (EBADF for fd -1)
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_ioctl,
                [u64::MAX, libc::TCGETS, 0, 0, 0, 0]
            ),
            libc::EBADF
        );
        assert_eq!(
            probe(
                Some(&prog),
                libc::SYS_ioctl,
                [u64::MAX, libc::TIOCLINUX, 0, 0, 0, 0]
            ),
            libc::EPERM
        );
        // x32 syscalls are refused
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            probe(Some(&prog), 0x4000_0000 | libc::SYS_getpid, [0; 6]),
            libc::ENOSYS
        );

        let inet = compile(&rules_for(SocketPolicy::Inet)).unwrap();
        assert_eq!(
            probe(
                Some(&inet),
                libc::SYS_socket,
                sock(libc::AF_INET, libc::SOCK_STREAM)
            ),
            0
        );
        assert_eq!(
            probe(
                Some(&inet),
                libc::SYS_socket,
                sock(libc::AF_INET6, libc::SOCK_DGRAM)
            ),
            0
        );
        assert_eq!(
            probe(
                Some(&inet),
                libc::SYS_socket,
                sock(libc::AF_INET, libc::SOCK_RAW)
            ),
            libc::EPERM
        );
        assert_eq!(
            probe(
                Some(&inet),
                libc::SYS_socket,
                sock(libc::AF_PACKET, libc::SOCK_DGRAM)
            ),
            libc::EAFNOSUPPORT
        );

        // Host directories bound in: no AF_UNIX socket(), and only stream or seqpacket
        // pairs (a datagram pair could send to any socket path).
        for policy in [SocketPolicy::PairsOnly, SocketPolicy::InetNoUnix] {
            let p = compile(&rules_for(policy)).unwrap();
            assert_eq!(
                probe(
                    Some(&p),
                    libc::SYS_socket,
                    sock(libc::AF_UNIX, libc::SOCK_STREAM)
                ),
                libc::EAFNOSUPPORT,
                "{policy:?}"
            );
            for (ty, want) in [
                (libc::SOCK_STREAM, 0),
                (libc::SOCK_SEQPACKET, 0),
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::EPERM),
            ] {
                // A pair's fds land at an invalid address: EFAULT once the filter lets it by.
                let got = probe(Some(&p), libc::SYS_socketpair, sock(libc::AF_UNIX, ty));
                if want == 0 {
                    assert_ne!(got, libc::EPERM, "{policy:?} type {ty}");
                    assert_ne!(got, libc::EAFNOSUPPORT, "{policy:?} type {ty}");
                } else {
                    assert_eq!(got, want, "{policy:?} type {ty}");
                }
            }
        }
        let p = compile(&rules_for(SocketPolicy::InetNoUnix)).unwrap();
        assert_eq!(
            probe(
                Some(&p),
                libc::SYS_socket,
                sock(libc::AF_INET, libc::SOCK_STREAM)
            ),
            0
        );
    }

    /// The calls aarch64 does not have (its libc uses the `*at` forms), so its filter
    /// cannot and need not name them.
    const NOT_ON_AARCH64: [&str; 6] = ["chmod", "creat", "iopl", "ioperm", "mknod", "open"];

    #[test]
    fn no_syscall_denied_on_one_architecture_is_allowed_on_the_other() {
        for sockets in [SocketPolicy::UnixOnly, SocketPolicy::Inet] {
            let x = rules_for_arch(Arch::X86_64, sockets);
            let a = rules_for_arch(Arch::Aarch64, sockets);
            let find = |rules: &[SeccompRule], name: &str| {
                rules.iter().find(|r| r.syscall == name).cloned()
            };
            for r in &x {
                match find(&a, &r.syscall) {
                    Some(other) => assert_eq!(other.action, r.action, "{}", r.syscall),
                    None => assert!(
                        NOT_ON_AARCH64.contains(&r.syscall.as_str())
                            && Arch::Aarch64.nr(&r.syscall).is_none(),
                        "`{}` is denied on x86_64 but allowed on aarch64",
                        r.syscall
                    ),
                }
            }
            for r in &a {
                let other = find(&x, &r.syscall);
                assert!(
                    other.is_some_and(|o| o.action == r.action),
                    "`{}` is denied on aarch64 but not the same way on x86_64",
                    r.syscall
                );
            }
            assert_eq!(x.len(), a.len() + NOT_ON_AARCH64.len());
        }
    }

    #[test]
    fn each_rule_set_carries_its_architectures_numbers() {
        for arch in Arch::ALL {
            let rules = rules_for_arch(arch, SocketPolicy::UnixOnly);
            for r in &rules {
                assert_eq!(
                    Some(r.nr),
                    arch.nr(&r.syscall),
                    "{} {}",
                    arch.name(),
                    r.syscall
                );
            }
            let memfd = memfd_rule_for(arch);
            assert_eq!(Some(memfd.nr), arch.nr("memfd_create"));
        }
        let nr = |arch: Arch, name: &str| {
            rules_for_arch(arch, SocketPolicy::UnixOnly)
                .into_iter()
                .find(|r| r.syscall == name)
                .map(|r| r.nr)
        };
        assert_eq!(nr(Arch::X86_64, "mount"), Some(165));
        assert_eq!(nr(Arch::Aarch64, "mount"), Some(40));
        assert_eq!(nr(Arch::X86_64, "clone"), Some(56));
        assert_eq!(nr(Arch::Aarch64, "clone"), Some(220));
        assert_eq!(nr(Arch::Aarch64, "fchmodat2"), Some(452));
    }

    #[test]
    fn each_architecture_compiles_with_its_own_arch_check() {
        for arch in Arch::ALL {
            let mut rules = rules_for_arch(arch, SocketPolicy::UnixOnly);
            rules.push(memfd_rule_for(arch));
            let prog = compile_for(arch, &rules).unwrap();
            assert_eq!(prog[1].k, arch.audit_arch());
            assert_eq!(prog[2], stmt(BPF_RET_K, RET_KILL_PROCESS));
            let x32 = prog
                .iter()
                .any(|i| i.code == BPF_JGE_K && i.k == X32_SYSCALL_BIT);
            assert_eq!(x32, arch == Arch::X86_64, "{}", arch.name());
            // `mount` is refused with EPERM under the architecture's own number.
            let mount = arch.nr("mount").unwrap();
            let at = prog
                .iter()
                .position(|i| i.code == BPF_JEQ_K && i.k == mount && i.jf == 1)
                .unwrap();
            assert_eq!(prog[at + 1], stmt(BPF_RET_K, ret_errno(libc::EPERM)));
        }
        assert_ne!(
            compile_for(
                Arch::X86_64,
                &rules_for_arch(Arch::X86_64, SocketPolicy::Inet)
            )
            .unwrap(),
            compile_for(
                Arch::Aarch64,
                &rules_for_arch(Arch::Aarch64, SocketPolicy::Inet)
            )
            .unwrap()
        );
    }

    #[test]
    fn duplicate_rules_are_rejected() {
        let mut rules = rules_for(SocketPolicy::UnixOnly);
        rules.push(rules[0].clone());
        assert!(compile(&rules).is_err());
    }
}
