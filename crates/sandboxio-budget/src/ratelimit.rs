//! Rate limits per (tenant, agent, action): an exact sliding window.
//!
//! A [`SlidingLog`] holds the times of the allowed events in the last window (at most
//! `count` of them). An event at `now` is allowed iff fewer than `count` allowed events lie
//! in `(now - window, now]`; so no window of that length ever holds more than `count`
//! allowed events. When denied, `retry_after_ms` is when the oldest event leaves the window.
//! Time is injected as milliseconds; a clock that steps backwards is treated as not moving.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use sandboxio_core::{Decision, Layer};
use serde::{Deserialize, Serialize};

use crate::error::BudgetError;
use crate::keypart::escape;

/// Largest `count` a limit may have (bounds the memory of one log).
pub const MAX_RATE_COUNT: u32 = 100_000;

/// `count` events per `window_ms`, written `"50/hour"`, `"20/minute"`, `"5/second"`,
/// `"1000/day"` (also `s`, `sec`, `min`, `m`, `h`, `hr`, `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RateLimit {
    count: u32,
    window_ms: u64,
}

impl RateLimit {
    pub fn new(count: u32, window_ms: u64) -> Result<RateLimit, BudgetError> {
        let r = RateLimit { count, window_ms };
        if !r.is_valid() {
            return Err(BudgetError::InvalidRateLimit {
                input: format!("{count}/{window_ms}ms"),
                why: format!("count must be 1..={MAX_RATE_COUNT} and the window non-zero"),
            });
        }
        Ok(r)
    }
    pub fn count(&self) -> u32 {
        self.count
    }
    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }
    /// `1 <= count <= MAX_RATE_COUNT` and a non-zero window.
    pub fn is_valid(&self) -> bool {
        self.count >= 1 && self.count <= MAX_RATE_COUNT && self.window_ms > 0
    }
}

/// A window written as a number and a unit (`30s`, `1500ms`, `2m`, `1h`, `1d`), as
/// `Display` writes a window that is not one whole unit; at least 1 ms, at most 366 days.
fn window_of(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = s.get(..digits)?.parse().ok()?;
    let scale = match s.get(digits..)? {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    let ms = n.checked_mul(scale)?;
    (1..=366 * 86_400_000).contains(&ms).then_some(ms)
}

impl FromStr for RateLimit {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| BudgetError::InvalidRateLimit {
            input: s.to_string(),
            why: why.to_string(),
        };
        let (n, unit) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| err("expected COUNT/UNIT such as 50/hour"))?;
        let n = n.trim();
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("the count must be a whole number"));
        }
        let count: u32 = n.parse().map_err(|_| err("the count is too large"))?;
        let window_ms = match unit.trim() {
            "second" | "sec" | "s" => 1_000,
            "minute" | "min" | "m" => 60_000,
            "hour" | "hr" | "h" => 3_600_000,
            "day" | "d" => 86_400_000,
            other => window_of(other).ok_or_else(|| {
                err("the unit must be second, minute, hour or day, or a window such as 30s or 1500ms")
            })?,
        };
        if count == 0 {
            return Err(err(
                "the count must be at least 1 (use a policy deny to forbid an action)",
            ));
        }
        if count > MAX_RATE_COUNT {
            return Err(err("the count is above 100000"));
        }
        Ok(RateLimit { count, window_ms })
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.window_ms {
            1_000 => "second",
            60_000 => "minute",
            3_600_000 => "hour",
            86_400_000 => "day",
            ms => return write!(f, "{}/{}ms", self.count, ms),
        };
        write!(f, "{}/{}", self.count, unit)
    }
}

impl TryFrom<String> for RateLimit {
    type Error = BudgetError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RateLimit> for String {
    fn from(r: RateLimit) -> String {
        r.to_string()
    }
}

/// The answer of a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum RateDecision {
    Allow,
    Deny { retry_after_ms: u64 },
}

impl RateDecision {
    pub fn is_allow(&self) -> bool {
        matches!(self, RateDecision::Allow)
    }
    /// A rate-limit-layer decision with the time to retry.
    pub fn to_decision(&self, what: &str) -> Decision {
        match self {
            RateDecision::Allow => Decision::allow(Layer::RateLimit),
            RateDecision::Deny { retry_after_ms } => {
                let mut d = Decision::deny(
                    Layer::RateLimit,
                    format!("rate limit reached for {what}; retry in {retry_after_ms} ms"),
                );
                d.retry_after_ms = Some(*retry_after_ms);
                d
            }
        }
    }
}

/// The allowed events of one key within the last window (persistable as is).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlidingLog {
    events_ms: VecDeque<u64>,
}

impl SlidingLog {
    pub fn new() -> SlidingLog {
        SlidingLog::default()
    }

    /// A log of past allowed events (unix ms, any order), e.g. as loaded from a store.
    pub fn from_events(events: impl IntoIterator<Item = u64>) -> SlidingLog {
        let mut v: Vec<u64> = events.into_iter().collect();
        v.sort_unstable();
        SlidingLog {
            events_ms: v.into(),
        }
    }

    /// Number of allowed events still remembered.
    pub fn len(&self) -> usize {
        self.events_ms.len()
    }
    pub fn is_empty(&self) -> bool {
        self.events_ms.is_empty()
    }

    fn effective_now(&self, now_ms: u64) -> u64 {
        self.events_ms
            .back()
            .map(|l| now_ms.max(*l))
            .unwrap_or(now_ms)
    }

    fn prune(&mut self, limit: &RateLimit, now: u64) {
        while let Some(first) = self.events_ms.front() {
            // Outside (now - window, now]: first + window <= now.
            if first.saturating_add(limit.window_ms) <= now {
                self.events_ms.pop_front();
            } else {
                break;
            }
        }
    }

    /// Decides without recording.
    pub fn decide(&self, limit: &RateLimit, now_ms: u64) -> RateDecision {
        let now = self.effective_now(now_ms);
        let in_window: Vec<u64> = self
            .events_ms
            .iter()
            .copied()
            .filter(|t| t.saturating_add(limit.window_ms) > now)
            .collect();
        if in_window.len() < limit.count as usize {
            return RateDecision::Allow;
        }
        // The event that must leave the window before one more fits.
        let idx = in_window.len() - limit.count as usize;
        let leaves_at = in_window
            .get(idx)
            .map(|t| t.saturating_add(limit.window_ms))
            .unwrap_or(now);
        RateDecision::Deny {
            retry_after_ms: leaves_at.saturating_sub(now).max(1),
        }
    }

    /// Records an allowed event at `now_ms` (call only after `decide` allowed it).
    pub fn record(&mut self, limit: &RateLimit, now_ms: u64) {
        let now = self.effective_now(now_ms);
        self.prune(limit, now);
        self.events_ms.push_back(now);
        while self.events_ms.len() > limit.count as usize {
            self.events_ms.pop_front();
        }
    }

    /// Decides and, when allowed, records.
    pub fn check(&mut self, limit: &RateLimit, now_ms: u64) -> RateDecision {
        let d = self.decide(limit, now_ms);
        if d.is_allow() {
            self.record(limit, now_ms);
        }
        d
    }

    /// At most `count` events, in non-decreasing order.
    pub fn is_valid(&self, limit: &RateLimit) -> bool {
        limit.is_valid()
            && self.events_ms.len() <= limit.count as usize
            && self
                .events_ms
                .iter()
                .zip(self.events_ms.iter().skip(1))
                .all(|(a, b)| a <= b)
    }
}

/// What one rate-limit counter is shared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RatePer {
    /// One counter per (tenant, agent, action): the default.
    #[default]
    Action,
    /// One counter per (tenant, agent) across every matching action.
    Agent,
    /// One counter per tenant across its agents and every matching action.
    Tenant,
    /// One counter for everyone.
    Global,
}

/// One `[[rate_limits.limit]]` entry. Every matching entry applies, each counted under the
/// key its `per` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRule {
    /// An operation kind (`exec`), a tool name, or `*` for every action.
    pub action: String,
    pub limit: RateLimit,
    /// Only this tenant (default: every tenant, each counted separately).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only this agent (default: every agent, each counted separately).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What one counter is shared by (default: `action`).
    #[serde(default)]
    pub per: RatePer,
}

/// `[rate_limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsConfig {
    #[serde(default)]
    pub limit: Vec<RateLimitRule>,
}

impl RateLimitsConfig {
    pub fn validate(&self) -> Result<(), BudgetError> {
        for (i, r) in self.limit.iter().enumerate() {
            if r.action.is_empty() {
                return Err(BudgetError::InvalidConfig {
                    key: format!("rate_limits.limit[{i}].action"),
                    why: "empty action".into(),
                });
            }
            if !r.limit.is_valid() {
                return Err(BudgetError::InvalidRateLimit {
                    input: r.limit.to_string(),
                    why: "invalid limit".into(),
                });
            }
        }
        Ok(())
    }

    /// The entries that apply to an action (an operation kind or tool name), with the key
    /// under which each is counted: `"{index}|{tenant}|{agent}|{action}"`.
    pub fn matching(
        &self,
        tenant: &str,
        agent: Option<&str>,
        action: &str,
    ) -> Vec<(String, RateLimit)> {
        self.limit
            .iter()
            .enumerate()
            .filter(|(_, r)| r.action == "*" || r.action == action)
            .filter(|(_, r)| r.tenant.as_deref().map(|t| t == tenant).unwrap_or(true))
            .filter(|(_, r)| match (&r.agent, agent) {
                (Some(want), Some(a)) => want == a,
                (Some(_), None) => false,
                (None, _) => true,
            })
            .map(|(i, r)| {
                // Names escaped: none holds a `|` that would shift the parts, nor is a `*`.
                let (t, a, act) = (escape(tenant), escape(agent.unwrap_or("")), escape(action));
                let key = match r.per {
                    RatePer::Action => format!("{i}|{t}|{a}|{act}"),
                    RatePer::Agent => format!("{i}|{t}|{a}|*"),
                    RatePer::Tenant => format!("{i}|{t}|*|*"),
                    RatePer::Global => format!("{i}|*|*|*"),
                };
                (key, r.limit)
            })
            .collect()
    }
}
