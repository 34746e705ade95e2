//! Commands on the shared state: kill switch, approvals, costs, budget.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use sandboxio_core::{AdminAction, CoreError, CostEntry, HumanDuration};
use sandboxio_gateway::store::ApprovalState;
use sandboxio_gateway::Outcome;

use crate::args::{ApprovalsCmd, Common};
use crate::error::CliError;
use crate::exit;
use crate::out::{errln, outln};
use crate::output::escape::field;
use crate::setup;

/// Runs an operator action through the gateway (so it leaves its record) and reports it.
async fn admin(common: &Common, action: AdminAction, actor: &str) -> Result<Outcome> {
    let loaded = setup::load(common)?;
    let rt = loaded.runtime(common, None)?;
    // Checked against the trail first, like every run (a store that lost work, or a trail
    // that lost its head, answers here instead of being blessed by this action's new
    // head). Engaging the kill switch goes on whatever the check says (the brake works
    // whatever the state); a loss it found keeps the engagement from storing a head
    // over it (`Auditor::freeze_heads`), so the next start still refuses.
    let checked = rt.gateway().check_anchor().await;
    match (checked, &action) {
        (Err(e), AdminAction::Kill { .. }) => {
            errln!("warning: {e:#}; engaging the kill switch anyway");
        }
        (Err(e), _) => return Err(e.into()),
        (Ok(_), _) => {}
    }
    // What an earlier process left unrecorded (an operator action killed before its
    // record, a record the trail could not take) is recorded first, so the trail has the
    // actions in the order they took effect.
    match (rt.gateway().recover_interrupted().await, &action) {
        (Err(e), AdminAction::Kill { .. }) => {
            errln!("warning: {e:#}; engaging the kill switch anyway");
        }
        (Err(e), _) => return Err(e.into()),
        (Ok(_), _) => {}
    }
    Ok(rt.gateway().operator("default", actor, action).await?)
}

pub async fn kill(common: &Common, reason: &str) -> Result<i32> {
    // The reason is what operators and the trail are told: never empty.
    if reason.trim().is_empty() {
        return Err(CliError::EmptyReason { flag: "--reason" }.into());
    }
    admin(
        common,
        AdminAction::Kill {
            reason: reason.to_string(),
        },
        &setup::actor(),
    )
    .await?;
    outln!("kill switch engaged: {}", field(reason))?;
    Ok(exit::OK)
}

/// Reopens a budget scope closed by an overrun (a recorded operator action). A scope
/// that does not parse is a usage error, refused before the state is opened.
pub async fn reopen(common: &Common, scope: &str) -> Result<i32> {
    scope.parse::<sandboxio_gateway::layers::budget::ScopeKey>()?;
    admin(
        common,
        AdminAction::BudgetReopen {
            scope: scope.to_string(),
        },
        &setup::actor(),
    )
    .await?;
    outln!("budget scope {} reopened", field(scope))?;
    Ok(exit::OK)
}

pub async fn resume(common: &Common) -> Result<i32> {
    admin(common, AdminAction::Resume, &setup::actor()).await?;
    outln!("kill switch released")?;
    Ok(exit::OK)
}

pub async fn approvals(common: &Common, cmd: ApprovalsCmd) -> Result<i32> {
    // An id no approval can have is a usage error, refused before the state is opened. A
    // well-formed id the store does not know is an operator action refused by the chain,
    // and recorded like every operator action.
    if let ApprovalsCmd::Approve { id, .. } | ApprovalsCmd::Deny { id, .. } = &cmd {
        check_approval_id(id)?;
    }
    let loaded = setup::load(common)?;
    let store = loaded.open_store()?;
    store.expire_approvals(Utc::now())?;
    match cmd {
        ApprovalsCmd::List { all } => {
            let list = store.list_approvals(if all {
                None
            } else {
                Some(ApprovalState::Pending)
            })?;
            if common.json {
                outln!("{}", crate::out::pretty(&list)?)?;
            } else if list.is_empty() {
                outln!("no {}approvals", if all { "" } else { "pending " })?;
            } else {
                for a in list {
                    outln!(
                        "{}  {:8}  tenant={}  expires={}  {}\n    why: {}\n    op: {}",
                        field(&a.id),
                        a.state.as_str(),
                        field(&a.tenant),
                        a.expires_at.format("%Y-%m-%dT%H:%M:%SZ"),
                        field(&a.reason),
                        if a.rationale.is_empty() {
                            "-".into()
                        } else {
                            field(&a.rationale)
                        },
                        field(&a.operation)
                    )?;
                }
            }
        }
        ApprovalsCmd::Approve { id, by, reason } => {
            admin(
                common,
                AdminAction::Approve {
                    approval_id: id.clone(),
                    reason,
                },
                &by,
            )
            .await?;
            outln!("approved {} (by {})", field(&id), field(&by))?;
        }
        ApprovalsCmd::Deny { id, by, reason } => {
            admin(
                common,
                AdminAction::Deny {
                    approval_id: id.clone(),
                    reason,
                },
                &by,
            )
            .await?;
            outln!("denied {} (by {})", field(&id), field(&by))?;
        }
    }
    Ok(exit::OK)
}

/// Approval ids are `apr_` and the start of an operation id (letters, digits, `-`).
fn check_approval_id(id: &str) -> Result<(), CliError> {
    let rest = id.strip_prefix("apr_").unwrap_or("");
    if rest.is_empty()
        || rest.len() > 64
        || !rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(CliError::CommandLine {
            message: format!(
                "`{}` is not an approval id (ids look like `apr_0123456789abcdef`; `sandboxio \
                 approvals list` shows them)",
                field(id)
            ),
        });
    }
    Ok(())
}

/// RFC 3339, or a duration meaning that long ago.
pub fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let d: HumanDuration = s.parse()?;
    let too_far = || CoreError::InvalidDuration {
        input: s.to_string(),
        why: "too far in the past",
    };
    let d = chrono::Duration::from_std(d.0).map_err(|_| too_far())?;
    Ok(Utc::now().checked_sub_signed(d).ok_or_else(too_far)?)
}

/// Whether a ledger line has every label in `want`. `tenant_id` and `category` are the
/// ledger's own columns, never a label of the same name (which a client could have set on
/// its sandbox to put its charges in another tenant's report; the server refuses those
/// names now, and a line written before is still matched by its columns only).
fn cost_line_matches(
    l: &sandboxio_gateway::store::LedgerLine,
    want: &BTreeMap<String, String>,
) -> bool {
    want.iter().all(|(k, v)| match k.as_str() {
        "tenant_id" => &l.tenant == v,
        "category" => l.category.as_str() == v,
        _ => l.labels.get(k) == Some(v),
    })
}

pub fn costs(common: &Common, since: &str, until: Option<&str>, labels: &[String]) -> Result<i32> {
    let loaded = setup::load(common)?;
    let store = loaded.open_store()?;
    warn_if_lost(&loaded, store.as_ref())?;
    let since = parse_time(since)?;
    let until = until.map(parse_time).transpose()?.unwrap_or_else(Utc::now);
    let mut want = BTreeMap::new();
    for l in labels {
        let Some((k, v)) = l.split_once('=') else {
            return Err(CliError::Label { input: l.clone() }.into());
        };
        want.insert(k.to_string(), v.to_string());
    }
    let entries: Vec<CostEntry> = store
        .ledger(since, until)?
        .into_iter()
        .filter(|l| cost_line_matches(l, &want))
        .map(|l| {
            let mut labels = l.labels.clone();
            labels.insert("tenant_id".into(), l.tenant.clone());
            labels.insert("category".into(), l.category.as_str().into());
            CostEntry {
                object_id: l.operation_id,
                description: l.description,
                interval_start: l.at,
                cost_usd: l.amount,
                labels,
            }
        })
        .collect();
    if common.json {
        outln!("{}", crate::out::pretty(&entries)?)?;
    } else {
        let mut total = sandboxio_core::Money::ZERO;
        for e in &entries {
            outln!(
                "{}  {}  {:>12}  {}",
                e.interval_start.format("%Y-%m-%dT%H:%M:%SZ"),
                e.object_id,
                e.cost_usd.to_string(),
                e.description
            )?;
            total = total.checked_add(e.cost_usd)?;
        }
        outln!(
            "{} entries, total {} (resolution: per operation, from the settled ledger)",
            entries.len(),
            total
        )?;
    }
    Ok(exit::OK)
}

/// Spend and costs read from a store that lost work its trail records are an older
/// store's: said on stderr (the report itself is still printed, as `status` does).
fn warn_if_lost(loaded: &setup::Loaded, store: &dyn sandboxio_gateway::store::Store) -> Result<()> {
    if let Some(lost) = setup::lost_work(loaded, store)? {
        errln!(
            "warning[SBX_E1533]: the state store lost work its audit trail records ({}): these figures are an older store's; `{}`",
            crate::output::escape::field(&lost.describe()),
            sandboxio_gateway::store::RECOVER_COMMAND
        );
    }
    Ok(())
}

pub fn budget(common: &Common, tenant: &str) -> Result<i32> {
    sandboxio_core::check_tenant(tenant)?;
    let loaded = setup::load(common)?;
    let gw_cfg = setup::gateway_config(&loaded, None)?;
    let store = loaded.open_store()?;
    warn_if_lost(&loaded, store.as_ref())?;
    let summary = store.budget_summary(&gw_cfg.budget, &setup::scopes_for(tenant))?;
    if common.json {
        outln!("{}", crate::out::pretty(&summary)?)?;
    } else {
        for s in summary {
            let ceiling = s
                .ceiling
                .map(|c| c.to_string())
                .unwrap_or_else(|| "no ceiling".into());
            let remaining = s
                .remaining
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into());
            outln!(
                "{}: spent {} {}, reserved {}, ceiling {}, remaining {}{}",
                s.scope,
                s.total,
                s.currency,
                s.reserved,
                ceiling,
                remaining,
                if s.warned {
                    " (warn fraction crossed)"
                } else {
                    ""
                }
            )?;
            for (c, v) in s.by_category {
                outln!("    {:8} {}", c.as_str(), v)?;
            }
        }
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod cost_filter_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tenant_and_category_match_the_ledgers_columns_not_a_label() {
        let line = sandboxio_gateway::store::LedgerLine {
            operation_id: "op".into(),
            tenant: "acme".into(),
            category: sandboxio_core::CostCategory::ALL[0],
            amount: sandboxio_core::Money::ZERO,
            at: Utc::now(),
            description: String::new(),
            labels: [
                ("tenant_id".to_string(), "victimcorp".to_string()),
                ("category".to_string(), "spoofed".to_string()),
                ("team".to_string(), "data".to_string()),
            ]
            .into_iter()
            .collect(),
        };
        let want = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(!cost_line_matches(&line, &want("tenant_id", "victimcorp")));
        assert!(cost_line_matches(&line, &want("tenant_id", "acme")));
        assert!(!cost_line_matches(&line, &want("category", "spoofed")));
        let cat = sandboxio_core::CostCategory::ALL[0].as_str();
        assert!(cost_line_matches(&line, &want("category", cat)));
        assert!(cost_line_matches(&line, &want("team", "data")));
    }
}
