//! sandboxio isolation tiers. This is the only crate in the workspace allowed `unsafe`.
//!
//! Layout (see README.md): planning is pure (`plan`, `cgroup::plan`, `ns::plan`), applying
//! is the only syscall code (`helper`, `launch`, `exec`, `cgroup`, `ns::apply`, `probe`),
//! through `sys`.
//!
//! `unsafe` lives in the `sys` layer: small safe wrappers over the raw calls, each `unsafe`
//! block with its `// SAFETY:` comment. The crate is `#![deny(unsafe_code)]`; only `sys` and
//! the modules not migrated to it yet are allowed `unsafe` (the list below, also in README.md;
//! `sys::tests` checks it against the sources).
//!
//! Embedding binaries must call [`helper::main`] first thing in `main` when
//! [`helper::is_helper_invocation`] is true (before starting tokio or any thread).

#![deny(unsafe_code)]

// Not migrated to `sys` yet (still allowed `unsafe`; remaining work, see README.md):
// `exec` and `helper`.

mod build_id;
mod caps;
pub mod cgroup;
pub mod config;
mod drain;
mod egress;
pub mod error;
pub mod exec;
pub mod fallback;
pub mod files;
pub mod helper;
pub mod ids;
mod launch;
pub mod ns;
pub mod plan;
pub mod pool;
pub mod probe;
pub mod protocol;
mod rlimit;
pub mod stage;
pub mod stream;
pub mod sweep;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod terminal;
pub mod tier;

pub use config::{CgroupUsage, SandboxConfig, ENV_HELPER};
pub use error::SandboxError;
pub use exec::{run, run_streaming, CancelToken};
pub use helper::HELPER_ARG;
pub use plan::SandboxPlan;
pub use pool::WarmPool;
pub use probe::{probe, HostReport};
pub use stream::StreamIo;
pub use tier::{TierPlan, TierRequest};

/// Whether `path` is a binary built from the same sources as this one (its build id section
/// holds this build's id; see the crate README, "Which helper binary"). For embedders that
/// find a helper themselves (the Python package on `PATH`) and prefer one of this build.
pub fn is_same_build(path: &std::path::Path) -> bool {
    build_id::read_id(path) == Some(build_id::BUILD_ID)
}
