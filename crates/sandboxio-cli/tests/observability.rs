//! Observability of the real `sandboxio` binary (issue 5): a canary secret reaches no sink
//! (audit file, JSON logs, spans and metrics exported to a real OTLP/HTTP receiver on
//! 127.0.0.1, CLI output); exported spans carry the GenAI names and nest under the caller's
//! `invoke_agent` span; the log level and the OTLP export follow only the documented
//! settings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "observability/canary.rs"]
mod canary;
#[path = "observability/common.rs"]
mod common;
#[path = "observability/library.rs"]
mod library;
#[path = "observability/otlp.rs"]
mod otlp;
#[path = "observability/settings.rs"]
mod settings;
