//! Latency budgets: p50/p95/p99 targets per operation class, and a pure tracker.
//!
//! The tracker keeps the most recent [`LATENCY_WINDOW`] durations per class in a ring
//! buffer (bounded memory, exact percentiles over that window, nearest-rank) plus all-time
//! counts. A duration above the class's p99 target is a violation, returned to the caller
//! to record and count.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use sandboxio_core::{HumanDuration, OperationKind};
use serde::{Deserialize, Serialize};

use crate::error::BudgetError;

/// Durations kept per class for percentiles.
pub const LATENCY_WINDOW: usize = 4096;

/// Operation classes of seed `000_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyClass {
    /// Lookups and status checks: file operations, network connects.
    Interactive,
    /// Agent planning steps: tool calls.
    Planning,
    /// Sandboxed runs: exec and run_code.
    Execution,
}

impl LatencyClass {
    pub const ALL: [LatencyClass; 3] = [
        LatencyClass::Interactive,
        LatencyClass::Planning,
        LatencyClass::Execution,
    ];
    pub fn as_str(&self) -> &'static str {
        match self {
            LatencyClass::Interactive => "interactive",
            LatencyClass::Planning => "planning",
            LatencyClass::Execution => "execution",
        }
    }
    /// The default class of an operation kind.
    pub fn for_kind(k: OperationKind) -> LatencyClass {
        match k {
            OperationKind::Exec | OperationKind::RunCode | OperationKind::Browse => {
                LatencyClass::Execution
            }
            OperationKind::ToolCall => LatencyClass::Planning,
            OperationKind::FileRead
            | OperationKind::FileWrite
            | OperationKind::FileDelete
            | OperationKind::NetConnect
            | OperationKind::Admin => LatencyClass::Interactive,
        }
    }
    fn index(self) -> usize {
        match self {
            LatencyClass::Interactive => 0,
            LatencyClass::Planning => 1,
            LatencyClass::Execution => 2,
        }
    }
}

impl fmt::Display for LatencyClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Percentile targets of one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyTargets {
    pub p50: HumanDuration,
    pub p95: HumanDuration,
    pub p99: HumanDuration,
}

impl LatencyTargets {
    const fn ms(p50: u64, p95: u64, p99: u64) -> LatencyTargets {
        LatencyTargets {
            p50: HumanDuration(Duration::from_millis(p50)),
            p95: HumanDuration(Duration::from_millis(p95)),
            p99: HumanDuration(Duration::from_millis(p99)),
        }
    }
    /// 100 ms / 300 ms / 500 ms.
    pub const INTERACTIVE: LatencyTargets = LatencyTargets::ms(100, 300, 500);
    /// 2 s / 5 s / 10 s.
    pub const PLANNING: LatencyTargets = LatencyTargets::ms(2_000, 5_000, 10_000);
    /// 5 min / 15 min / 30 min.
    pub const EXECUTION: LatencyTargets = LatencyTargets::ms(300_000, 900_000, 1_800_000);
}

/// `[budget.latency]`: targets per class; each defaults to the seed's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    #[serde(default = "d_interactive")]
    pub interactive: LatencyTargets,
    #[serde(default = "d_planning")]
    pub planning: LatencyTargets,
    #[serde(default = "d_execution")]
    pub execution: LatencyTargets,
}

fn d_interactive() -> LatencyTargets {
    LatencyTargets::INTERACTIVE
}
fn d_planning() -> LatencyTargets {
    LatencyTargets::PLANNING
}
fn d_execution() -> LatencyTargets {
    LatencyTargets::EXECUTION
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            interactive: LatencyTargets::INTERACTIVE,
            planning: LatencyTargets::PLANNING,
            execution: LatencyTargets::EXECUTION,
        }
    }
}

impl LatencyConfig {
    pub fn targets(&self, c: LatencyClass) -> LatencyTargets {
        match c {
            LatencyClass::Interactive => self.interactive,
            LatencyClass::Planning => self.planning,
            LatencyClass::Execution => self.execution,
        }
    }
    /// Targets must be non-zero and ordered p50 <= p95 <= p99.
    pub fn validate(&self) -> Result<(), BudgetError> {
        for c in LatencyClass::ALL {
            let t = self.targets(c);
            let bad = |why: &str| BudgetError::InvalidLatencyTargets {
                class: c.to_string(),
                why: why.into(),
            };
            if t.p50.0.is_zero() {
                return Err(bad("p50 must be above zero"));
            }
            if !(t.p50 <= t.p95 && t.p95 <= t.p99) {
                return Err(bad("targets must satisfy p50 <= p95 <= p99"));
            }
        }
        Ok(())
    }
}

/// A duration above its class's p99 target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyViolation {
    pub class: LatencyClass,
    pub duration: HumanDuration,
    pub target_p99: HumanDuration,
}

impl fmt::Display for LatencyViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operation took {}, over its p99 target of {}",
            self.class, self.duration, self.target_p99
        )
    }
}

/// Observed percentiles of one class against its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub class: LatencyClass,
    /// All durations recorded.
    pub count: u64,
    /// All violations recorded.
    pub violations: u64,
    /// Percentiles over the most recent window; `None` before the first sample.
    pub p50: Option<HumanDuration>,
    pub p95: Option<HumanDuration>,
    pub p99: Option<HumanDuration>,
    pub targets: LatencyTargets,
}

impl LatencyReport {
    /// Whether every observed percentile is within its target.
    pub fn within_targets(&self) -> bool {
        let ok = |o: Option<HumanDuration>, t: HumanDuration| o.map(|o| o <= t).unwrap_or(true);
        ok(self.p50, self.targets.p50)
            && ok(self.p95, self.targets.p95)
            && ok(self.p99, self.targets.p99)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ClassWindow {
    recent_ms: VecDeque<u64>,
    count: u64,
    violations: u64,
}

/// Records durations per class and reports percentiles and violations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyTracker {
    config: LatencyConfig,
    classes: [ClassWindow; 3],
}

impl LatencyTracker {
    pub fn new(config: LatencyConfig) -> LatencyTracker {
        LatencyTracker {
            config,
            classes: Default::default(),
        }
    }

    /// Records one duration; returns the violation when it is above the p99 target.
    pub fn record(&mut self, class: LatencyClass, d: Duration) -> Option<LatencyViolation> {
        let target = self.config.targets(class).p99;
        let w = &mut self.classes[class.index()];
        if w.recent_ms.len() >= LATENCY_WINDOW {
            w.recent_ms.pop_front();
        }
        w.recent_ms
            .push_back(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        w.count = w.count.saturating_add(1);
        if d > target.0 {
            w.violations = w.violations.saturating_add(1);
            Some(LatencyViolation {
                class,
                duration: HumanDuration(d),
                target_p99: target,
            })
        } else {
            None
        }
    }

    pub fn report(&self, class: LatencyClass) -> LatencyReport {
        let w = &self.classes[class.index()];
        let mut sorted: Vec<u64> = w.recent_ms.iter().copied().collect();
        sorted.sort_unstable();
        let pct = |p: u64| -> Option<HumanDuration> {
            if sorted.is_empty() {
                return None;
            }
            // Nearest rank: ceil(p/100 * n), 1-based.
            let n = sorted.len() as u64;
            let rank = (p.saturating_mul(n)).div_ceil(100).max(1);
            let idx = usize::try_from(rank - 1).unwrap_or(0).min(sorted.len() - 1);
            sorted
                .get(idx)
                .map(|ms| HumanDuration(Duration::from_millis(*ms)))
        };
        LatencyReport {
            class,
            count: w.count,
            violations: w.violations,
            p50: pct(50),
            p95: pct(95),
            p99: pct(99),
            targets: self.config.targets(class),
        }
    }

    pub fn reports(&self) -> Vec<LatencyReport> {
        LatencyClass::ALL.iter().map(|c| self.report(*c)).collect()
    }
}
