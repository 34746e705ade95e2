//! The caller's tenant's audit events (scope `read`), newest last, from the trail file.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use crate::extract::Query;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use sandboxio_core::HumanDuration;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ServerError;
use crate::problem::Problem;
use crate::routes::guard::{ReadScope, Scoped};
use crate::state::AppState;

/// How much of the end of the trail a query reads.
const TAIL_BYTES: u64 = 16 << 20;
const MAX_EVENTS: usize = 1000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(query))
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// How far back, e.g. `1h` (default 24h).
    pub since: Option<String>,
    /// Only this event (e.g. `exec`, `http.forbidden`).
    pub event: Option<String>,
    /// Only this decision: `allow` or `deny`.
    pub decision: Option<String>,
    /// At most this many, the newest (default 100, at most 1000).
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEvents {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<serde_json::Value>,
}

fn tail(path: &PathBuf) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        // Drop the partial first line.
        text = text
            .split_once('\n')
            .map(|(_, r)| r.to_string())
            .unwrap_or_default();
    }
    Ok(text)
}

/// Events of the caller's tenant (redacted as they were written).
#[utoipa::path(get, path = "/v1/audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = AuditEvents), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn query(
    State(st): State<AppState>,
    Scoped { caller, .. }: Scoped<ReadScope>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditEvents>, ServerError> {
    let Some(path) = st.opts.audit_file.clone() else {
        return Ok(Json(AuditEvents { events: Vec::new() }));
    };
    let back = match q.since.as_deref() {
        None => std::time::Duration::from_secs(24 * 3600),
        Some(s) => s
            .parse::<HumanDuration>()
            .map_err(|e| ServerError::BadValue {
                field: "since",
                why: e.to_string(),
            })?
            .as_duration(),
    };
    if let Some(d) = q.decision.as_deref() {
        if d != "allow" && d != "deny" {
            return Err(ServerError::BadValue {
                field: "decision",
                why: format!("`{d}` is not `allow` or `deny`"),
            });
        }
    }
    // `since` is the caller's: anything before the earliest time there is means all.
    let since: DateTime<Utc> = chrono::Duration::from_std(back)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_EVENTS);
    let text = tokio::task::spawn_blocking(move || tail(&path))
        .await
        .map_err(|_| ServerError::Internal {
            action: "reading the audit trail",
        })?
        .map_err(|_| ServerError::Internal {
            action: "reading the audit trail",
        })?;
    let tenant = caller.tenant().to_string();
    let mut events: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["tenant_id"].as_str() == Some(tenant.as_str()))
        .filter(|e| {
            e["ts"]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t >= since)
        })
        .filter(|e| q.event.as_deref().is_none_or(|ev| e["event"] == ev))
        .filter(|e| q.decision.as_deref().is_none_or(|d| e["decision"] == d))
        .collect();
    let skip = events.len().saturating_sub(limit);
    events.drain(..skip);
    Ok(Json(AuditEvents { events }))
}
