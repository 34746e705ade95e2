//! The data of the dashboard's panels at one instant, as JSON: the seed's five panels
//! (throughput per hour by status, budget burn with a projection to the ceiling, p50/p99
//! per operation class against the latency targets, active agents, error rate in a sliding
//! window), the kill switch, pending approvals and recent denials.
//!
//! A key with the `admin` scope sees every tenant; any other key sees its own tenant.
//! Approvals are always the caller's tenant's (those are the ones it can decide).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_core::Money;
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::store::ApprovalState;
use serde::Serialize;

use crate::auth::Caller;
use crate::error::ServerError;
use crate::metrics::recent::{quantile, Denial, StatusCounts};
use crate::metrics::route::{read_state, StateNow};
use crate::model::KillView;
use crate::state::AppState;

/// The error-rate window and the alert threshold (the seed's example: 20 % over 30 min).
pub const ERROR_WINDOW_MIN: i64 = 30;
pub const ERROR_THRESHOLD: f64 = 0.2;
/// How many hours the throughput panel shows.
pub const THROUGHPUT_HOURS: i64 = 24;
/// The latency panel's bucket and span.
pub const LATENCY_BUCKET_MIN: i64 = 5;
pub const LATENCY_SPAN_MIN: i64 = 120;
/// The latency classes, as the gateway's latency budgets name them.
pub const CLASSES: [&str; 3] = ["interactive", "planning", "execution"];

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub at: DateTime<Utc>,
    /// The tenant shown, or `None` for all of them (an admin key).
    pub tenant: Option<String>,
    pub caller_tenant: String,
    pub scopes: Vec<String>,
    pub kill: KillView,
    pub throughput: Throughput,
    pub budget: Budget,
    pub latency: Vec<Latency>,
    pub agents: Vec<Agent>,
    pub errors: Errors,
    pub approvals: Vec<PendingApproval>,
    pub denials: Vec<Denial>,
    pub sandboxes: usize,
}

#[derive(Debug, Serialize, Default)]
pub struct Throughput {
    /// Start of each hour (unix seconds), oldest first.
    pub hours: Vec<i64>,
    pub success: Vec<u64>,
    pub failure: Vec<u64>,
    pub timeout: Vec<u64>,
    pub denied: Vec<u64>,
    /// The last 60 minutes.
    pub last_hour: StatusCounts,
}

#[derive(Debug, Serialize, Default)]
pub struct Budget {
    pub scope: String,
    pub currency: String,
    /// Decimal text, as the ledger keeps it; the series are floating point for drawing.
    pub spent: String,
    pub reserved: String,
    pub ceiling: Option<String>,
    pub remaining: Option<String>,
    /// Spend over the last hour, per hour.
    pub burn_per_hour: f64,
    /// When the ceiling is reached at that rate.
    pub exhausted_at: Option<DateTime<Utc>>,
    /// Cumulative spend over the last 24 h (unix seconds, amount).
    pub t: Vec<i64>,
    pub cumulative: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub class: &'static str,
    pub count: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub target_p50_ms: f64,
    pub target_p99_ms: f64,
    /// Per bucket (unix seconds of its start): p50 and p99 in ms, `null` when empty.
    pub t: Vec<i64>,
    pub p50: Vec<Option<f64>>,
    pub p99: Vec<Option<f64>>,
}

#[derive(Debug, Serialize)]
pub struct Agent {
    pub tenant: String,
    pub sandbox: Option<String>,
    pub agent: Option<String>,
    pub action: String,
    pub elapsed_s: i64,
}

#[derive(Debug, Serialize, Default)]
pub struct Errors {
    pub window_min: i64,
    pub threshold: f64,
    /// Failed and timed-out over everything that ran in the window; `None` when nothing ran.
    pub rate: Option<f64>,
    pub alert: bool,
    pub ran: u64,
    pub errors: u64,
    /// Per minute over the last 3 hours: the rate over the window ending then.
    pub t: Vec<i64>,
    pub series: Vec<Option<f64>>,
}

#[derive(Debug, Serialize)]
pub struct PendingApproval {
    pub id: String,
    pub kind: String,
    /// The operation's arguments (redacted before they were stored), shortened.
    pub summary: String,
    pub reason: String,
    pub rationale: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

fn as_f64(m: &Money) -> f64 {
    m.to_string().parse::<f64>().unwrap_or(0.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn throughput(per_min: &[(i64, StatusCounts)], now: DateTime<Utc>) -> Throughput {
    let this_hour = now.timestamp().div_euclid(3600);
    let first = this_hour - THROUGHPUT_HOURS + 1;
    let n = usize::try_from(THROUGHPUT_HOURS).unwrap_or(24);
    let mut buckets = vec![StatusCounts::default(); n];
    let mut last_hour = StatusCounts::default();
    let now_min = now.timestamp().div_euclid(60);
    for (m, c) in per_min {
        let h = (m * 60).div_euclid(3600);
        if let Ok(i) = usize::try_from(h - first) {
            if let Some(b) = buckets.get_mut(i) {
                b.add(c);
            }
        }
        if *m > now_min - 60 {
            last_hour.add(c);
        }
    }
    Throughput {
        hours: (first..=this_hour).map(|h| h * 3600).collect(),
        success: buckets.iter().map(|b| b.success).collect(),
        failure: buckets.iter().map(|b| b.failure).collect(),
        timeout: buckets.iter().map(|b| b.timeout).collect(),
        denied: buckets.iter().map(|b| b.denied).collect(),
        last_hour,
    }
}

/// The error rate over the window ending at each minute of the last 3 hours.
fn errors(per_min: &[(i64, StatusCounts)], now: DateTime<Utc>) -> Errors {
    let now_min = now.timestamp().div_euclid(60);
    let rate_at = |end: i64| {
        let mut c = StatusCounts::default();
        for (m, n) in per_min {
            if *m > end - ERROR_WINDOW_MIN && *m <= end {
                c.add(n);
            }
        }
        let ran = c.total() - c.denied;
        (c, ran)
    };
    let (c, ran) = rate_at(now_min);
    let rate = (ran > 0).then(|| c.errors() as f64 / ran as f64);
    let mut t = Vec::new();
    let mut series = Vec::new();
    for m in (now_min - 180)..=now_min {
        let (c, ran) = rate_at(m);
        t.push(m * 60);
        series.push((ran > 0).then(|| c.errors() as f64 / ran as f64));
    }
    Errors {
        window_min: ERROR_WINDOW_MIN,
        threshold: ERROR_THRESHOLD,
        rate,
        alert: rate.is_some_and(|r| r > ERROR_THRESHOLD),
        ran,
        errors: c.errors(),
        t,
        series,
    }
}

fn budget(
    st: &AppState,
    state: &StateNow,
    tenant: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Budget, ServerError> {
    let line = state
        .budgets
        .iter()
        .find(|b| b.tenant.as_deref() == tenant)
        .cloned();
    let Some(line) = line else {
        return Ok(Budget::default());
    };
    let since = now - chrono::Duration::hours(24);
    let mut lines = st.backend.store().ledger(since, now)?;
    lines.retain(|l| tenant.is_none_or(|t| t == l.tenant));
    lines.sort_by_key(|l| l.at);
    let spent = as_f64(&line.spent);
    let in_window: f64 = lines.iter().map(|l| as_f64(&l.amount)).sum();
    let hour_ago = now - chrono::Duration::hours(1);
    let burn_per_hour: f64 = lines
        .iter()
        .filter(|l| l.at > hour_ago)
        .map(|l| as_f64(&l.amount))
        .sum();
    let mut acc = (spent - in_window).max(0.0);
    let mut t = vec![since.timestamp()];
    let mut cumulative = vec![acc];
    for l in &lines {
        acc += as_f64(&l.amount);
        t.push(l.at.timestamp());
        cumulative.push(acc);
    }
    t.push(now.timestamp());
    cumulative.push(acc);
    let exhausted_at = match (&line.remaining, burn_per_hour > 0.0) {
        (Some(r), true) => {
            let hours = as_f64(r) / burn_per_hour;
            let secs = (hours * 3600.0).min(10.0 * 365.0 * 86400.0);
            Some(now + chrono::Duration::seconds(secs as i64))
        }
        _ => None,
    };
    Ok(Budget {
        scope: line.scope.clone(),
        currency: line.currency.clone(),
        spent: line.spent.to_string(),
        reserved: line.reserved.to_string(),
        ceiling: line.ceiling.map(|c| c.to_string()),
        remaining: line.remaining.map(|r| r.to_string()),
        burn_per_hour,
        exhausted_at,
        t,
        cumulative,
    })
}

fn latency(st: &AppState, tenant: Option<&str>, now: DateTime<Utc>) -> Vec<Latency> {
    let targets = &st.backend.gateway().config().budget.latency;
    let Ok(recent) = st.telemetry.recent.lock() else {
        return Vec::new();
    };
    let span_start = now - chrono::Duration::minutes(LATENCY_SPAN_MIN);
    let hour_ago = now - chrono::Duration::hours(1);
    CLASSES
        .iter()
        .map(|&class| {
            let tg = match class {
                "interactive" => targets.interactive,
                "planning" => targets.planning,
                _ => targets.execution,
            };
            let mut last = recent.durations(tenant, class, hour_ago);
            let count = last.len();
            let p50 = quantile(&mut last, 0.5).map(ms);
            let p99 = quantile(&mut last, 0.99).map(ms);
            let first = span_start.timestamp().div_euclid(LATENCY_BUCKET_MIN * 60);
            let lastb = now.timestamp().div_euclid(LATENCY_BUCKET_MIN * 60);
            let mut t = Vec::new();
            let mut b50 = Vec::new();
            let mut b99 = Vec::new();
            for b in first..=lastb {
                let from =
                    DateTime::<Utc>::from_timestamp(b * LATENCY_BUCKET_MIN * 60, 0).unwrap_or(now);
                let to = from + chrono::Duration::minutes(LATENCY_BUCKET_MIN);
                let mut v = recent.samples(tenant, class, from, to);
                t.push(from.timestamp());
                b50.push(quantile(&mut v, 0.5).map(ms));
                b99.push(quantile(&mut v, 0.99).map(ms));
            }
            Latency {
                class,
                count,
                p50_ms: p50,
                p99_ms: p99,
                target_p50_ms: ms(tg.p50.as_duration()),
                target_p99_ms: ms(tg.p99.as_duration()),
                t,
                p50: b50,
                p99: b99,
            }
        })
        .collect()
}

fn agents(st: &AppState, tenant: Option<&str>, now: DateTime<Utc>) -> Vec<Agent> {
    st.backend
        .activities()
        .into_iter()
        .filter(|a| tenant.is_none_or(|t| t == a.tenant))
        .map(|a| Agent {
            elapsed_s: (now - a.started).num_seconds().max(0),
            tenant: a.tenant,
            sandbox: a.sandbox,
            agent: a.agent,
            action: a.action,
        })
        .collect()
}

fn approvals(
    st: &AppState,
    tenant: &str,
    now: DateTime<Utc>,
) -> Result<Vec<PendingApproval>, ServerError> {
    let list = st
        .backend
        .store()
        .list_approvals(Some(ApprovalState::Pending))?;
    Ok(list
        .into_iter()
        .filter(|a| a.tenant == tenant && a.expires_at > now)
        .map(|a| {
            let op: serde_json::Value =
                serde_json::from_str(&a.operation).unwrap_or(serde_json::Value::Null);
            let args = op.get("args").cloned().unwrap_or(serde_json::Value::Null);
            let kind = args
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("operation")
                .to_string();
            let summary: String = args.to_string().chars().take(300).collect();
            PendingApproval {
                id: a.id,
                kind,
                summary,
                reason: a.reason,
                rationale: a.rationale,
                created_at: a.created_at,
                expires_at: a.expires_at,
            }
        })
        .collect())
}

/// Everything the page shows, for `caller`. Blocking (store reads).
pub fn take(st: &AppState, caller: &Caller) -> Result<Snapshot, ServerError> {
    let now = Utc::now();
    let admin = caller.credential.scopes.contains(Scope::Admin);
    let tenant = (!admin).then(|| caller.tenant().to_string());
    let tenant = tenant.as_deref();
    let state = read_state(st, tenant)?;
    let kill = st.backend.store().kill_state()?;
    let (per_min, denials) = {
        let recent = st
            .telemetry
            .recent
            .lock()
            .map_err(|_| ServerError::Internal {
                action: "reading recent operations",
            })?;
        let since = now - chrono::Duration::hours(THROUGHPUT_HOURS);
        (recent.per_minute(tenant, since), recent.denials(tenant, 20))
    };
    Ok(Snapshot {
        at: now,
        tenant: tenant.map(str::to_string),
        caller_tenant: caller.tenant().to_string(),
        scopes: caller
            .credential
            .scopes
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
        kill: KillView {
            engaged: kill.is_some(),
            reason: kill.as_ref().map(|k| k.reason.clone()),
            by: kill.as_ref().map(|k| k.by.clone()),
            at: kill.map(|k| k.at),
        },
        throughput: throughput(&per_min, now),
        budget: budget(st, &state, tenant, now)?,
        latency: latency(st, tenant, now),
        agents: agents(st, tenant, now),
        errors: errors(&per_min, now),
        approvals: approvals(st, caller.tenant(), now)?,
        denials,
        sandboxes: match tenant {
            Some(t) => st.sessions.list(t).len(),
            None => state.sandboxes,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(success: u64, failure: u64, timeout: u64, denied: u64) -> StatusCounts {
        StatusCounts {
            success,
            failure,
            timeout,
            denied,
        }
    }

    #[test]
    fn error_rate_counts_what_ran_in_the_window_only() {
        let now = Utc::now();
        let m = now.timestamp().div_euclid(60);
        let per_min = vec![
            (m - 40, counts(0, 10, 0, 0)), // outside the 30-minute window
            (m - 5, counts(6, 1, 1, 5)),   // denials did not run
            (m, counts(2, 0, 0, 0)),
        ];
        let e = errors(&per_min, now);
        assert_eq!((e.ran, e.errors), (10, 2));
        assert_eq!(e.rate, Some(0.2));
        assert!(!e.alert, "20 % is the threshold, not above it");
        let per_min = vec![(m, counts(1, 1, 0, 0))];
        assert!(errors(&per_min, now).alert);
    }

    #[test]
    fn throughput_is_bucketed_by_hour() {
        let now = Utc::now();
        let m = now.timestamp().div_euclid(60);
        let per_min = vec![
            (m, counts(3, 1, 1, 2)),
            (m - 24 * 60 - 5, counts(9, 0, 0, 0)),
        ];
        let t = throughput(&per_min, now);
        assert_eq!(t.hours.len(), 24);
        assert_eq!(*t.success.last().unwrap_or(&0), 3);
        assert_eq!(
            t.success.iter().sum::<u64>(),
            3,
            "older than a day is left out"
        );
        assert_eq!(t.last_hour, counts(3, 1, 1, 2));
    }
}
