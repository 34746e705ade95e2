//! Retries: exponential backoff with full jitter, and a retry budget.
//!
//! The budget is a token bucket: it starts full (`budget_capacity` tokens); every first
//! attempt adds `refill_per_request_millis / 1000` of a token and every retry takes one.
//! So over any run of N requests at most `capacity + N * refill` retries happen, whatever
//! fails: with the defaults (10, 0.1) a dependency that fails every call costs at most
//! 10 + 0.1 N extra calls instead of 2 N.

use std::time::Duration;

use rand::Rng;

use crate::config::RetrySettings;

#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Thousandths of a token.
    tokens_millis: u64,
    capacity_millis: u64,
    refill_millis: u64,
}

impl RetryBudget {
    pub fn new(cfg: &RetrySettings) -> Self {
        let cap = u64::from(cfg.budget_capacity) * 1000;
        RetryBudget {
            tokens_millis: cap,
            capacity_millis: cap,
            refill_millis: u64::from(cfg.refill_per_request_millis),
        }
    }

    pub fn on_request(&mut self) {
        self.tokens_millis = self
            .tokens_millis
            .saturating_add(self.refill_millis)
            .min(self.capacity_millis);
    }

    pub fn try_take(&mut self) -> bool {
        if self.tokens_millis >= 1000 {
            self.tokens_millis -= 1000;
            true
        } else {
            false
        }
    }
}

/// Full jitter: a uniform delay in `[0, min(max, base * 2^(attempt-1))]`.
pub fn backoff(cfg: &RetrySettings, attempt: u32) -> Duration {
    let exp = cfg
        .base_delay
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let cap = exp.min(cfg.max_delay);
    let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::thread_rng().gen_range(0..=ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_bounds_retries_under_total_failure() {
        let cfg = RetrySettings::default();
        let mut b = RetryBudget::new(&cfg);
        let mut retries = 0;
        let n = 1000;
        for _ in 0..n {
            b.on_request();
            for _ in 1..cfg.max_attempts {
                if b.try_take() {
                    retries += 1;
                } else {
                    break;
                }
            }
        }
        // capacity + n * refill = 10 + 100
        assert!(retries <= 110, "{retries}");
        assert!(retries >= 100, "{retries}");
    }

    #[test]
    fn backoff_is_capped() {
        let cfg = RetrySettings::default();
        for a in 1..40 {
            assert!(backoff(&cfg, a) <= cfg.max_delay);
        }
    }
}
