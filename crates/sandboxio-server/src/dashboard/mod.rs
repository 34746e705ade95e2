//! The dashboard at `/` of `sandboxio serve`: the seed's five panels, live over SSE, the
//! kill switch, pending approvals and recent denials, for a browser signed in with an API
//! key. Its files are embedded in the binary.
//!
//! `page` (the HTML), `assets` (embedded files and security headers), `signin` (sessions,
//! cookie, CSRF token), `session` (sign in and out), `operator` (the signed-in caller),
//! `snapshot` (the panels' data), `events` (SSE), `actions` (the buttons).

pub mod actions;
pub mod assets;
pub mod events;
pub mod operator;
pub mod page;
pub mod session;
pub mod signin;
pub mod snapshot;

use axum::routing::{get, post};
use utoipa_axum::router::OpenApiRouter;

pub use signin::SignIns;

use crate::state::AppState;

/// The dashboard's routes, to mount with [`crate::app::router`].
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/", get(page::index))
        .route("/dashboard/assets/{name}", get(assets::asset))
        .route("/dashboard/signin", post(session::sign_in))
        .route("/dashboard/signout", post(session::sign_out))
        .route("/dashboard/api/snapshot", get(events::snapshot_json))
        .route("/dashboard/api/events", get(events::events))
        .route(
            "/dashboard/api/kill",
            post(actions::kill).delete(actions::resume),
        )
        .route(
            "/dashboard/api/approvals/{id}/approve",
            post(actions::approve),
        )
        .route("/dashboard/api/approvals/{id}/deny", post(actions::deny))
}
