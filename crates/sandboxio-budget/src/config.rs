//! Configuration: the `[budget]` and `[rate_limits]` sections of `sandboxio.toml`.
//! Human units throughout (Money strings, durations like `"500ms"`); unknown keys are errors.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use sandboxio_core::{CostCategory, Money};
use serde::{Deserialize, Serialize};

use crate::error::BudgetError;
use crate::latency::LatencyConfig;
use crate::ledger::ScopeKey;
use crate::ratecard::RateCard;

/// Default fraction of a ceiling at which a warning is emitted.
pub const DEFAULT_WARN_FRACTION: f64 = 0.8;
/// Default currency label (amounts are plain decimals; the label is for display).
pub const DEFAULT_CURRENCY: &str = "USD";

/// `[budget]`: ceilings per scope, warn fraction, rate card and latency budgets.
///
/// A scope without a ceiling is tracked but never denies. Ceilings apply together: a
/// reservation must fit under the global, the tenant's and the session's ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Ceiling on everything spent through this gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<Money>,
    /// Ceiling for each tenant that has no entry in `tenants`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_tenant: Option<Money>,
    /// Ceiling for each session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_session: Option<Money>,
    /// Ceilings for named tenants (override `per_tenant`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, Money>,
    /// `[[budget.ceiling]]`: ceilings on any scope, over a calendar or rolling window or a
    /// lifetime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ceiling: Vec<CeilingRule>,
    /// Fraction of a ceiling whose crossing emits one warning (0 < f <= 1).
    #[serde(default = "default_warn_fraction")]
    pub warn_fraction: f64,
    /// Estimate reserved for an operation that gives none (default 0).
    #[serde(default)]
    pub default_estimate: Money,
    #[serde(default)]
    pub rate_card: RateCard,
    #[serde(default)]
    pub latency: LatencyConfig,
}

/// The kind of scope a `[[budget.ceiling]]` applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    Global,
    Tenant,
    Session,
    Agent,
    Category,
}

/// One `[[budget.ceiling]]`: `amount` per `window` for each scope of kind `scope` (or only
/// the one named by `name`: a tenant id, a session id, an agent name, a category).
///
/// ```toml
/// [[budget.ceiling]]
/// scope = "tenant"
/// amount = "1.00"
/// window = "day"      # lifetime (default); day, week or month (UTC calendar windows);
///                     # or rolling:<duration>, e.g. rolling:24h (the last 24 hours)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CeilingRule {
    pub scope: ScopeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub amount: Money,
    #[serde(default)]
    pub window: crate::window::Window,
}

impl CeilingRule {
    /// Whether this rule's scope kind and name cover `base` (a scope without window).
    pub fn names(&self, base: &ScopeKey) -> bool {
        let (kind, name) = match base {
            ScopeKey::Global => (ScopeKind::Global, None),
            ScopeKey::Tenant(t) => (ScopeKind::Tenant, Some(t.as_str())),
            ScopeKey::Session(s) => (ScopeKind::Session, Some(s.as_str())),
            ScopeKey::Agent { agent, .. } => (ScopeKind::Agent, Some(agent.as_str())),
            ScopeKey::Category(c) => (ScopeKind::Category, Some(c.as_str())),
            ScopeKey::Window { .. } => return false,
        };
        kind == self.scope
            && match (&self.name, name) {
                (None, _) => true,
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => false,
            }
    }
}

fn min_money(a: Option<Money>, b: Money) -> Option<Money> {
    Some(match a {
        Some(a) if a < b => a,
        _ => b,
    })
}

fn default_currency() -> String {
    DEFAULT_CURRENCY.to_string()
}

fn default_warn_fraction() -> f64 {
    DEFAULT_WARN_FRACTION
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            currency: default_currency(),
            global: None,
            per_tenant: None,
            per_session: None,
            tenants: BTreeMap::new(),
            ceiling: Vec::new(),
            warn_fraction: DEFAULT_WARN_FRACTION,
            default_estimate: Money::ZERO,
            rate_card: RateCard::default(),
            latency: LatencyConfig::default(),
        }
    }
}

fn invalid(key: &str, why: impl Into<String>) -> BudgetError {
    BudgetError::InvalidConfig {
        key: key.to_string(),
        why: why.into(),
    }
}

impl BudgetConfig {
    /// Parses a `[budget]` table's TOML text and validates it.
    pub fn from_toml(text: &str) -> Result<BudgetConfig, BudgetError> {
        let cfg: BudgetConfig = toml::from_str(text)
            .map_err(|e| invalid("budget", e.message().trim_end_matches('.')))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value; the gateway calls this after deserialising.
    pub fn validate(&self) -> Result<(), BudgetError> {
        if self.currency.len() != 3 || !self.currency.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(invalid(
                "currency",
                format!("`{}` is not a three-letter code such as USD", self.currency),
            ));
        }
        let non_neg = |key: &str, m: &Money| {
            if m.is_negative() {
                Err(invalid(key, format!("`{m}` is negative")))
            } else {
                Ok(())
            }
        };
        for (k, m) in [
            ("global", &self.global),
            ("per_tenant", &self.per_tenant),
            ("per_session", &self.per_session),
        ] {
            if let Some(m) = m {
                non_neg(k, m)?;
            }
        }
        for (t, m) in &self.tenants {
            non_neg(&format!("tenants.{t}"), m)?;
        }
        for (i, c) in self.ceiling.iter().enumerate() {
            non_neg(&format!("ceiling[{i}].amount"), &c.amount)?;
            if c.scope == ScopeKind::Global && c.name.is_some() {
                return Err(invalid(
                    &format!("ceiling[{i}].name"),
                    "a global ceiling names no scope",
                ));
            }
            if c.scope == ScopeKind::Category {
                if let Some(n) = &c.name {
                    if !CostCategory::ALL.iter().any(|k| k.as_str() == n) {
                        return Err(invalid(
                            &format!("ceiling[{i}].name"),
                            format!("`{n}` is not a cost category (compute, api, storage, human)"),
                        ));
                    }
                }
            }
        }
        non_neg("default_estimate", &self.default_estimate)?;
        if !(self.warn_fraction > 0.0 && self.warn_fraction <= 1.0) {
            return Err(invalid(
                "warn_fraction",
                format!("`{}` is not in (0, 1]", self.warn_fraction),
            ));
        }
        self.rate_card.validate()?;
        self.latency.validate()?;
        Ok(())
    }

    /// The warn fraction as a decimal (4 decimal places).
    pub fn warn_fraction_decimal(&self) -> Decimal {
        Decimal::try_from(self.warn_fraction)
            .map(|d| d.round_dp(4))
            .unwrap_or(Decimal::new(8, 1))
    }

    /// The ceiling of a scope, if it has one: the smallest that applies.
    pub fn ceiling(&self, scope: &ScopeKey) -> Option<Money> {
        let (base, window) = match scope {
            ScopeKey::Window { scope, window } => {
                (scope.as_ref(), crate::window::Window::of_id(window))
            }
            other => (other, Some(crate::window::Window::Lifetime)),
        };
        let window = window?;
        let mut c = None;
        if window == crate::window::Window::Lifetime {
            c = match base {
                ScopeKey::Global => self.global,
                ScopeKey::Tenant(t) => self.tenants.get(t).copied().or(self.per_tenant),
                ScopeKey::Session(_) => self.per_session,
                _ => None,
            };
        }
        for rule in &self.ceiling {
            if rule.window == window && rule.names(base) {
                c = min_money(c, rule.amount);
            }
        }
        c
    }

    /// Whether any ceiling names scopes of this kind.
    pub fn ceilings_for(&self, kind: ScopeKind) -> bool {
        self.ceiling.iter().any(|c| c.scope == kind)
    }
}
