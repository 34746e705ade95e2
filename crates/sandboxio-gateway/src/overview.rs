//! What an operator's view (the server's `/metrics` and dashboard) reads from the state
//! store, in the vocabulary of the front ends: budget lines of the global and tenant scopes
//! (never session or agent scopes: those are many and short-lived).

use sandboxio_budget::ScopeKey;
use sandboxio_core::Money;

use crate::chain::Gateway;
use crate::error::GatewayError;

/// Spend, open reservations and the ceiling of one lifetime budget scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetLine {
    /// `global` or `tenant:<id>`.
    pub scope: String,
    /// The tenant of a tenant scope.
    pub tenant: Option<String>,
    pub currency: String,
    pub spent: Money,
    pub reserved: Money,
    pub ceiling: Option<Money>,
    pub remaining: Option<Money>,
    /// Why the scope is closed (an overrun), when it is.
    pub closed: Option<String>,
}

impl Gateway {
    /// The global budget and those of `tenants`, read from the store (a read, no fsync).
    pub fn budget_lines(&self, tenants: &[String]) -> Result<Vec<BudgetLine>, GatewayError> {
        let mut scopes = vec![ScopeKey::Global];
        scopes.extend(tenants.iter().map(|t| ScopeKey::Tenant(t.clone())));
        let summaries = self
            .store()
            .budget_summary(&self.config().budget, &scopes)?;
        Ok(summaries
            .into_iter()
            .map(|s| BudgetLine {
                scope: s.scope.to_string(),
                tenant: match &s.scope {
                    ScopeKey::Tenant(t) => Some(t.clone()),
                    _ => None,
                },
                currency: s.currency,
                spent: s.total,
                reserved: s.reserved,
                ceiling: s.ceiling,
                remaining: s.remaining,
                closed: s.closed,
            })
            .collect())
    }
}
