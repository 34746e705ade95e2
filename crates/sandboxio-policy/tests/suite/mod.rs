mod args;
pub mod common;
mod default_policy;
mod fixtures;
mod props;
mod semantics;
