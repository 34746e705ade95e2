//! Money: a decimal amount in the configured currency, with checked arithmetic.
//!
//! There is deliberately no conversion from or to floating point.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// A non-negative or negative decimal amount of money. Serialised as a string ("12.50").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Money(Decimal);

impl Money {
    pub const ZERO: Money = Money(Decimal::ZERO);

    /// Builds an amount from an integer number of minor units and a scale,
    /// e.g. `Money::from_minor(1250, 2)` is 12.50.
    pub fn from_minor(units: i64, scale: u32) -> Result<Money, CoreError> {
        Decimal::try_new(units, scale)
            .map(Money)
            .map_err(|_| CoreError::MoneyOverflow)
    }

    pub fn from_decimal(d: Decimal) -> Money {
        Money(d)
    }

    pub fn as_decimal(&self) -> Decimal {
        self.0
    }

    pub fn checked_add(self, other: Money) -> Result<Money, CoreError> {
        self.0
            .checked_add(other.0)
            .map(Money)
            .ok_or(CoreError::MoneyOverflow)
    }

    pub fn checked_sub(self, other: Money) -> Result<Money, CoreError> {
        self.0
            .checked_sub(other.0)
            .map(Money)
            .ok_or(CoreError::MoneyOverflow)
    }

    /// Multiplies by a decimal quantity (e.g. CPU-seconds times a per-second rate).
    pub fn checked_mul(self, qty: Decimal) -> Result<Money, CoreError> {
        self.0
            .checked_mul(qty)
            .map(Money)
            .ok_or(CoreError::MoneyOverflow)
    }

    pub fn is_negative(&self) -> bool {
        self.0.is_sign_negative() && !self.0.is_zero()
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// The larger of `self` and zero.
    pub fn clamp_non_negative(self) -> Money {
        if self.is_negative() {
            Money::ZERO
        } else {
            self
        }
    }
}

impl FromStr for Money {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() {
            return Err(CoreError::InvalidMoney {
                input: s.to_string(),
                why: "empty",
            });
        }
        if t.contains('_') {
            return Err(CoreError::InvalidMoney {
                input: s.to_string(),
                why: "digit separators (`_`) are not accepted: write the plain number, such as 1000.50",
            });
        }
        if t.contains(['e', 'E']) {
            return Err(CoreError::InvalidMoney {
                input: s.to_string(),
                why: "scientific notation is not accepted",
            });
        }
        Decimal::from_str_exact(t)
            .map(Money)
            .map_err(|_| CoreError::InvalidMoney {
                input: s.to_string(),
                why: "expected a decimal number such as 12.50",
            })
    }
}

impl TryFrom<String> for Money {
    type Error = CoreError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Money> for String {
    fn from(m: Money) -> String {
        m.0.normalize().to_string()
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.normalize())
    }
}

/// Spending categories of seed `000_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostCategory {
    Compute,
    Api,
    Storage,
    Human,
}

impl CostCategory {
    pub const ALL: [CostCategory; 4] = [
        CostCategory::Compute,
        CostCategory::Api,
        CostCategory::Storage,
        CostCategory::Human,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            CostCategory::Compute => "compute",
            CostCategory::Api => "api",
            CostCategory::Storage => "storage",
            CostCategory::Human => "human",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_exact_decimals() {
        let m: Money = "0.10".parse().unwrap();
        let n = m.checked_add("0.20".parse().unwrap()).unwrap();
        assert_eq!(n.to_string(), "0.3");
    }

    #[test]
    fn rejects_garbage_and_scientific_notation() {
        for bad in [
            "", "abc", "1e3", "1.2.3", "NaN", "inf", "1_0", "0._0_1", "1_", "0.1_",
        ] {
            let e = bad.parse::<Money>().unwrap_err();
            assert_eq!(crate::ErrorCode::code(&e), "SBX_E1003", "{bad}");
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let max = Money::from_decimal(Decimal::MAX);
        assert_eq!(max.checked_add(max), Err(CoreError::MoneyOverflow));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = s.parse::<Money>();
        }

        #[test]
        fn add_then_sub_roundtrips(a in -1_000_000_000i64..1_000_000_000, b in -1_000_000_000i64..1_000_000_000) {
            let x = Money::from_minor(a, 4).unwrap();
            let y = Money::from_minor(b, 2).unwrap();
            prop_assert_eq!(x.checked_add(y).unwrap().checked_sub(y).unwrap(), x);
        }
    }
}
