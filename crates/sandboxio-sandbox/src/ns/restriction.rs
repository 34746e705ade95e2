//! Why a host refuses the namespace tier, and the exact fix: the diagnosis is pure (facts
//! in, [`Restriction`] out, unit-tested); [`HostFacts::read`] is the only I/O.
//!
//! A user namespace can be refused by a sysctl (`user.max_user_namespaces = 0`, Debian's
//! `kernel.unprivileged_userns_clone = 0`), by Ubuntu's AppArmor restriction
//! (`kernel.apparmor_restrict_unprivileged_userns = 1`: the namespace is created but holds
//! no capabilities, so the first mount fails), or by a container (Docker's default seccomp
//! profile refuses `unshare`/`clone` with `CLONE_NEWUSER` unless the container has
//! `CAP_SYS_ADMIN`; a masked `/proc` makes mounting a new one fail).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The config key that allows the weaker tier on such hosts.
pub const FALLBACK_KEY: &str = "[sandbox] allow_landlock_fallback";

/// Where the refusal was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// `unshare(CLONE_NEWUSER)` or `clone(CLONE_NEWUSER | ...)`.
    CreateUserNamespace,
    /// The first mount (or id map) inside a user namespace that was created.
    UseUserNamespace,
    /// Mounting a fresh `/proc` for the sandbox's pid namespace.
    MountProc,
    /// Installing the payload's seccomp filter.
    InstallSeccomp,
}

/// One reason this host refuses the namespace tier. Each has its own code and fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restriction {
    /// `user.max_user_namespaces` is 0: nobody, root included, may create one.
    UsernsDisabled,
    /// `kernel.unprivileged_userns_clone` is 0 (Debian and older Ubuntu kernels).
    UnprivilegedUsernsOff,
    /// `kernel.apparmor_restrict_unprivileged_userns` is 1 (Ubuntu 23.10+).
    AppArmor,
    /// Refused with no sysctl to blame: a container's seccomp profile or missing
    /// `CAP_SYS_ADMIN` (Docker's default), or another security module.
    Container,
    /// A fresh `/proc` cannot be mounted: `/proc` is partly masked (a container's default).
    MaskedProc,
    /// Seccomp filters cannot be installed (kernel without `CONFIG_SECCOMP_FILTER`, or a
    /// container that refuses `seccomp()`). Every tier but `process` needs them.
    NoSeccomp,
}

impl Restriction {
    /// Stable error code.
    pub fn code(self) -> &'static str {
        match self {
            Restriction::UsernsDisabled => "SBX_E1490",
            Restriction::UnprivilegedUsernsOff => "SBX_E1491",
            Restriction::AppArmor => "SBX_E1492",
            Restriction::Container => "SBX_E1493",
            Restriction::MaskedProc => "SBX_E1494",
            Restriction::NoSeccomp => "SBX_E1495",
        }
    }

    /// The restriction a code stands for (errors come back from the helper as codes).
    pub fn from_code(code: &str) -> Option<Restriction> {
        [
            Restriction::UsernsDisabled,
            Restriction::UnprivilegedUsernsOff,
            Restriction::AppArmor,
            Restriction::Container,
            Restriction::MaskedProc,
            Restriction::NoSeccomp,
        ]
        .into_iter()
        .find(|r| r.code() == code)
    }

    /// What is wrong, in words.
    pub fn why(self) -> &'static str {
        match self {
            Restriction::UsernsDisabled => {
                "user namespaces are disabled on this host (`user.max_user_namespaces` is 0)"
            }
            Restriction::UnprivilegedUsernsOff => {
                "unprivileged user namespaces are disabled on this host \
                 (`kernel.unprivileged_userns_clone` is 0)"
            }
            Restriction::AppArmor => {
                "AppArmor restricts unprivileged user namespaces on this host \
                 (`kernel.apparmor_restrict_unprivileged_userns` is 1)"
            }
            Restriction::Container => {
                "creating a user namespace is refused, though no sysctl forbids it: \
                 most likely a container's seccomp profile without CAP_SYS_ADMIN"
            }
            Restriction::MaskedProc => {
                "a fresh /proc cannot be mounted: this host's /proc is partly masked \
                 (a container's default)"
            }
            Restriction::NoSeccomp => {
                "seccomp filters cannot be installed here (a kernel without \
                 CONFIG_SECCOMP_FILTER, or a container that refuses seccomp())"
            }
        }
    }

    /// The exact change that lets the namespace tier run.
    pub fn fix(self) -> &'static str {
        match self {
            Restriction::UsernsDisabled => {
                "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)"
            }
            Restriction::UnprivilegedUsernsOff => {
                "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)"
            }
            Restriction::AppArmor => {
                "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or install an \
                 AppArmor profile for the sandboxio binary with `userns,`"
            }
            Restriction::Container => {
                "run the container with a seccomp profile that allows unshare and clone with \
                 CLONE_NEWUSER (docker run --security-opt seccomp=<profile>), or run sandboxio \
                 on the host"
            }
            Restriction::MaskedProc => {
                "give the container an unmasked /proc (docker run --security-opt \
                 systempaths=unconfined), or run sandboxio on the host"
            }
            Restriction::NoSeccomp => {
                "use a kernel built with CONFIG_SECCOMP_FILTER=y; in a container, allow the \
                 seccomp syscall in its seccomp profile"
            }
        }
    }

    /// Whether the landlock tier could run where this refuses the namespace tier (it needs
    /// seccomp too).
    pub fn landlock_may_help(self) -> bool {
        self != Restriction::NoSeccomp
    }

    /// The full message: why, fix, and (where it would help) the fallback key.
    pub fn message(self) -> String {
        if !self.landlock_may_help() {
            return format!(
                "no sandbox tier but `process` can run here: {}; fix: {}",
                self.why(),
                self.fix()
            );
        }
        format!(
            "the namespace tier cannot run here: {}; fix: {}; or set `{FALLBACK_KEY} = true` \
             to use the weaker landlock tier on this host",
            self.why(),
            self.fix()
        )
    }
}

impl fmt::Display for Restriction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// The host settings that explain a refusal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Effective uid of the process that tried.
    pub euid: u32,
    /// `user.max_user_namespaces`.
    pub max_user_namespaces: Option<u64>,
    /// `kernel.unprivileged_userns_clone` (only on kernels that have it).
    pub unprivileged_userns_clone: Option<u64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (only with AppArmor that has it).
    pub apparmor_restrict: Option<u64>,
}

fn read_sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl HostFacts {
    /// Read the sysctls of the calling process's namespaces.
    pub fn read() -> HostFacts {
        HostFacts {
            euid: crate::sys::proc::geteuid(),
            max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restrict: read_sysctl(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
        }
    }
}

/// Why `step` failed with `errno` on a host with `facts`; `None` when the failure is not a
/// host restriction (e.g. ENOMEM), so the caller reports it as it is (pure).
pub fn diagnose(step: Step, errno: i32, facts: &HostFacts) -> Option<Restriction> {
    if step == Step::InstallSeccomp {
        return matches!(
            errno,
            libc::EINVAL | libc::ENOSYS | libc::EACCES | libc::EPERM
        )
        .then_some(Restriction::NoSeccomp);
    }
    let refused = matches!(
        errno,
        libc::EPERM | libc::EACCES | libc::ENOSPC | libc::EUSERS
    );
    if !refused {
        return None;
    }
    if facts.max_user_namespaces == Some(0) && step == Step::CreateUserNamespace {
        return Some(Restriction::UsernsDisabled);
    }
    let unprivileged = facts.euid != 0;
    if unprivileged && facts.unprivileged_userns_clone == Some(0) {
        return Some(Restriction::UnprivilegedUsernsOff);
    }
    if unprivileged && facts.apparmor_restrict == Some(1) {
        return Some(Restriction::AppArmor);
    }
    match step {
        Step::MountProc => Some(Restriction::MaskedProc),
        Step::InstallSeccomp => None,
        // ENOSPC with namespaces allowed: the per-user count is used up, not a policy.
        _ if errno == libc::ENOSPC || errno == libc::EUSERS => None,
        _ => Some(Restriction::Container),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(euid: u32) -> HostFacts {
        HostFacts {
            euid,
            max_user_namespaces: Some(15000),
            unprivileged_userns_clone: None,
            apparmor_restrict: None,
        }
    }

    #[test]
    fn max_user_namespaces_zero_is_named_for_root_and_users() {
        for euid in [0, 1000] {
            let f = HostFacts {
                max_user_namespaces: Some(0),
                ..facts(euid)
            };
            let r = diagnose(Step::CreateUserNamespace, libc::ENOSPC, &f);
            assert_eq!(r, Some(Restriction::UsernsDisabled));
            let r = r.map(|r| r.message()).unwrap_or_default();
            assert!(r.contains("user.max_user_namespaces"), "{r}");
            assert!(r.contains("allow_landlock_fallback"), "{r}");
        }
    }

    #[test]
    fn debian_sysctl_applies_to_users_only() {
        let f = HostFacts {
            unprivileged_userns_clone: Some(0),
            ..facts(1000)
        };
        assert_eq!(
            diagnose(Step::CreateUserNamespace, libc::EPERM, &f),
            Some(Restriction::UnprivilegedUsernsOff)
        );
        let root = HostFacts { euid: 0, ..f };
        assert_eq!(
            diagnose(Step::CreateUserNamespace, libc::EPERM, &root),
            Some(Restriction::Container)
        );
    }

    #[test]
    fn apparmor_is_blamed_when_the_namespace_is_useless() {
        let f = HostFacts {
            apparmor_restrict: Some(1),
            ..facts(1000)
        };
        let r = diagnose(Step::UseUserNamespace, libc::EACCES, &f);
        assert_eq!(r, Some(Restriction::AppArmor));
        assert!(r.map(|r| r.fix()).unwrap_or("").contains("apparmor"));
    }

    #[test]
    fn eperm_without_a_sysctl_is_a_container() {
        let r = diagnose(Step::CreateUserNamespace, libc::EPERM, &facts(0));
        assert_eq!(r, Some(Restriction::Container));
        assert!(r.map(|r| r.fix()).unwrap_or("").contains("seccomp"));
    }

    #[test]
    fn masked_proc_and_non_restrictions() {
        assert_eq!(
            diagnose(Step::MountProc, libc::EPERM, &facts(1000)),
            Some(Restriction::MaskedProc)
        );
        assert_eq!(
            diagnose(Step::CreateUserNamespace, libc::ENOMEM, &facts(1000)),
            None
        );
        // The per-user namespace count used up is not a host policy.
        assert_eq!(
            diagnose(Step::CreateUserNamespace, libc::ENOSPC, &facts(1000)),
            None
        );
    }

    #[test]
    fn seccomp_refused_is_its_own_restriction_and_no_fallback_helps() {
        for e in [libc::ENOSYS, libc::EINVAL] {
            let r = diagnose(Step::InstallSeccomp, e, &facts(1000));
            assert_eq!(r, Some(Restriction::NoSeccomp));
        }
        assert_eq!(
            diagnose(Step::InstallSeccomp, libc::EFAULT, &facts(0)),
            None
        );
        assert!(!Restriction::NoSeccomp.landlock_may_help());
        assert!(Restriction::NoSeccomp
            .fix()
            .contains("CONFIG_SECCOMP_FILTER"));
    }

    #[test]
    fn every_restriction_has_its_own_code_and_a_fix() {
        let all = [
            Restriction::UsernsDisabled,
            Restriction::UnprivilegedUsernsOff,
            Restriction::AppArmor,
            Restriction::Container,
            Restriction::MaskedProc,
            Restriction::NoSeccomp,
        ];
        let mut codes = std::collections::BTreeSet::new();
        for r in all {
            assert!(codes.insert(r.code()));
            assert_eq!(Restriction::from_code(r.code()), Some(r));
            assert!(crate::error::CODES.iter().any(|(c, _)| *c == r.code()));
            assert!(!r.fix().is_empty());
            let m = r.message();
            assert!(!m.ends_with('.'), "{m}");
            assert_eq!(
                m.contains("`[sandbox] allow_landlock_fallback = true`"),
                r.landlock_may_help(),
                "{m}"
            );
            assert!(!m.contains("SandboxConfig"), "names a struct field: {m}");
        }
    }
}
