//! Namespace tier: user, mount, pid, net, ipc, uts and cgroup namespaces, pivot_root into a
//! fresh read-only root, Landlock and seccomp.
//!
//! - [`plan`] (pure): request + host paths -> [`NamespacePlan`] (mounts in order, id maps,
//!   generated /etc, seccomp rules for the network mode, Landlock rules, tmpfs sizes).
//! - [`spawn`] (syscalls, in the single-threaded helper, as root): starts the namespace init
//!   and returns an [`NsChild`]; after reaping its pid, [`NsChild::finish`] gives the
//!   payload's exact exit status and the enforcement achieved.

mod apply;
mod dst;
pub(crate) mod egress;
pub mod error;
pub mod landlock;
mod plan;
pub mod prebuilt;
pub mod report;
pub mod restriction;
mod root_ops;
pub mod seccomp;
mod src;
pub mod syscalls;
mod tree_root;
mod warm;

pub use apply::{
    cleanup_stale_staging, copy_snapshot, rlimits_from, spawn, spawn_plan, NsChild, NsOutcome,
    Rlimits, STAGING_PREFIX,
};
pub(crate) use apply::{copy_output, has_entries};
pub use error::NsError;
pub use plan::{
    egress_env, plan, FileSource, MountFlags, MountOp, NamespacePlan, NsHostPaths, Staged,
    DEFAULT_HOST_ID, EGRESS_PORT, INSIDE_INPUT, INSIDE_OUTPUT, INSIDE_TMP, INSIDE_WORKSPACE,
    NAMESPACES,
};
pub use warm::{prebuild, Prebuilt};
