//! Exit statuses of the `sandboxio` binary (besides the sandboxed command's own).
//!
//! The CLI's own statuses are 1, 2 and 120-125. A sandboxed program can exit with the same
//! numbers; `--json` tells them apart (`record.status` and `record.error_code`).

use sandboxio_core::ErrorClass;

/// Success.
pub const OK: i32 = 0;
/// A check failed: `audit verify` found tampering, a trail does not chain.
pub const FAILURE: i32 = 1;
/// Usage or configuration error (bad flag, malformed config or policy, unreadable input).
pub const USAGE: i32 = 2;
/// The gateway denied the operation (kill switch, policy, rate limit, budget, approval,
/// idempotency conflict).
pub const DENIED: i32 = 120;
/// The sandbox was killed for exceeding its memory limit.
pub const OOM: i32 = 121;
/// The operation was cancelled (Ctrl-C, SIGTERM, kill switch).
pub const CANCELLED: i32 = 122;
/// The outcome is unknown: a previous attempt with this idempotency key was interrupted.
pub const INTERRUPTED: i32 = 123;
/// The sandboxed command ran past its timeout and was killed.
pub const TIMEOUT: i32 = 124;
/// The sandbox could not be set up, or the runtime failed (internal error).
pub const INTERNAL: i32 = 125;

/// The exit status for an error of this class.
pub fn for_class(class: ErrorClass) -> i32 {
    match class {
        ErrorClass::Usage => USAGE,
        ErrorClass::Denied => DENIED,
        ErrorClass::Interrupted => INTERRUPTED,
        ErrorClass::Integrity => FAILURE,
        ErrorClass::Internal => INTERNAL,
    }
}
