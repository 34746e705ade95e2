//! `sandboxio status`: what would stop the next operation. The kill switch, pending
//! approvals, budgets with their windows and the headroom left under each rate limit.

use anyhow::Result;
use chrono::{DateTime, Utc};
use sandboxio_core::CostCategory;
use sandboxio_gateway::layers::budget::{RateLimitRule, ReserveRequest, ScopeKey, Summary};
use sandboxio_gateway::store::{Approval, ApprovalState, KillState, RateUsage, Store};
use serde::Serialize;

use crate::args::Common;
use crate::exit;
use crate::out::outln;
use crate::output::escape::field;
use crate::setup;

/// The window of a scope without one: all spend since the ledger began.
const LIFETIME: &str = "lifetime";

#[derive(Debug, Serialize)]
struct Status {
    state_dir: String,
    /// What the store lacks that the trail records (every run refuses it, SBX_E1533).
    lost_work: Option<String>,
    kill_switch: Option<KillState>,
    pending_approvals: Vec<Approval>,
    budgets: Vec<Budget>,
    rate_limits: Vec<RateHeadroom>,
}

#[derive(Debug, Serialize)]
struct Budget {
    /// `lifetime`, or the current calendar window (`day:2026-12-01`).
    window: String,
    #[serde(flatten)]
    summary: Summary,
}

#[derive(Debug, Serialize)]
struct RateHeadroom {
    action: String,
    limit: String,
    window_ms: u64,
    tenant: Option<String>,
    agent: Option<String>,
    /// Keys (tenant, agent) that used part of the current window; every other key has the
    /// whole limit.
    used: Vec<KeyUse>,
}

#[derive(Debug, Serialize)]
struct KeyUse {
    tenant: String,
    agent: Option<String>,
    count: u64,
    remaining: u64,
    /// When the oldest counted event leaves the window (one more slot frees up).
    frees_at: DateTime<Utc>,
}

pub fn status(common: &Common, tenant: &str) -> Result<i32> {
    sandboxio_core::check_tenant(tenant)?;
    let loaded = setup::load(common)?;
    let cfg = setup::gateway_config(&loaded, None)?;
    let store = loaded.open_store()?;
    let now = Utc::now();
    store.expire_approvals(now)?;
    let budgets = store
        .budget_summary(&cfg.budget, &scopes(&cfg.budget, tenant, now))?
        .into_iter()
        .map(|summary| Budget {
            window: match &summary.scope {
                ScopeKey::Window { window, .. } => window.clone(),
                _ => LIFETIME.to_string(),
            },
            summary,
        })
        .collect();
    let mut rate_limits = Vec::new();
    for (i, rule) in cfg.rate_limits.limit.iter().enumerate() {
        rate_limits.push(headroom(store.as_ref(), i, rule, now)?);
    }
    let s = Status {
        state_dir: loaded.state_dir.display().to_string(),
        lost_work: setup::lost_work(&loaded, store.as_ref())?.map(|l| l.describe()),
        kill_switch: store.kill_state()?,
        pending_approvals: store.list_approvals(Some(ApprovalState::Pending))?,
        budgets,
        rate_limits,
    };
    if common.json {
        outln!("{}", crate::out::pretty(&s)?)?;
    } else {
        render(&s)?;
    }
    Ok(exit::OK)
}

/// The scopes a request of `tenant` made now would be charged to, in every cost category:
/// global, the tenant, the category scopes some ceiling names, and the current window of
/// every windowed ceiling that applies.
fn scopes(
    cfg: &sandboxio_gateway::layers::budget::BudgetConfig,
    tenant: &str,
    now: DateTime<Utc>,
) -> Vec<ScopeKey> {
    let mut v: Vec<ScopeKey> = setup::scopes_for(tenant);
    for category in CostCategory::ALL {
        let req = ReserveRequest {
            id: String::new(),
            tenant: tenant.to_string(),
            session: None,
            category,
            estimate: None,
            agent: None,
            at: Some(now),
        };
        for k in req.scopes_in(cfg) {
            if !v.contains(&k) {
                v.push(k);
            }
        }
    }
    v
}

fn headroom(
    store: &dyn Store,
    index: usize,
    rule: &RateLimitRule,
    now: DateTime<Utc>,
) -> Result<RateHeadroom> {
    let window =
        chrono::Duration::milliseconds(i64::try_from(rule.limit.window_ms()).unwrap_or(i64::MAX));
    let since = now.checked_sub_signed(window).unwrap_or(now);
    let limit = u64::from(rule.limit.count());
    let used = store
        .rate_usage(&format!("{index}|"), since)?
        .into_iter()
        .map(|u| key_use(&u, limit, window))
        .collect();
    Ok(RateHeadroom {
        action: rule.action.clone(),
        limit: rule.limit.to_string(),
        window_ms: rule.limit.window_ms(),
        tenant: rule.tenant.clone(),
        agent: rule.agent.clone(),
        used,
    })
}

/// Counting keys are `"{rule}|{tenant}|{agent}|{action}"`.
fn key_use(u: &RateUsage, limit: u64, window: chrono::Duration) -> KeyUse {
    let mut parts = u.key.splitn(4, '|').skip(1);
    let tenant = parts.next().unwrap_or_default().to_string();
    let agent = parts.next().filter(|a| !a.is_empty()).map(str::to_string);
    KeyUse {
        tenant,
        agent,
        count: u.count,
        remaining: limit.saturating_sub(u.count),
        frees_at: u.oldest.checked_add_signed(window).unwrap_or(u.oldest),
    }
}

fn render(s: &Status) -> Result<()> {
    let t = |d: &DateTime<Utc>| d.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    outln!("state: {}", s.state_dir)?;
    if let Some(lost) = &s.lost_work {
        outln!(
            "state: LOST WORK (SBX_E1533): {}; nothing runs until `{}`",
            field(lost),
            sandboxio_gateway::store::RECOVER_COMMAND
        )?;
    }
    match &s.kill_switch {
        Some(k) => outln!(
            "kill switch: ENGAGED since {} by {}: {} (release: sandboxio resume)",
            t(&k.at),
            field(&k.by),
            field(&k.reason)
        )?,
        None => outln!("kill switch: released")?,
    }
    outln!("pending approvals: {}", s.pending_approvals.len())?;
    for a in &s.pending_approvals {
        outln!(
            "  {}  tenant={}  expires={}  {}",
            field(&a.id),
            field(&a.tenant),
            t(&a.expires_at),
            field(&a.reason)
        )?;
    }
    outln!("budgets:")?;
    for b in &s.budgets {
        let ceiling = b
            .summary
            .ceiling
            .map(|c| format!("ceiling {c}"))
            .unwrap_or_else(|| "no ceiling".into());
        let remaining = b
            .summary
            .remaining
            .map(|r| r.to_string())
            .unwrap_or_else(|| "-".into());
        let closed = b
            .summary
            .closed
            .as_ref()
            .map(|why| {
                format!(
                    "; CLOSED ({why}; reopen: sandboxio budget --reopen {})",
                    b.summary.scope
                )
            })
            .unwrap_or_default();
        outln!(
            "  {} (window {}): spent {} {}, reserved {}, {ceiling}, remaining {remaining}{closed}",
            b.summary.scope.base(),
            b.window,
            b.summary.total,
            b.summary.currency,
            b.summary.reserved
        )?;
    }
    if s.rate_limits.is_empty() {
        outln!("rate limits: none configured")?;
    } else {
        outln!("rate limits:")?;
    }
    for r in &s.rate_limits {
        let scope = match (&r.tenant, &r.agent) {
            (Some(t), Some(a)) => format!(" (tenant {t}, agent {a})"),
            (Some(t), None) => format!(" (tenant {t})"),
            (None, Some(a)) => format!(" (agent {a})"),
            (None, None) => String::new(),
        };
        outln!("  {} {}{scope}", r.action, r.limit)?;
        if r.used.is_empty() {
            outln!("    unused in the current window: full headroom")?;
        }
        for u in &r.used {
            outln!(
                "    tenant={} agent={}: {} used, {} left; next slot frees at {}",
                field(&u.tenant),
                field(u.agent.as_deref().unwrap_or("-")),
                u.count,
                u.remaining,
                t(&u.frees_at)
            )?;
        }
    }
    Ok(())
}
