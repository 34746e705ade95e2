//! The gateway: the one chain every operation passes, and the state behind it.
//!
//! Only this crate knows the order of the layers (DESIGN.md section 1). Policy, budget,
//! audit and sandbox crates never depend on each other; this crate composes them.

mod anchor;
pub mod approval;
pub mod browse;
pub mod chain;
pub mod config;
pub mod credential;
pub mod denial;
pub mod edge;
pub mod error;
pub mod executor;
pub mod files;
pub mod layers;
pub mod overview;
pub mod policy;
pub mod redaction;
pub mod retry;
pub mod runtime;
pub mod session;
pub mod store;
pub mod stream;
pub mod sweep;
pub mod tool;

pub use anchor::ANCHOR_BROKEN_EVENT;
pub use approval::{ApprovalAnswer, ApprovalCallback, Approver};
pub use chain::{owner_alive, process_owner, FileSlot, Gateway, Outcome, Submission};
pub use config::GatewayConfig;
pub use error::GatewayError;
pub use executor::Executor;
pub use overview::BudgetLine;
pub use policy::PolicyEngine;
pub use redaction::Redaction;
pub use runtime::{Embedding, Runtime, RuntimeError, RuntimeOptions};
/// What an embedding front end needs of the audit layer: its sink interface and events,
/// the failure mode, and secrets.
pub use sandboxio_audit::{
    trail_files, AuditError, AuditEvent, AuditSink, OnSinkFailure, Redactor, Secret,
};
/// The server's Prometheus endpoint and dashboard read the chain's metric observations.
pub use sandboxio_audit::{MetricsTap, OperationObservation};
/// The egress proxy, for front ends that show or configure it.
pub use sandboxio_egress as egress;
/// An embedder that finds the sandbox helper itself (the Python package, on `PATH`)
/// prefers one built from the same sources.
pub use sandboxio_sandbox::is_same_build;
/// Front ends cancel the operations they submit (a client that went away, a shutdown).
pub use sandboxio_sandbox::{CancelToken, StreamIo};
pub use session::{CallOptions, Sandbox};
pub use tool::{Tool, ToolError};
