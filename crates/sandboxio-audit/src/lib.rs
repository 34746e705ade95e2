//! sandboxio audit: one [`OperationRecord`](sandboxio_core::OperationRecord), redacted once,
//! rendered three ways: an [`AuditEvent`] for every sink, an OpenTelemetry span (and
//! metrics), and a [`Meter`](sandboxio_core::Meter).
//!
//! ```text
//! record -> Redactor -> AuditEvent -> every AuditSink (awaited inline, bounded by a timeout)
//!                    -> execute_tool span + Metrics (OpenTelemetry API, global provider;
//!                       the same observations to a MetricsTap when one is installed)
//!                    -> meter_of(record)
//! ```
//!
//! See the crate README for what each failure mode does.

#![forbid(unsafe_code)]

pub mod auditor;
pub mod chain;
pub mod checkpoint;
pub mod error;
pub mod event;
pub mod head;
pub mod otel;
pub mod reader;
pub mod redact;
pub mod redact_stream;
pub mod redacted;
pub mod sink;
pub mod tap;
pub mod verify;

pub use auditor::{AuditConfig, Auditor, OnSinkFailure, RecordOutcome, SinkFailure};
pub use checkpoint::{
    export_public_key, load_public_key, load_public_keys, parse_public_key, AuditKey, Checkpoint,
    CheckpointReason, DEFAULT_ORIGIN,
};
pub use ed25519_dalek::VerifyingKey;
pub use error::AuditError;
pub use event::{meter_of, AuditEvent};
pub use head::{check_head, records_from, trail_id, HeadCheck, SignedHead};
pub use otel::{emit_span, parent_from_record, parent_from_traceparent, Metrics};
pub use reader::{
    query, read_events, tail, trail_files, trail_has_records, Follower, Query, TrailEntry,
};
pub use redact::{Redactor, RedactorBuilder, Secret};
pub use redact_stream::StreamRedactor;
pub use redacted::RedactedRecord;
pub use sink::{
    AuditSink, BlockingEmit, FileSink, FileSinkOptions, FsyncPolicy, LoggingSink, NoopSink,
    QueueSink, REPAIR_EVENT,
};
pub use tap::{MetricsTap, OperationObservation};
pub use verify::{verify, verify_keys, BadRecord, Tamper, VerifyReport};
