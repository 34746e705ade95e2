//! `/healthz` (the process answers) and `/readyz` (the state store answers and the server
//! is not draining). No credential needed; nothing about tenants is said.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::Health;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the state store is readable and the server is not shutting down.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn readyz(State(st): State<AppState>) -> (StatusCode, Json<Health>) {
    if st.draining.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "draining".into(),
            }),
        );
    }
    let store = st.backend.store().clone();
    let ok = tokio::task::spawn_blocking(move || store.kill_state().is_ok())
        .await
        .unwrap_or(false);
    if ok {
        (
            StatusCode::OK,
            Json(Health {
                status: "ready".into(),
            }),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "state store unavailable".into(),
            }),
        )
    }
}
