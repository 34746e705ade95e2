//! sandboxio isolation tiers. This is the only crate in the workspace allowed `unsafe`.
//!
//! Layout (see README.md): planning is pure (`plan`, `ns::plan`), applying is the only
//! syscall code (`helper`, `ns::apply`, `cgroup`, ...).

pub mod ns;
