//! The budget ledger: reserve before, settle or release after. Pure state transitions on
//! plain serde values, so the gateway can load the touched scopes from its store, apply a
//! transition inside one transaction, and write them back.
//!
//! Invariant (per scope with a ceiling): `spent + reserved <= ceiling` after every
//! transition this module performs, given it held before and the ceiling did not shrink.
//! - `reserve` admits an estimate only if `spent + reserved + estimate <= ceiling` in
//!   every scope (global, tenant, session), otherwise nothing changes.
//! - `settle` charges the measured cost, all of it. What passes the reservation is an
//!   `overrun`: charged, recorded, and it closes every scope of the reservation (later
//!   reservations there are refused until an operator reopens it). Spend can then pass a
//!   ceiling by at most that overrun; the gateway reserves the most an operation can cost
//!   (from its limits), so for those the overrun is zero.
//! - `release` returns the whole reservation.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use sandboxio_core::{CostCategory, Decision, Layer, Money};
use serde::{Deserialize, Serialize};

use crate::config::BudgetConfig;
use crate::error::BudgetError;
use crate::keypart::{escape, unescape};

/// A budget scope: everything, one tenant, one session, one agent of a tenant, one cost
/// category, or one calendar window of any of these.
/// Written as `global`, `tenant:<id>`, `session:<id>`, `agent:<tenant>/<agent>`,
/// `category:<name>`, and `<scope>@<window id>` (`tenant:acme@day:2026-12-01`); ids are
/// written with `%`, `@`, `/`, `|` and `*` escaped ([`crate::keypart`]), so that a tenant
/// named `alice@example.com` or `bob@day:2026-12-01` is its own scope and reads back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ScopeKey {
    Global,
    Tenant(String),
    Session(String),
    Agent {
        tenant: String,
        agent: String,
    },
    Category(CostCategory),
    Window {
        scope: Box<ScopeKey>,
        window: String,
    },
}

impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeKey::Global => f.write_str("global"),
            ScopeKey::Tenant(t) => write!(f, "tenant:{}", escape(t)),
            ScopeKey::Session(s) => write!(f, "session:{}", escape(s)),
            ScopeKey::Agent { tenant, agent } => {
                write!(f, "agent:{}/{}", escape(tenant), escape(agent))
            }
            ScopeKey::Category(c) => write!(f, "category:{}", c.as_str()),
            ScopeKey::Window { scope, window } => write!(f, "{scope}@{window}"),
        }
    }
}

impl ScopeKey {
    /// Words for reasons: "the global budget", "tenant `acme`", "session `s1`".
    pub fn describe(&self) -> String {
        match self {
            ScopeKey::Global => "the global budget".into(),
            ScopeKey::Tenant(t) => format!("tenant `{t}`"),
            ScopeKey::Session(s) => format!("session `{s}`"),
            ScopeKey::Agent { tenant, agent } => format!("agent `{agent}` of tenant `{tenant}`"),
            ScopeKey::Category(c) => format!("category `{}`", c.as_str()),
            ScopeKey::Window { scope, window } => {
                format!("{} in window `{window}`", scope.describe())
            }
        }
    }

    /// The scope without its window.
    pub fn base(&self) -> &ScopeKey {
        match self {
            ScopeKey::Window { scope, .. } => scope.base(),
            other => other,
        }
    }
}

impl FromStr for ScopeKey {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            BudgetError::InvalidConfig {
            key: "scope".into(),
            why: format!(
                "`{s}` is not global, tenant:<id>, session:<id>, agent:<tenant>/<agent>, category:<name>, or one of these followed by @<window>"
            ),
        }
        };
        if let Some((scope, window)) = s.rsplit_once('@') {
            if crate::window::Window::of_id(window).is_some() {
                let inner: ScopeKey = scope.parse()?;
                return Ok(ScopeKey::Window {
                    scope: Box::new(inner),
                    window: window.to_string(),
                });
            }
            // Not a window: an `@` inside an id, as keys were written before ids were
            // escaped (`tenant:alice@example.com`); read as that id below.
        }
        if s == "global" {
            return Ok(ScopeKey::Global);
        }
        let id = |v: &str| unescape(v).into_owned();
        match s.split_once(':') {
            Some(("tenant", t)) if !t.is_empty() => Ok(ScopeKey::Tenant(id(t))),
            Some(("session", v)) if !v.is_empty() => Ok(ScopeKey::Session(id(v))),
            Some(("agent", v)) => match v.split_once('/') {
                Some((t, a)) if !t.is_empty() && !a.is_empty() => Ok(ScopeKey::Agent {
                    tenant: id(t),
                    agent: id(a),
                }),
                _ => Err(bad()),
            },
            Some(("category", c)) => CostCategory::ALL
                .into_iter()
                .find(|k| k.as_str() == c)
                .map(ScopeKey::Category)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

impl TryFrom<String> for ScopeKey {
    type Error = BudgetError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ScopeKey> for String {
    fn from(k: ScopeKey) -> String {
        k.to_string()
    }
}

/// The persisted state of one scope.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScopeState {
    /// Settled spend by category.
    #[serde(default)]
    pub spent: BTreeMap<CostCategory, Money>,
    /// Sum of the open reservations that include this scope.
    #[serde(default)]
    pub reserved: Money,
    /// Measured cost charged past reservations (each overrun closes the scope).
    #[serde(default, alias = "unbilled_overrun")]
    pub overrun: Money,
    /// Whether the warn fraction has been crossed (and reported) already.
    #[serde(default)]
    pub warned: bool,
    /// Closed by an overrun: every reservation is refused until an operator reopens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
    /// Rolling windows only: the charges still in `spent`, by time bucket (see
    /// [`crate::window`]), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charges: Vec<Charge>,
}

impl ScopeState {
    /// Whether every amount is what the ledger can produce: none negative. A stored state
    /// failing this was written by something else (a forged negative spend doubled a
    /// ceiling's headroom), so the stores refuse it as corrupt rather than act on it.
    pub fn is_sane(&self) -> bool {
        !(self.spent.values().any(Money::is_negative)
            || self.reserved.is_negative()
            || self.overrun.is_negative()
            || self.charges.iter().any(|c| c.amount.is_negative()))
    }
}

/// Charges of one category in one time bucket of a rolling window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// Start of the bucket, Unix milliseconds.
    pub bucket_ms: i64,
    pub category: CostCategory,
    pub amount: Money,
}

/// The rolling window of a scope key, if it names one.
fn rolling_of(key: &ScopeKey) -> Option<crate::window::Window> {
    match key {
        ScopeKey::Window { window, .. } => {
            crate::window::Window::of_id(window).filter(|w| w.rolling_ms().is_some())
        }
        _ => None,
    }
}

impl ScopeState {
    /// Rolling windows: drops from `spent` every bucket that lies entirely before
    /// `now_ms - window`. Other windows: nothing.
    pub fn expire(
        &mut self,
        window: crate::window::Window,
        now_ms: i64,
    ) -> Result<(), BudgetError> {
        let (Some(len), Some(bucket)) = (window.rolling_ms(), window.bucket_ms()) else {
            return Ok(());
        };
        let horizon = now_ms.saturating_sub(len);
        while let Some(c) = self.charges.first() {
            if c.bucket_ms.saturating_add(bucket) > horizon {
                break;
            }
            let c = self.charges.remove(0);
            let e = self.spent.entry(c.category).or_insert(Money::ZERO);
            *e = e.checked_sub(c.amount)?.clamp_non_negative();
        }
        Ok(())
    }

    /// Rolling windows: adds a charge to its bucket (the reservation's time, `at_ms`).
    fn add_charge(
        &mut self,
        window: crate::window::Window,
        at_ms: i64,
        category: CostCategory,
        amount: Money,
    ) -> Result<(), BudgetError> {
        let Some(bucket) = window.bucket_ms() else {
            return Ok(());
        };
        let start = at_ms - at_ms.rem_euclid(bucket);
        if let Some(c) = self
            .charges
            .iter_mut()
            .find(|c| c.bucket_ms == start && c.category == category)
        {
            c.amount = c.amount.checked_add(amount)?;
            return Ok(());
        }
        let pos = self.charges.partition_point(|c| c.bucket_ms <= start);
        self.charges.insert(
            pos,
            Charge {
                bucket_ms: start,
                category,
                amount,
            },
        );
        Ok(())
    }

    pub fn spent_total(&self) -> Result<Money, BudgetError> {
        self.spent
            .values()
            .try_fold(Money::ZERO, |acc, m| acc.checked_add(*m))
            .map_err(|_| BudgetError::Overflow)
    }
}

/// An open reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: String,
    pub scopes: Vec<ScopeKey>,
    pub category: CostCategory,
    pub amount: Money,
    /// When it was made (Unix ms): its charge counts in rolling windows from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
}

/// What to reserve, for whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveRequest {
    /// Unique id (the gateway uses the operation id).
    pub id: String,
    pub tenant: String,
    #[serde(default)]
    pub session: Option<String>,
    pub category: CostCategory,
    /// The estimate; `None` reserves the configured `default_estimate`.
    #[serde(default)]
    pub estimate: Option<Money>,
    /// The agent asking, for agent-scoped ceilings.
    #[serde(default)]
    pub agent: Option<String>,
    /// When the request is admitted: picks the calendar window of windowed ceilings.
    #[serde(default)]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ReserveRequest {
    /// The lifetime scopes the request is always charged to: global, tenant and (if any)
    /// session.
    pub fn scopes(&self) -> Vec<ScopeKey> {
        let mut v = vec![ScopeKey::Global, ScopeKey::Tenant(self.tenant.clone())];
        if let Some(s) = &self.session {
            v.push(ScopeKey::Session(s.clone()));
        }
        v
    }

    /// Every scope the request is charged to under `cfg`: the lifetime scopes, the agent and
    /// category scopes when some ceiling names them, and the current window of every
    /// windowed ceiling that applies.
    pub fn scopes_in(&self, cfg: &BudgetConfig) -> Vec<ScopeKey> {
        let mut v = self.scopes();
        let agent = self.agent.as_ref().map(|a| ScopeKey::Agent {
            tenant: self.tenant.clone(),
            agent: a.clone(),
        });
        if let Some(a) = &agent {
            if cfg.ceilings_for(crate::config::ScopeKind::Agent) {
                v.push(a.clone());
            }
        }
        if cfg.ceilings_for(crate::config::ScopeKind::Category) {
            v.push(ScopeKey::Category(self.category));
        }
        let at = self.at.unwrap_or_else(chrono::Utc::now);
        let mut windowed = Vec::new();
        for rule in &cfg.ceiling {
            let Some(window) = rule.window.id_at(at) else {
                continue;
            };
            let base = match rule.scope {
                crate::config::ScopeKind::Global => Some(ScopeKey::Global),
                crate::config::ScopeKind::Tenant => Some(ScopeKey::Tenant(self.tenant.clone())),
                crate::config::ScopeKind::Session => self.session.clone().map(ScopeKey::Session),
                crate::config::ScopeKind::Agent => agent.clone(),
                crate::config::ScopeKind::Category => Some(ScopeKey::Category(self.category)),
            };
            let Some(base) = base else { continue };
            if !rule.names(&base) {
                continue;
            }
            let key = ScopeKey::Window {
                scope: Box::new(base),
                window,
            };
            if !windowed.contains(&key) {
                windowed.push(key);
            }
        }
        v.extend(windowed);
        v
    }
}

/// Why a reservation was refused: a value, turned into a budget-layer deny.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetDenial {
    /// The scope that refused, when one did.
    pub scope: Option<ScopeKey>,
    pub reason: String,
}

impl BudgetDenial {
    pub fn to_decision(&self) -> Decision {
        Decision::deny(Layer::Budget, self.reason.clone())
    }
}

/// A scope's spend crossed its warn fraction (reported once per crossing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarningCrossed {
    pub scope: ScopeKey,
    pub spent: Money,
    pub ceiling: Money,
    pub threshold: Money,
}

impl fmt::Display for WarningCrossed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has spent {} of its {} ceiling (warning at {})",
            self.scope.describe(),
            self.spent,
            self.ceiling,
            self.threshold
        )
    }
}

/// The outcome of settling a reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    pub id: String,
    pub measured: Money,
    pub reserved: Money,
    /// What was added to spend (the measured cost).
    pub charged: Money,
    /// What passed the reservation (charged too); non-zero closes the scopes.
    pub overrun: Money,
    pub warnings: Vec<WarningCrossed>,
}

/// Spend of one scope by category, with total, reservations and what remains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub scope: ScopeKey,
    pub currency: String,
    pub by_category: BTreeMap<CostCategory, Money>,
    pub total: Money,
    pub reserved: Money,
    pub overrun: Money,
    /// Why the scope is closed, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Money>,
    /// `ceiling - total - reserved`, at least zero; `None` without a ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<Money>,
    pub warned: bool,
}

/// The whole ledger (or the part of it a transaction loaded): scopes and open reservations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BudgetState {
    #[serde(default)]
    pub scopes: BTreeMap<ScopeKey, ScopeState>,
    #[serde(default)]
    pub reservations: BTreeMap<String, Reservation>,
}

fn overflow_denial() -> BudgetDenial {
    BudgetDenial {
        scope: None,
        reason: "budget arithmetic overflowed; the reservation is refused".into(),
    }
}

impl BudgetState {
    pub fn new() -> BudgetState {
        BudgetState::default()
    }

    pub fn scope(&self, key: &ScopeKey) -> ScopeState {
        self.scopes.get(key).cloned().unwrap_or_default()
    }

    /// Reserves the estimate in every scope of the request, or changes nothing and says why.
    pub fn reserve(
        &mut self,
        cfg: &BudgetConfig,
        req: &ReserveRequest,
    ) -> Result<Reservation, BudgetDenial> {
        let amount = req.estimate.unwrap_or(cfg.default_estimate);
        if amount.is_negative() {
            return Err(BudgetDenial {
                scope: None,
                reason: format!("the estimated cost {amount} is negative"),
            });
        }
        if self.reservations.contains_key(&req.id) {
            return Err(BudgetDenial {
                scope: None,
                reason: format!("reservation `{}` already exists", req.id),
            });
        }
        let scopes = req.scopes_in(cfg);
        let at_ms = req.at.unwrap_or_else(chrono::Utc::now).timestamp_millis();
        let mut updated = Vec::with_capacity(scopes.len());
        for key in &scopes {
            let mut st = self.scope(key);
            if let Some(w) = rolling_of(key) {
                st.expire(w, at_ms).map_err(|_| overflow_denial())?;
            }
            let spent = st.spent_total().map_err(|_| overflow_denial())?;
            let reserved = st
                .reserved
                .checked_add(amount)
                .map_err(|_| overflow_denial())?;
            let committed = spent.checked_add(reserved).map_err(|_| overflow_denial())?;
            if let Some(why) = &st.closed {
                return Err(BudgetDenial {
                    scope: Some(key.clone()),
                    reason: format!(
                        "{} is closed: {why}; an operator reopens it with `sandboxio budget --reopen {key}`",
                        key.describe()
                    ),
                });
            }
            if let Some(ceiling) = cfg.ceiling(key) {
                if committed > ceiling {
                    return Err(BudgetDenial {
                        scope: Some(key.clone()),
                        reason: format!(
                            "reserving {amount} would bring {} to {committed} of its {ceiling} ceiling (spent {spent}, reserved {})",
                            key.describe(),
                            st.reserved
                        ),
                    });
                }
            }
            st.reserved = reserved;
            updated.push((key.clone(), st));
        }
        for (k, st) in updated {
            self.scopes.insert(k, st);
        }
        let r = Reservation {
            id: req.id.clone(),
            scopes,
            category: req.category,
            amount,
            at_ms: Some(at_ms),
        };
        self.reservations.insert(r.id.clone(), r.clone());
        Ok(r)
    }

    /// Charges the measured cost of reservation `id` and closes it. See the module docs for
    /// the cap. Errors leave the state unchanged.
    pub fn settle(
        &mut self,
        cfg: &BudgetConfig,
        id: &str,
        measured: Money,
    ) -> Result<Settlement, BudgetError> {
        if measured.is_negative() {
            return Err(BudgetError::InvalidAmount {
                amount: measured.to_string(),
                why: "a measured cost cannot be negative",
            });
        }
        let r = self
            .reservations
            .get(id)
            .cloned()
            .ok_or_else(|| BudgetError::UnknownReservation { id: id.into() })?;
        let charged = measured;
        let overrun = measured.checked_sub(r.amount)?.clamp_non_negative();
        let threshold_fraction = cfg.warn_fraction_decimal();
        let mut updated = Vec::with_capacity(r.scopes.len());
        let mut warnings = Vec::new();
        for key in &r.scopes {
            let mut st = self.scope(key);
            st.reserved = st.reserved.checked_sub(r.amount)?;
            if st.reserved.is_negative() {
                return Err(BudgetError::InconsistentState {
                    why: format!("{} would have negative reservations", key.describe()),
                });
            }
            let cat = st.spent.entry(r.category).or_insert(Money::ZERO);
            *cat = cat.checked_add(charged)?;
            if let (Some(w), Some(at)) = (rolling_of(key), r.at_ms) {
                st.add_charge(w, at, r.category, charged)?;
            }
            if !overrun.is_zero() {
                st.overrun = st.overrun.checked_add(overrun)?;
                st.closed = Some(format!(
                    "operation `{id}` cost {measured}, {overrun} more than its reservation of {}",
                    r.amount
                ));
            }
            if let Some(ceiling) = cfg.ceiling(key) {
                let threshold = ceiling.checked_mul(threshold_fraction)?;
                let spent = st.spent_total()?;
                if spent >= threshold && !st.warned {
                    st.warned = true;
                    warnings.push(WarningCrossed {
                        scope: key.clone(),
                        spent,
                        ceiling,
                        threshold,
                    });
                } else if spent < threshold {
                    // Re-armed (e.g. the ceiling was raised): the next crossing warns again.
                    st.warned = false;
                }
            }
            updated.push((key.clone(), st));
        }
        for (k, st) in updated {
            self.scopes.insert(k, st);
        }
        self.reservations.remove(id);
        Ok(Settlement {
            id: id.into(),
            measured,
            reserved: r.amount,
            charged,
            overrun,
            warnings,
        })
    }

    /// Reopens a scope closed by an overrun (an operator's decision).
    pub fn reopen(&mut self, key: &ScopeKey) -> bool {
        match self.scopes.get_mut(key) {
            Some(st) if st.closed.is_some() => {
                st.closed = None;
                true
            }
            _ => false,
        }
    }

    /// Returns a reservation without charging anything (failure or cancel).
    pub fn release(&mut self, id: &str) -> Result<Money, BudgetError> {
        let r = self
            .reservations
            .get(id)
            .cloned()
            .ok_or_else(|| BudgetError::UnknownReservation { id: id.into() })?;
        let mut updated = Vec::with_capacity(r.scopes.len());
        for key in &r.scopes {
            let mut st = self.scope(key);
            st.reserved = st.reserved.checked_sub(r.amount)?;
            if st.reserved.is_negative() {
                return Err(BudgetError::InconsistentState {
                    why: format!("{} would have negative reservations", key.describe()),
                });
            }
            updated.push((key.clone(), st));
        }
        for (k, st) in updated {
            self.scopes.insert(k, st);
        }
        self.reservations.remove(id);
        Ok(r.amount)
    }

    /// Spend of one scope by category, total, reserved and remaining (a rolling window as
    /// it was when its state was last written; see [`BudgetState::summary_at`]).
    pub fn summary(&self, cfg: &BudgetConfig, key: &ScopeKey) -> Result<Summary, BudgetError> {
        self.summary_of(cfg, key, self.scope(key))
    }

    /// [`BudgetState::summary`] at `now`: a rolling window without the charges that left it.
    pub fn summary_at(
        &self,
        cfg: &BudgetConfig,
        key: &ScopeKey,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Summary, BudgetError> {
        let mut st = self.scope(key);
        if let Some(w) = rolling_of(key) {
            st.expire(w, now.timestamp_millis())?;
        }
        self.summary_of(cfg, key, st)
    }

    fn summary_of(
        &self,
        cfg: &BudgetConfig,
        key: &ScopeKey,
        st: ScopeState,
    ) -> Result<Summary, BudgetError> {
        let mut by_category = BTreeMap::new();
        for c in CostCategory::ALL {
            by_category.insert(c, st.spent.get(&c).copied().unwrap_or(Money::ZERO));
        }
        let total = st.spent_total()?;
        let ceiling = cfg.ceiling(key);
        let remaining = match ceiling {
            Some(c) => Some(
                c.checked_sub(total)?
                    .checked_sub(st.reserved)?
                    .clamp_non_negative(),
            ),
            None => None,
        };
        Ok(Summary {
            scope: key.clone(),
            currency: cfg.currency.clone(),
            by_category,
            total,
            reserved: st.reserved,
            overrun: st.overrun,
            closed: st.closed.clone(),
            ceiling,
            remaining,
            warned: st.warned,
        })
    }

    /// Checks the ledger's internal consistency: every scope's `reserved` equals the sum of
    /// the open reservations that name it, and no amount is negative.
    pub fn check_consistency(&self) -> Result<(), BudgetError> {
        let mut sums: BTreeMap<&ScopeKey, Money> = BTreeMap::new();
        for r in self.reservations.values() {
            if r.amount.is_negative() {
                return Err(BudgetError::InconsistentState {
                    why: format!("reservation `{}` is negative", r.id),
                });
            }
            for k in &r.scopes {
                let e = sums.entry(k).or_insert(Money::ZERO);
                *e = e.checked_add(r.amount)?;
            }
        }
        for (k, st) in &self.scopes {
            let want = sums.get(k).copied().unwrap_or(Money::ZERO);
            if st.reserved != want {
                return Err(BudgetError::InconsistentState {
                    why: format!(
                        "{} has {} reserved but its open reservations sum to {want}",
                        k.describe(),
                        st.reserved
                    ),
                });
            }
            if st.spent.values().any(Money::is_negative) || st.overrun.is_negative() {
                return Err(BudgetError::InconsistentState {
                    why: format!("{} has a negative amount", k.describe()),
                });
            }
        }
        for k in sums.keys() {
            if !self.scopes.contains_key(*k) {
                return Err(BudgetError::InconsistentState {
                    why: format!("{} has reservations but no state", k.describe()),
                });
            }
        }
        Ok(())
    }

    /// Whether [`BudgetState::check_consistency`] passes.
    pub fn is_valid(&self) -> bool {
        self.check_consistency().is_ok()
    }
}

/// An in-memory budget guard: configuration plus state, for tests and embedders without a
/// store. The gateway uses [`BudgetState`] transitions against its own store instead.
#[derive(Debug, Clone, Default)]
pub struct BudgetGuard {
    pub config: BudgetConfig,
    pub state: BudgetState,
}

impl BudgetGuard {
    pub fn new(config: BudgetConfig) -> Result<BudgetGuard, BudgetError> {
        config.validate()?;
        Ok(BudgetGuard {
            config,
            state: BudgetState::new(),
        })
    }
    pub fn reserve(&mut self, req: &ReserveRequest) -> Result<Reservation, BudgetDenial> {
        self.state.reserve(&self.config, req)
    }
    pub fn settle(&mut self, id: &str, measured: Money) -> Result<Settlement, BudgetError> {
        self.state.settle(&self.config, id, measured)
    }
    pub fn release(&mut self, id: &str) -> Result<Money, BudgetError> {
        self.state.release(id)
    }
    pub fn summary(&self, key: &ScopeKey) -> Result<Summary, BudgetError> {
        self.state.summary(&self.config, key)
    }
}
