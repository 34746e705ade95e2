//! What the namespace init (and the payload before `execve`) tell the helper, one JSON line
//! per message over a pipe. Each line is far below PIPE_BUF, so writes are atomic.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The step of the in-namespace setup that failed; one per syscall kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    WaitRelease,
    SetParentDeathSignal,
    /// The init moving itself into the sandbox's v1 cgroups (`tasks`).
    JoinCgroup,
    SetDumpable,
    SetResGid,
    SetGroups,
    SetResUid,
    UnshareCgroup,
    SetHostname,
    MakeRootPrivate,
    Mkdir,
    Symlink,
    WriteFile,
    Mount,
    /// Mounting the fresh `/proc` (refused where the host's `/proc` is masked).
    MountProc,
    /// Setting `vm.memfd_noexec = 2` in the sandbox's pid namespace.
    MemfdNoexec,
    StatMountSource,
    OpenBindSource,
    PivotRoot,
    UnmountOldRoot,
    RemountRootReadOnly,
    Chdir,
    Fork,
    SetSid,
    SetRlimit,
    NoNewPrivs,
    Landlock,
    SecureBits,
    DropBoundingSet,
    ClearAmbient,
    CapSet,
    CloseFds,
    Seccomp,
    /// Pre-built (warm pool): reading or applying the request the waiting init was sent.
    ReadRequest,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_string(self).unwrap_or_default();
        f.write_str(s.trim_matches('"'))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "t")]
pub enum Report {
    /// A setup step failed; the payload never ran.
    Setup {
        stage: Stage,
        target: String,
        errno: i32,
    },
    /// Every mechanism is in place; `execve` comes next.
    Applied {
        landlock_abi: Option<u32>,
        seccomp: bool,
        no_new_privs: bool,
        caps_dropped: bool,
    },
    /// `execve` failed for every candidate path.
    ExecFailed { program: String, errno: i32 },
    /// The payload exited with a code.
    Exited { code: i32 },
    /// The payload was killed by a signal.
    Signaled { signal: i32 },
}
