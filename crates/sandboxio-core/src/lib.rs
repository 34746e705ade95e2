//! The vocabulary every other sandboxio crate speaks.
//!
//! This crate holds plain data and pure functions only: no OS calls, no I/O, no async
//! runtime. Policy, budget, audit and sandbox crates depend on it and on nothing else
//! internal; the gateway composes them.

pub mod decision;
pub mod error;
pub mod event;
pub mod exec;
pub mod fileread;
pub mod filewrite;
pub mod fingerprint;
pub mod money;
pub mod mount;
pub mod operation;
pub mod record;
pub mod shown;
pub mod telemetry;
pub mod tier;
pub mod units;
pub mod wire;

pub use decision::{Decision, Layer, RuleRef, Verdict};
pub use error::{CoreError, ErrorClass, ErrorCode};
pub use event::{ExecEvent, OutputStream, TtySize};
pub use exec::{
    CopyOutError, Enforcement, ExecRequest, ExecResult, ExitStatus, LimitAboveCeiling, Limits,
    Meter, NetworkMode, Usage,
};
pub use fingerprint::{request_view, Fingerprint};
pub use money::{CostCategory, Money};
pub use mount::{Mount, MountMode};
pub use operation::{
    agent_problem, check_agent, check_browse_url, check_tenant, tenant_problem, AdminAction,
    IdempotencyKey, Language, Operation, OperationArgs, OperationId, OperationKind, Principal,
    BROWSE_URL_MAX,
};
pub use record::{CostEntry, OperationRecord, OperationStatus};
pub use tier::{Capability, IsolationTier};
pub use units::{ByteSize, HumanDuration};
