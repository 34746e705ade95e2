//! The E2B-compatible API (`[e2b] enabled = true`): the official E2B SDKs (`e2b`,
//! `e2b-code-interpreter`) run unmodified against `sandboxio serve` with `E2B_API_URL` and
//! `E2B_SANDBOX_URL` both pointing at it. Mounted on the same listener, behind the same
//! layers; requests that name a sandbox (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`) reach envd's
//! services or the code interpreter, the rest the lifecycle API.
//!
//! Nothing here runs anything itself: commands, code and files go through the native
//! handlers or the same `Backend::start` the native routes use, so every operation passes
//! the whole chain (policy, budgets, approvals) and leaves its one record. One module per
//! service: `lifecycle` (REST), `process` and `filesystem` (Connect, `connect`; `rename`), `files`
//! (envd HTTP), `interpreter` (port 49999); `auth`, `registry` (`persist`: what outlives
//! a restart), `paths`, `error`.

pub mod auth;
pub mod connect;
pub mod error;
pub mod files;
pub mod filesystem;
pub mod interpreter;
pub mod lifecycle;
pub mod multipart;
pub mod native;
pub mod paths;
pub mod persist;
pub mod process;
pub mod registry;
pub mod rename;

use std::path::PathBuf;
use std::sync::Arc;

use axum::routing::{delete, get, post};
use axum::Extension;
use sandboxio_config::E2bSection;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// The envd version sandboxio's envd answers as: octet-stream uploads (0.5.7), closing
/// stdin (0.5.2), the default user (0.4.0); not file metadata (0.6.2) or newer watchers.
pub const ENVD_VERSION: &str = "0.5.7";

/// The E2B API's own state: its configuration and what it keeps about its sandboxes.
pub struct E2b {
    pub config: E2bSection,
    pub registry: registry::Registry,
}

/// The E2B routes, to pass to `app::router` beside the native API. With `dir` (the state
/// directory's `e2b/`) its sandboxes and their access tokens outlive a restart; a `dir`
/// that cannot be used (unreadable, or a damaged token key) is `SBX_E2513`.
pub fn routes(
    config: E2bSection,
    dir: Option<PathBuf>,
) -> Result<OpenApiRouter<AppState>, crate::error::ServerError> {
    let registry = match dir {
        Some(d) => {
            registry::Registry::at(d.clone()).map_err(|e| crate::error::ServerError::E2bState {
                path: d.display().to_string(),
                why: e.to_string(),
            })?
        }
        None => registry::Registry::default(),
    };
    let e2b = Arc::new(E2b { config, registry });
    let ni = lifecycle::not_implemented;
    Ok(OpenApiRouter::new()
        // Lifecycle (REST, `X-API-Key`).
        .route(
            "/v2/sandboxes",
            post(lifecycle::create).get(lifecycle::list),
        )
        .route("/sandboxes", post(lifecycle::create).get(lifecycle::list))
        .route(
            "/sandboxes/{id}",
            get(lifecycle::get_one).delete(lifecycle::kill),
        )
        .route("/sandboxes/{id}/timeout", post(lifecycle::set_timeout))
        .route("/v2/sandboxes/{id}/connect", post(lifecycle::connect))
        .route("/sandboxes/{id}/connect", post(lifecycle::connect))
        .route("/sandboxes/{id}/pause", post(lifecycle::pause))
        .route("/sandboxes/{id}/resume", post(lifecycle::resume))
        .route("/sandboxes/{id}/refreshes", post(ni))
        .route("/sandboxes/{id}/metrics", get(ni))
        .route("/sandboxes/metrics", get(ni))
        .route("/sandboxes/{id}/logs", get(ni))
        .route("/v2/sandboxes/{id}/logs", get(ni))
        .route("/sandboxes/{id}/snapshots", post(ni))
        .route("/sandboxes/{id}/fork", post(ni))
        .route("/sandboxes/{id}/network", axum::routing::put(ni))
        // envd (port 49983): Connect services and HTTP routes.
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/Connect", post(process::connect_to))
        .route("/process.Process/{method}", post(process::unary))
        .route(
            "/filesystem.Filesystem/WatchDir",
            post(filesystem::watch_dir),
        )
        .route("/filesystem.Filesystem/{method}", post(filesystem::unary))
        .route("/health", get(files::health))
        .route("/files", get(files::download).post(files::upload))
        // The code interpreter (port 49999).
        .route("/execute", post(interpreter::execute))
        .route(
            "/contexts",
            post(interpreter::create).get(interpreter::list),
        )
        .route("/contexts/{id}", delete(interpreter::remove))
        .route("/contexts/{id}/restart", post(interpreter::restart))
        .layer(Extension(e2b)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use sandboxio_core::ErrorCode;

    #[test]
    fn a_state_dir_that_cannot_be_used_stops_the_routes_with_a_code() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e2b");
        assert!(super::routes(Default::default(), Some(dir.clone())).is_ok());
        std::fs::write(dir.join("access.key"), b"damaged").unwrap();
        let err = super::routes(Default::default(), Some(dir.clone()))
            .err()
            .expect("a damaged token key must stop the E2B API");
        assert_eq!(err.code(), "SBX_E2513");
        assert!(
            err.to_string().contains(&dir.display().to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read(dir.join("access.key")).unwrap(), b"damaged");
    }
}
