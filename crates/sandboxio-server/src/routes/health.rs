//! `/healthz` (the process answers and, on a shared store, still holds its replica lease)
//! and `/readyz` (that, the state store answers and the server is not draining). No
//! credential needed; nothing about tenants is said.

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

/// What a replica that lost its lease says, or `None`.
fn lost(st: &AppState) -> Option<Json<Health>> {
    st.backend.store().lease_lost().map(|replica| {
        Json(Health {
            status: format!(
                "SBX_E1542: replica `{replica}` lost its lease on the shared state store and admits nothing more; restart it"
            ),
        })
    })
}

/// Liveness: the process answers, and it is not a replica that lost its lease (such a
/// replica refuses every operation until it is restarted, so a supervisor should).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn healthz(State(st): State<AppState>) -> (StatusCode, Json<Health>) {
    if let Some(h) = lost(&st) {
        return (StatusCode::SERVICE_UNAVAILABLE, h);
    }
    (
        StatusCode::OK,
        Json(Health {
            status: "ok".into(),
        }),
    )
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
    if let Some(h) = lost(&st) {
        return (StatusCode::SERVICE_UNAVAILABLE, h);
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
