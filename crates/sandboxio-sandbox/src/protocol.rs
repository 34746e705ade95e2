//! What the supervisor and the helper say to each other.
//!
//! The three pipe fds are inherited at numbers given in `argv[2]` as `PLAN,REPORT,CONTROL`
//! (only numbers, never the plan itself, are in argv).
//!
//! - plan fd (helper reads): the JSON [`crate::plan::SandboxPlan`], at most
//!   [`crate::plan::MAX_PLAN_BYTES`], then EOF. A pooled namespace helper (`argv[3]` =
//!   [`crate::helper::PREBUILD_ARG`]) first reads the pool's base plan framed by its
//!   length (4 bytes, little endian), builds it, reports [`HelperMsg::Prebuilt`], then
//!   reads the request's plan as above.
//! - report fd (helper writes): one JSON [`HelperMsg`] per line.
//! - control fd (helper reads): a byte [`CANCEL_BYTE`] cancels the run; EOF means the
//!   supervisor is gone, which also kills the whole tree.

use sandboxio_core::{CopyOutError, Enforcement, ExitStatus};
use serde::{Deserialize, Serialize};

/// The helper's pipe fds, as passed in `argv[2]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelperFds {
    pub plan: i32,
    pub report: i32,
    pub control: i32,
    /// A Unix socket to the supervisor, for a sandbox with network: the helper sends the
    /// sandbox's egress listener over it (SCM_RIGHTS).
    pub egress: Option<i32>,
}

impl HelperFds {
    pub fn to_arg(&self) -> String {
        match self.egress {
            Some(e) => format!("{},{},{},{e}", self.plan, self.report, self.control),
            None => format!("{},{},{}", self.plan, self.report, self.control),
        }
    }
    pub fn parse(arg: &str) -> Option<HelperFds> {
        let mut it = arg
            .split(',')
            .map(|s| s.parse::<i32>().ok().filter(|n| *n > 2));
        let fds = HelperFds {
            plan: it.next()??,
            report: it.next()??,
            control: it.next()??,
            egress: match it.next() {
                Some(e) => Some(e?),
                None => None,
            },
        };
        if it.next().is_some() {
            return None;
        }
        Some(fds)
    }
}
pub const CANCEL_BYTE: u8 = b'c';

/// One line from the helper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HelperMsg {
    /// The helper could not start the payload (or lost control of it).
    SetupError { code: String, message: String },
    /// The payload was started with this pid.
    Payload { pid: i32 },
    /// A pooled namespace helper built its base (see `ns::prebuilt`) and waits for the
    /// request's plan.
    Prebuilt,
    /// The payload and all its descendants are gone.
    Final(Box<FinalReport>),
}

/// How the run ended, as the helper saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalReport {
    pub exit: ExitStatus,
    pub timed_out: bool,
    /// Why the helper cancelled (control byte, supervisor gone, signal).
    pub cancelled: Option<String>,
    pub oom_killed: bool,
    pub cpu_time_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    /// Where the usage numbers come from: `cgroup` or `rusage`.
    pub meter: String,
    /// Descendants still alive after the payload exited (killed by the helper).
    pub leftovers_killed: u32,
    /// What the tier backend enforced (namespace tier); `None` for the process tier.
    #[serde(default)]
    pub enforcement: Option<Enforcement>,
    /// The output files could not be copied out (the payload's results above stand).
    #[serde(default)]
    pub copy_out_error: Option<CopyOutError>,
}
