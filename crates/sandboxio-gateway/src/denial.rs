//! Codes of the chain's denials. A denial is a value (a record with `verdict = deny`), not
//! an error, but it carries a stable code like every error so an agent or a script can act
//! on it without parsing the reason. The layer that denied is in the record.

/// A policy rule denied the operation (or no rule allowed it).
pub const POLICY: &str = "SBX_E1550";
/// The kill switch is engaged.
pub const KILL_SWITCH: &str = "SBX_E1551";
/// A rate limit was reached (`retry_after_ms` says when to try again).
pub const RATE_LIMIT: &str = "SBX_E1552";
/// A budget ceiling would be passed.
pub const BUDGET: &str = "SBX_E1553";
/// A person (or the approval callback) denied the request.
pub const APPROVAL_DENIED: &str = "SBX_E1554";
/// Nobody approved the request before the approval timeout.
pub const APPROVAL_TIMEOUT: &str = "SBX_E1555";
/// The approval was used, expired or was for another request.
pub const APPROVAL_INVALID: &str = "SBX_E1556";
/// The operation was cancelled while it waited for its approval (its caller went away,
/// its sandbox was paused or deleted); the approval is withdrawn.
pub const APPROVAL_CANCELLED: &str = "SBX_E1557";
/// A read-only directory of the request (its input directory, a read-only mount) changed
/// after the request was asked about: what was approved is not what would run.
pub const PINNED_CHANGED: &str = "SBX_E1558";
/// The request needs an approval, and its standard input is streamed while it runs: no
/// approval could cover bytes that arrive after it.
pub const APPROVAL_STREAMED_STDIN: &str = "SBX_E1559";
/// The request needs an approval or carries an idempotency key, and what a read-only
/// directory of it holds cannot be pinned (`chain/pins.rs`: too large or deep, not
/// listable, written by the run, a path that is not UTF-8): neither could cover it.
pub const PINNED_TOO_LARGE: &str = "SBX_E1566";
/// The request was approved, and its input directory could not be copied for the run
/// (an approved run reads a copy taken after the approval; too large, unreadable, no space).
pub const SNAPSHOT_FAILED: &str = "SBX_E1567";
