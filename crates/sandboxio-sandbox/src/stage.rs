//! The setup steps a sandbox child can fail at, one enum for every tier: the payload child
//! of the process and landlock tiers ([`crate::launch`]) writes one as a byte ([`Stage::code`])
//! over its error pipe, the namespace init ([`crate::ns`]) names one in its JSON report
//! (serde, snake_case). [`Display`](std::fmt::Display) gives the same snake_case name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The step of a sandbox child's setup that failed; one per syscall kind.
///
/// Each variant has a fixed byte code (its discriminant) for children that may not
/// allocate; [`Stage::from_u8`] is its inverse and [`Stage::ALL`] lists every variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Stage {
    WaitRelease = 1,
    SetParentDeathSignal = 2,
    /// Moving itself into the sandbox's cgroups (v1 `tasks`, cgroup2 `cgroup.procs`).
    JoinCgroup = 3,
    SetDumpable = 4,
    SetResGid = 5,
    SetGroups = 6,
    SetResUid = 7,
    UnshareCgroup = 8,
    SetHostname = 9,
    MakeRootPrivate = 10,
    Mkdir = 11,
    Symlink = 12,
    WriteFile = 13,
    Mount = 14,
    /// Mounting the fresh `/proc` (refused where the host's `/proc` is masked).
    MountProc = 15,
    /// Setting `vm.memfd_noexec = 2` in the sandbox's pid namespace.
    MemfdNoexec = 16,
    StatMountSource = 17,
    OpenBindSource = 18,
    PivotRoot = 19,
    UnmountOldRoot = 20,
    RemountRootReadOnly = 21,
    Chdir = 22,
    Fork = 23,
    SetSid = 24,
    SetRlimit = 25,
    NoNewPrivs = 26,
    /// Creating, filling or enforcing the Landlock ruleset.
    Landlock = 27,
    SecureBits = 28,
    DropBoundingSet = 29,
    ClearAmbient = 30,
    CapSet = 31,
    CloseFds = 32,
    Seccomp = 33,
    /// Pre-built (warm pool): reading or applying the request the waiting init was sent.
    ReadRequest = 34,
    /// Landlock is required but this kernel has none (the ruleset was never created).
    NoLandlock = 35,
    /// `execve` failed (for every candidate path).
    Exec = 36,
}

impl Stage {
    /// Every variant, in code order.
    pub const ALL: [Stage; 36] = [
        Stage::WaitRelease,
        Stage::SetParentDeathSignal,
        Stage::JoinCgroup,
        Stage::SetDumpable,
        Stage::SetResGid,
        Stage::SetGroups,
        Stage::SetResUid,
        Stage::UnshareCgroup,
        Stage::SetHostname,
        Stage::MakeRootPrivate,
        Stage::Mkdir,
        Stage::Symlink,
        Stage::WriteFile,
        Stage::Mount,
        Stage::MountProc,
        Stage::MemfdNoexec,
        Stage::StatMountSource,
        Stage::OpenBindSource,
        Stage::PivotRoot,
        Stage::UnmountOldRoot,
        Stage::RemountRootReadOnly,
        Stage::Chdir,
        Stage::Fork,
        Stage::SetSid,
        Stage::SetRlimit,
        Stage::NoNewPrivs,
        Stage::Landlock,
        Stage::SecureBits,
        Stage::DropBoundingSet,
        Stage::ClearAmbient,
        Stage::CapSet,
        Stage::CloseFds,
        Stage::Seccomp,
        Stage::ReadRequest,
        Stage::NoLandlock,
        Stage::Exec,
    ];

    /// The byte a child that may not allocate writes for this stage.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The stage of a byte written by [`Stage::code`]; `None` for a byte that names none.
    pub fn from_u8(code: u8) -> Option<Stage> {
        // Codes are 1..=ALL.len() in order (checked by the tests).
        let i = usize::from(code).checked_sub(1)?;
        Stage::ALL.get(i).copied()
    }

    /// The stable name: the same snake_case word as in the namespace init's JSON report.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::WaitRelease => "wait_release",
            Stage::SetParentDeathSignal => "set_parent_death_signal",
            Stage::JoinCgroup => "join_cgroup",
            Stage::SetDumpable => "set_dumpable",
            Stage::SetResGid => "set_res_gid",
            Stage::SetGroups => "set_groups",
            Stage::SetResUid => "set_res_uid",
            Stage::UnshareCgroup => "unshare_cgroup",
            Stage::SetHostname => "set_hostname",
            Stage::MakeRootPrivate => "make_root_private",
            Stage::Mkdir => "mkdir",
            Stage::Symlink => "symlink",
            Stage::WriteFile => "write_file",
            Stage::Mount => "mount",
            Stage::MountProc => "mount_proc",
            Stage::MemfdNoexec => "memfd_noexec",
            Stage::StatMountSource => "stat_mount_source",
            Stage::OpenBindSource => "open_bind_source",
            Stage::PivotRoot => "pivot_root",
            Stage::UnmountOldRoot => "unmount_old_root",
            Stage::RemountRootReadOnly => "remount_root_read_only",
            Stage::Chdir => "chdir",
            Stage::Fork => "fork",
            Stage::SetSid => "set_sid",
            Stage::SetRlimit => "set_rlimit",
            Stage::NoNewPrivs => "no_new_privs",
            Stage::Landlock => "landlock",
            Stage::SecureBits => "secure_bits",
            Stage::DropBoundingSet => "drop_bounding_set",
            Stage::ClearAmbient => "clear_ambient",
            Stage::CapSet => "cap_set",
            Stage::CloseFds => "close_fds",
            Stage::Seccomp => "seccomp",
            Stage::ReadRequest => "read_request",
            Stage::NoLandlock => "no_landlock",
            Stage::Exec => "exec",
        }
    }

    /// What the stage does, in the words of the syscalls a user would look up (used in the
    /// landlock tier's setup error).
    pub const fn describe(self) -> &'static str {
        match self {
            Stage::JoinCgroup => "join cgroup",
            Stage::SetRlimit => "setrlimit",
            Stage::SetGroups => "setgroups",
            Stage::SetResGid => "setresgid",
            Stage::SetResUid => "setresuid",
            Stage::DropBoundingSet => "drop capabilities (bounding set)",
            Stage::ClearAmbient => "drop capabilities (ambient set)",
            Stage::CapSet => "drop capabilities (capset)",
            Stage::CloseFds => "close fds",
            Stage::NoLandlock => "landlock (not available on this kernel)",
            other => other.as_str(),
        }
    }
}

impl TryFrom<u8> for Stage {
    /// The byte that names no stage.
    type Error = u8;

    fn try_from(code: u8) -> Result<Self, u8> {
        Stage::from_u8(code).ok_or(code)
    }
}

impl From<Stage> for u8 {
    fn from(s: Stage) -> u8 {
        s.code()
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// The variant names serde derives for `Stage`, read through a deserializer that only
    /// records what `deserialize_enum` is told: the list the compiler knows, not ours.
    fn serde_variants() -> &'static [&'static str] {
        use serde::de::{self, Visitor};
        #[derive(Debug)]
        struct Caught(&'static [&'static str]);
        impl fmt::Display for Caught {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "variants {:?}", self.0)
            }
        }
        impl std::error::Error for Caught {}
        impl de::Error for Caught {
            fn custom<T: fmt::Display>(_: T) -> Self {
                Caught(&[])
            }
        }
        struct Spy;
        impl<'de> de::Deserializer<'de> for Spy {
            type Error = Caught;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Caught> {
                Err(Caught(&[]))
            }
            fn deserialize_enum<V: Visitor<'de>>(
                self,
                _name: &'static str,
                variants: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Caught> {
                Err(Caught(variants))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                struct identifier ignored_any
            }
        }
        Stage::deserialize(Spy).unwrap_err().0
    }

    #[test]
    fn every_variant_has_a_code_that_round_trips() {
        let names = serde_variants();
        assert!(!names.is_empty());
        // A variant added to the enum but not to ALL (so without a decodable code) fails here.
        assert_eq!(names.len(), Stage::ALL.len(), "Stage::ALL misses a variant");
        for (i, s) in Stage::ALL.iter().enumerate() {
            assert_eq!(usize::from(s.code()), i + 1, "{s:?} out of order in ALL");
            assert_eq!(Stage::from_u8(s.code()), Some(*s));
            assert_eq!(Stage::try_from(u8::from(*s)), Ok(*s));
            assert_eq!(names[i], s.as_str(), "{s:?}");
        }
        let decodable = (0..=u8::MAX).filter_map(Stage::from_u8).count();
        assert_eq!(decodable, Stage::ALL.len());
        assert_eq!(Stage::try_from(0), Err(0));
        assert_eq!(Stage::try_from(u8::MAX), Err(u8::MAX));
    }

    #[test]
    fn display_and_json_name_agree() {
        for s in Stage::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Stage>(&json).unwrap(), s);
            assert!(!s.describe().is_empty());
        }
        // Names the namespace init's reports have always used stay as they were.
        assert_eq!(Stage::MountProc.to_string(), "mount_proc");
        assert_eq!(Stage::SetResGid.to_string(), "set_res_gid");
        assert_eq!(
            Stage::RemountRootReadOnly.to_string(),
            "remount_root_read_only"
        );
        assert_eq!(Stage::ReadRequest.to_string(), "read_request");
        assert_eq!(Stage::SetRlimit.describe(), "setrlimit");
        assert_eq!(Stage::JoinCgroup.describe(), "join cgroup");
    }
}
