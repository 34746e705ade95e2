//! Output as bytes, live, in order; stdin passed through; the operator's terminal kept
//! safe; `--tty`; mounts. Against the real `sandboxio` binary, in the namespace tier (the
//! default) unless a test says otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "stream/bytes.rs"]
mod bytes;
#[path = "stream/common.rs"]
mod common;
#[path = "stream/copyout.rs"]
mod copyout;
#[path = "stream/live.rs"]
mod live;
#[path = "stream/tty.rs"]
mod tty;
