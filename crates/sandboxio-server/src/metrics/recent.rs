//! The recent past the dashboard draws, kept in memory from the same observations as
//! `/metrics`: operations per minute by tenant and status (24 h), the durations of the
//! latest operations, and the latest denials with their reasons.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_gateway::OperationObservation;
use serde::Serialize;

/// How far back the per-minute counts go.
pub const KEEP_MINUTES: i64 = 24 * 60;
/// How many durations are kept for the percentiles.
pub const KEEP_DURATIONS: usize = 4096;
/// How many denials are kept for the list.
pub const KEEP_DENIALS: usize = 50;

/// Outcomes as the seed's panels name them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    pub success: u64,
    pub failure: u64,
    pub timeout: u64,
    pub denied: u64,
}

impl StatusCounts {
    pub fn add(&mut self, o: &StatusCounts) {
        self.success += o.success;
        self.failure += o.failure;
        self.timeout += o.timeout;
        self.denied += o.denied;
    }
    pub fn total(&self) -> u64 {
        self.success + self.failure + self.timeout + self.denied
    }
    /// Operations that ran and did not succeed (denials are not errors: nothing ran).
    pub fn errors(&self) -> u64 {
        self.failure + self.timeout
    }
    fn count(&mut self, status: &str) {
        match status {
            "ok" | "replayed" | "warning" => self.success += 1,
            "timed_out" => self.timeout += 1,
            "denied" => self.denied += 1,
            _ => self.failure += 1,
        }
    }
}

/// The latency class of an operation kind (as the gateway's latency budgets name them);
/// `None` for what is not an agent's operation (server bookkeeping, operator actions).
pub fn class_of(event: &str) -> Option<&'static str> {
    match event {
        "exec" | "run_code" => Some("execution"),
        "tool_call" => Some("planning"),
        "file_read" | "file_write" | "file_delete" | "net_connect" => Some("interactive"),
        _ => None,
    }
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub tenant: String,
    pub class: &'static str,
    pub duration: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct Denial {
    pub at: DateTime<Utc>,
    pub tenant: String,
    pub event: String,
    pub layer: String,
    pub rule: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Recent {
    /// Unix minute -> tenant -> counts.
    minutes: BTreeMap<i64, BTreeMap<String, StatusCounts>>,
    durations: VecDeque<Sample>,
    denials: VecDeque<Denial>,
}

fn minute_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

impl Recent {
    pub fn observe(&mut self, o: &OperationObservation) {
        let tenant = o.tenant.clone().unwrap_or_default();
        if let Some((layer, rule)) = &o.denied_at {
            if self.denials.len() == KEEP_DENIALS {
                self.denials.pop_front();
            }
            self.denials.push_back(Denial {
                at: o.at,
                tenant: tenant.clone(),
                event: o.event.clone(),
                layer: (*layer).to_string(),
                rule: rule.clone(),
                reason: o.reason.chars().take(500).collect(),
            });
        }
        let Some(class) = class_of(&o.event) else {
            return;
        };
        let m = minute_of(o.at);
        self.minutes
            .entry(m)
            .or_default()
            .entry(tenant.clone())
            .or_default()
            .count(o.status);
        while let Some((&first, _)) = self.minutes.first_key_value() {
            if first > m - KEEP_MINUTES {
                break;
            }
            self.minutes.pop_first();
        }
        if o.status != "denied" {
            if self.durations.len() == KEEP_DURATIONS {
                self.durations.pop_front();
            }
            self.durations.push_back(Sample {
                at: o.at,
                tenant,
                class,
                duration: o.duration,
            });
        }
    }

    /// Counts per minute from `since` on, of one tenant or (with `None`) all of them.
    pub fn per_minute(
        &self,
        tenant: Option<&str>,
        since: DateTime<Utc>,
    ) -> Vec<(i64, StatusCounts)> {
        self.minutes
            .range(minute_of(since)..)
            .map(|(m, by)| {
                let mut c = StatusCounts::default();
                for (t, n) in by {
                    if tenant.is_none_or(|x| x == t) {
                        c.add(n);
                    }
                }
                (*m, c)
            })
            .collect()
    }

    /// Durations of operations of `class` since `since`.
    pub fn durations(
        &self,
        tenant: Option<&str>,
        class: &str,
        since: DateTime<Utc>,
    ) -> Vec<Duration> {
        self.durations
            .iter()
            .filter(|s| s.class == class && s.at >= since && tenant.is_none_or(|x| x == s.tenant))
            .map(|s| s.duration)
            .collect()
    }

    /// Durations of operations of `class` that finished in `[from, to)`.
    pub fn samples(
        &self,
        tenant: Option<&str>,
        class: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<Duration> {
        self.durations
            .iter()
            .filter(|s| {
                s.class == class
                    && s.at >= from
                    && s.at < to
                    && tenant.is_none_or(|x| x == s.tenant)
            })
            .map(|s| s.duration)
            .collect()
    }

    /// The latest denials, newest first.
    pub fn denials(&self, tenant: Option<&str>, n: usize) -> Vec<Denial> {
        self.denials
            .iter()
            .rev()
            .filter(|d| tenant.is_none_or(|x| x == d.tenant))
            .take(n)
            .cloned()
            .collect()
    }
}

/// The `q`-quantile (0..=1) of `v` by the nearest-rank method; `None` when empty.
pub fn quantile(v: &mut [Duration], q: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = (q * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn obs(event: &str, status: &'static str, tenant: &str, ms: u64) -> OperationObservation {
        OperationObservation {
            event: event.into(),
            status,
            duration: Duration::from_millis(ms),
            tenant: Some(tenant.into()),
            denied_at: (status == "denied").then(|| ("policy", "no-net".to_string())),
            reason: "because".into(),
            latency_budget_violated: false,
            network_denials: 0,
            approval_wait: None,
            retries: 0,
            at: Utc::now(),
        }
    }

    #[test]
    fn counts_are_kept_per_tenant_and_status() {
        let mut r = Recent::default();
        r.observe(&obs("exec", "ok", "a", 10));
        r.observe(&obs("exec", "failed", "a", 10));
        r.observe(&obs("run_code", "timed_out", "b", 10));
        r.observe(&obs("exec", "denied", "b", 0));
        r.observe(&obs("sandbox.create", "ok", "a", 0));
        let since = Utc::now() - chrono::Duration::minutes(5);
        let mut all = StatusCounts::default();
        for (_, c) in r.per_minute(None, since) {
            all.add(&c);
        }
        assert_eq!(
            (all.success, all.failure, all.timeout, all.denied),
            (1, 1, 1, 1)
        );
        let mut a = StatusCounts::default();
        for (_, c) in r.per_minute(Some("a"), since) {
            a.add(&c);
        }
        assert_eq!(a.total(), 2);
        assert_eq!(r.denials(Some("a"), 10).len(), 0);
        assert_eq!(r.denials(None, 10)[0].rule, "no-net");
        assert_eq!(r.durations(None, "execution", since).len(), 3);
    }

    #[test]
    fn nearest_rank_quantiles() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&mut v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&mut v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&mut [], 0.5), None);
    }
}
