//! A sandbox's lifecycle beyond create and delete, for every front end (the `/v1` routes,
//! the E2B-compatible API): pause, resume, and the restore a restarted server does. Each
//! leaves a record (`sandbox.pause`, `sandbox.resume`, `sandbox.restore`, `sandbox.lost`).

use std::sync::Arc;
use std::time::Duration;

use sandboxio_core::Verdict;

use crate::backend::server_record;
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::sessions::Session;
use crate::state::AppState;

/// How long a pause waits for what it cancelled to end (and be recorded).
const PAUSE_WAIT: Duration = Duration::from_secs(10);

/// Pauses sandbox `s`: every operation in it (background processes, streams, context
/// kernels) is cancelled, killed with its whole process tree and recorded as cancelled,
/// which releases its budget reservation; its files stay; nothing new starts in it
/// (`SBX_E1850`) until it is resumed; the idle reaper leaves it alone (its lifetime still
/// ends). Returns once what ran has ended (at most 10 s). `false`: it was already paused.
pub async fn pause(
    st: &AppState,
    s: &Arc<Session>,
    by: &str,
    ctx: &RequestCtx,
) -> Result<bool, ServerError> {
    if !s.pause()? {
        return Ok(false);
    }
    let deadline = tokio::time::Instant::now() + PAUSE_WAIT;
    while s.busy() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if s.busy() > 0 {
        tracing::warn!(sandbox = %s.id, "operations still ending 10 s after a pause");
    }
    record(
        st,
        s,
        "sandbox.pause",
        format!("sandbox {} paused by {by}", s.id),
        ctx,
    )
    .await;
    Ok(true)
}

/// Resumes a paused sandbox: operations may start in it again. `false`: it was not paused.
pub async fn resume(
    st: &AppState,
    s: &Arc<Session>,
    by: &str,
    ctx: &RequestCtx,
) -> Result<bool, ServerError> {
    if !s.resume()? {
        return Ok(false);
    }
    record(
        st,
        s,
        "sandbox.resume",
        format!("sandbox {} resumed by {by}", s.id),
        ctx,
    )
    .await;
    Ok(true)
}

/// At start: restores the sandboxes an earlier run of the server wrote down and records
/// each one restored or lost (with the reason). Returns (restored, lost).
pub async fn restore(st: &AppState) -> (usize, usize) {
    let found = st.sessions.restore(chrono::Utc::now());
    let ctx = RequestCtx::from_headers(&axum::http::HeaderMap::new());
    for s in &found.restored {
        let how = if s.paused_at().is_some() {
            "paused, as it was"
        } else {
            "its processes did not survive the restart"
        };
        let why = format!("sandbox {} restored with its files ({how})", s.id);
        record(st, s, "sandbox.restore", why, &ctx).await;
    }
    for lost in &found.lost {
        let tenant = if lost.tenant.is_empty() {
            "unknown"
        } else {
            &lost.tenant
        };
        let mut rec = server_record(
            "sandbox.lost",
            tenant,
            &ctx,
            Verdict::Allow,
            format!("sandbox {} lost at restart: {}", lost.id, lost.reason),
        );
        rec.session_id = Some(lost.id.clone());
        st.backend.record(rec).await;
        tracing::warn!(sandbox = %lost.id, "sandbox lost at restart: {}", lost.reason);
    }
    (found.restored.len(), found.lost.len())
}

async fn record(st: &AppState, s: &Session, event: &str, reason: String, ctx: &RequestCtx) {
    let mut rec = server_record(event, &s.tenant, ctx, Verdict::Allow, reason);
    rec.session_id = Some(s.id.clone());
    rec.isolation = Some(s.spec.tier);
    st.backend.record(rec).await;
}
