//! `GET /dashboard/api/events`: the panels' data as Server-Sent Events, one `snapshot`
//! event at once and then every [`EVERY`]. The stream ends when the session ends (signed
//! out, expired, pushed out) or its key is revoked or expires, and with the request
//! timeout (the browser reconnects by itself).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use chrono::Utc;
use futures_util::stream::{self, Stream};

use super::operator::Operator;
use super::snapshot;
use crate::error::ServerError;
use crate::state::AppState;

/// How often a new snapshot is sent.
pub const EVERY: Duration = Duration::from_secs(2);

/// One snapshot as an event, or `None` when the session or its key is no longer live.
async fn next_event(st: &AppState, op: &Operator) -> Option<Event> {
    st.signins.get(&op.cookie)?;
    let (st2, caller) = (st.clone(), op.caller.clone());
    let snap = tokio::task::spawn_blocking(move || {
        let live = st2
            .backend
            .store()
            .credential(&caller.credential.id)
            .ok()
            .flatten()
            .is_some_and(|c| c.is_live(Utc::now()));
        live.then(|| snapshot::take(&st2, &caller))
    })
    .await
    .ok()??;
    let event = match snap {
        Ok(s) => Event::default().event("snapshot").json_data(&s).ok()?,
        Err(e) => Event::default()
            .event("problem")
            .json_data(e.problem())
            .ok()?,
    };
    Some(event)
}

pub async fn events(
    State(st): State<AppState>,
    op: Operator,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ServerError> {
    let s = stream::unfold((st, op, true), |(st, op, first)| async move {
        if !first {
            tokio::time::sleep(EVERY).await;
        }
        let ev = next_event(&st, &op).await?;
        Some((Ok(ev), (st, op, false)))
    });
    Ok(Sse::new(s).keep_alive(KeepAlive::default()))
}

pub async fn snapshot_json(
    State(st): State<AppState>,
    op: Operator,
) -> Result<axum::Json<snapshot::Snapshot>, ServerError> {
    let caller = op.caller;
    let s = tokio::task::spawn_blocking(move || snapshot::take(&st, &caller))
        .await
        .map_err(|_| ServerError::Internal {
            action: "reading the dashboard",
        })??;
    Ok(axum::Json(s))
}
