//! sandboxio policy files: parse, validate, evaluate.
//!
//! Pure: no I/O except reading the policy files it is asked to load, no async, time is
//! injected through [`Context`]. [`PolicySet::evaluate`] never fails: anything it cannot
//! decide is a deny. See the crate README for the file format and the semantics.

#![forbid(unsafe_code)]

mod args;
mod compile;
mod context;
mod error;
pub mod path;
mod raw;
mod rule;
mod set;

pub use compile::{EXAMPLE_DEFAULT_TIME, MAX_POLICY_FILE_BYTES};
pub use context::{Context, NetAccess};
pub use error::{Location, PolicyError, PolicyWarning};
pub use set::{
    check, check_files, evaluate, explain, CheckReport, Explanation, MatchedRule, PolicySet,
    PolicySource, DEFAULT_POLICY, DEFAULT_POLICY_NAME,
};
