//! What the namespace init (and the payload before `execve`) tell the helper, one JSON line
//! per message over a pipe. Each line is far below PIPE_BUF, so writes are atomic.

use serde::{Deserialize, Serialize};

use crate::stage::Stage;

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
