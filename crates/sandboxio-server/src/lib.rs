//! `sandboxio serve`: the HTTP API in front of the gateway.
//!
//! Every operation it performs goes through the gateway's chain and leaves the same one
//! record as the CLI (`backend`); what the server decides itself (a refused scope, an admin
//! action, a sandbox's lifecycle) is recorded through the same auditor. Layout: `app` (the
//! router and its layers), `serve` (listeners, TLS, shutdown), `auth` (keys, tokens,
//! scopes, tenants), `sessions` (sandboxes as sessions), `routes/*` (one module per
//! resource), `answer` and `problem` (answers an agent can act on), `metrics` (`/metrics`,
//! fed by the gateway's metrics tap) and `dashboard` (the operator's page at `/`).

pub mod admission;
pub mod answer;
pub mod app;
pub mod auth;
pub mod backend;
pub mod body;
pub mod conns;
pub mod context;
pub mod contexts;
pub mod dashboard;
pub mod e2b;
pub mod error;
pub mod extract;
pub mod labels;
pub mod launch;
pub mod lifecycle;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod options;
pub mod outbound;
pub mod problem;
pub mod processes;
pub mod refusals;
pub mod revocation;
pub mod routes;
pub mod serve;
pub mod sessions;
pub mod starts;
pub mod state;
pub mod stream;
pub mod tls;
pub mod webhook;

pub use backend::Backend;
pub use error::ServerError;
pub use metrics::Telemetry;
pub use options::{Listen, ServeOptions, TlsFiles};
pub use serve::{serve, Listener};
pub use state::AppState;
