//! Turning measured usage into money.

use rust_decimal::Decimal;
use sandboxio_core::Money;
use serde::{Deserialize, Serialize};

use crate::error::BudgetError;

/// Charged amounts are rounded to this many decimal places.
pub const CHARGE_DECIMAL_PLACES: u32 = 9;

const GIB: u64 = 1 << 30;

/// Prices for measured compute: per CPU-second, per GiB-second of memory, per call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateCard {
    #[serde(default)]
    pub cpu_second: Money,
    #[serde(default)]
    pub gib_second: Money,
    #[serde(default)]
    pub per_call: Money,
}

/// What a run consumed, as the sandbox measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MeasuredUsage {
    pub cpu_time_ms: u64,
    pub peak_memory_bytes: u64,
    pub wall_time_ms: u64,
}

impl RateCard {
    pub fn validate(&self) -> Result<(), BudgetError> {
        for (k, m) in [
            ("rate_card.cpu_second", self.cpu_second),
            ("rate_card.gib_second", self.gib_second),
            ("rate_card.per_call", self.per_call),
        ] {
            if m.is_negative() {
                return Err(BudgetError::InvalidConfig {
                    key: k.into(),
                    why: format!("`{m}` is negative"),
                });
            }
        }
        Ok(())
    }

    /// `cpu_seconds * cpu_second + peak_GiB * wall_seconds * gib_second + per_call`,
    /// rounded to [`CHARGE_DECIMAL_PLACES`]. Overflow is an error, never a wrap.
    pub fn cost(&self, u: &MeasuredUsage) -> Result<Money, BudgetError> {
        let cpu_seconds = Decimal::from(u.cpu_time_ms)
            .checked_div(Decimal::from(1000u64))
            .ok_or(BudgetError::Overflow)?;
        let gib_seconds = Decimal::from(u.peak_memory_bytes)
            .checked_div(Decimal::from(GIB))
            .and_then(|g| g.checked_mul(Decimal::from(u.wall_time_ms)))
            .and_then(|g| g.checked_div(Decimal::from(1000u64)))
            .ok_or(BudgetError::Overflow)?;
        let total = self
            .cpu_second
            .checked_mul(cpu_seconds)?
            .checked_add(self.gib_second.checked_mul(gib_seconds)?)?
            .checked_add(self.per_call)?;
        Ok(Money::from_decimal(
            total.as_decimal().round_dp(CHARGE_DECIMAL_PLACES),
        ))
    }
}
