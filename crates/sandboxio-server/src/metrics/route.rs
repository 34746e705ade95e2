//! `GET /metrics`: the Prometheus text format (0.0.4), for a key with the `metrics` scope
//! (`Authorization: Bearer`, as Prometheus's `authorization` setting sends it). It shows
//! every tenant's counts and spend, so no other scope opens it; a refusal is recorded.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use sandboxio_core::Money;
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::store::ApprovalState;
use sandboxio_gateway::BudgetLine;
use utoipa_axum::router::OpenApiRouter;

use super::families::{Families, ScopeLabels};
use crate::auth::Caller;
use crate::error::ServerError;
use crate::state::AppState;

pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().route("/metrics", get(metrics))
}

fn as_f64(m: &Money) -> f64 {
    m.to_string().parse::<f64>().unwrap_or(f64::NAN)
}

/// What the gauges show, read from the store and this server.
pub struct StateNow {
    pub kill_engaged: bool,
    pub approvals_pending: usize,
    pub sandboxes: usize,
    pub running: usize,
    pub budgets: Vec<BudgetLine>,
}

/// Every tenant the store or this server knows of: those with a credential or a sandbox.
fn tenants(st: &AppState) -> Result<Vec<String>, ServerError> {
    let mut t: Vec<String> = st
        .backend
        .store()
        .list_credentials(None)?
        .into_iter()
        .map(|c| c.tenant)
        .collect();
    t.extend(st.sessions.tenants());
    t.sort();
    t.dedup();
    Ok(t)
}

/// Reads the state the dashboard and `/metrics` show. Blocking (store reads).
pub fn read_state(st: &AppState, tenants_only: Option<&str>) -> Result<StateNow, ServerError> {
    let store = st.backend.store();
    let now = Utc::now();
    let kill_engaged = store.kill_state()?.is_some();
    let approvals_pending = store
        .list_approvals(Some(ApprovalState::Pending))?
        .into_iter()
        .filter(|a| a.expires_at > now && tenants_only.is_none_or(|t| t == a.tenant))
        .count();
    let tenants = match tenants_only {
        Some(t) => vec![t.to_string()],
        None => tenants(st)?,
    };
    let mut budgets = st.backend.gateway().budget_lines(&tenants)?;
    if tenants_only.is_some() {
        budgets.retain(|b| b.tenant.is_some());
    }
    Ok(StateNow {
        kill_engaged,
        approvals_pending,
        sandboxes: st.sessions.count(),
        running: st.backend.running(),
        budgets,
    })
}

fn set_gauges(f: &Families, s: &StateNow) {
    f.kill_switch.set(i64::from(s.kill_engaged));
    f.approvals_pending
        .set(i64::try_from(s.approvals_pending).unwrap_or(i64::MAX));
    f.sandboxes_active
        .set(i64::try_from(s.sandboxes).unwrap_or(i64::MAX));
    f.operations_running
        .set(i64::try_from(s.running).unwrap_or(i64::MAX));
    for fam in [
        &f.budget_spent,
        &f.budget_reserved,
        &f.budget_ceiling,
        &f.budget_remaining,
    ] {
        fam.clear();
    }
    for b in &s.budgets {
        let l = ScopeLabels {
            sandboxio_budget_scope: b.scope.clone(),
            sandboxio_tenant: b.tenant.clone().unwrap_or_default(),
            currency: b.currency.clone(),
        };
        f.budget_spent.get_or_create(&l).set(as_f64(&b.spent));
        f.budget_reserved.get_or_create(&l).set(as_f64(&b.reserved));
        if let Some(c) = &b.ceiling {
            f.budget_ceiling.get_or_create(&l).set(as_f64(c));
        }
        if let Some(r) = &b.remaining {
            f.budget_remaining.get_or_create(&l).set(as_f64(r));
        }
    }
}

/// The whole exposition: state gauges refreshed, then every series encoded.
pub async fn render(st: &AppState) -> Result<String, ServerError> {
    let _one = st.telemetry.scrape.lock().await;
    let s2 = st.clone();
    let now = tokio::task::spawn_blocking(move || read_state(&s2, None))
        .await
        .map_err(|_| ServerError::Internal {
            action: "reading the state for metrics",
        })??;
    let f = &st.telemetry.families;
    set_gauges(f, &now);
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &f.registry).map_err(|_| {
        ServerError::Internal {
            action: "encoding metrics",
        }
    })?;
    Ok(out)
}

async fn metrics(State(st): State<AppState>, caller: Caller) -> Result<Response, ServerError> {
    caller.require(&st, Scope::Metrics).await?;
    let body = render(&st).await?;
    Ok(([(CONTENT_TYPE, CONTENT_TYPE_TEXT)], body).into_response())
}
