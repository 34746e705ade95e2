pub mod auditor;
pub mod common;
pub mod metrics;
pub mod otel;
pub mod redaction;
pub mod tamper;
pub mod trail;
