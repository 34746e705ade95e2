pub mod auditor;
pub mod common;
pub mod otel;
pub mod redaction;
pub mod tamper;
pub mod trail;
