//! `sandboxio serve` against the real binary and a real HTTP client: lifecycle, keys and
//! scopes, tenants, capability tokens, approvals over the API, bad input, TLS, the Unix
//! socket and graceful shutdown; the dashboard's sessions and `/metrics`; three replicas on
//! one PostgreSQL store. Every test starts its own server (on loopback or a socket in its
//! own temporary directory) and stops it by pid.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "server/admission.rs"]
mod admission;
#[path = "server/approvals.rs"]
mod approvals;
#[path = "server/auth.rs"]
mod auth;
#[path = "server/badinput.rs"]
mod badinput;
#[path = "server/contexts.rs"]
mod contexts;
#[path = "server/dashboard.rs"]
mod dashboard;
#[path = "server/e2b.rs"]
mod e2b;
#[path = "server/e2b_hostile.rs"]
mod e2b_hostile;
#[path = "server/files.rs"]
mod files;
#[path = "server/flood.rs"]
mod flood;
#[path = "server/harness.rs"]
mod harness;
#[path = "server/lifecycle.rs"]
mod lifecycle;
#[path = "server/load.rs"]
mod load;
#[path = "server/metrics.rs"]
mod metrics;
#[path = "../../sandboxio-gateway/tests/support/pgcluster.rs"]
mod pgcluster;
#[path = "server/quotas.rs"]
mod quotas;
#[path = "server/replicas.rs"]
mod replicas;
#[path = "server/restart.rs"]
mod restart;
#[path = "server/starts.rs"]
mod starts;
#[path = "server/store_lock.rs"]
mod store_lock;
#[path = "server/streaming.rs"]
mod streaming;
#[path = "server/transport.rs"]
mod transport;
#[path = "server/webhook.rs"]
mod webhook;
