//! Values as both stores keep them: times as epoch milliseconds, money as decimal text
//! (summed in Rust, never by SQL), and the errors for a value that does not read back.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use sandboxio_core::{CostCategory, Money};

use super::StoreResult;
use crate::error::GatewayError;

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

pub(crate) fn money(table: &'static str, column: &'static str, s: &str) -> StoreResult<Money> {
    Money::from_str(s).map_err(|_| GatewayError::Corrupt {
        table,
        column,
        value: s.to_string(),
    })
}

pub(crate) fn category(s: &str) -> StoreResult<CostCategory> {
    CostCategory::ALL
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| GatewayError::Corrupt {
            table: "ledger",
            column: "category",
            value: s.to_string(),
        })
}

pub(crate) fn corrupt(
    table: &'static str,
    column: &'static str,
    value: impl Into<String>,
) -> GatewayError {
    GatewayError::Corrupt {
        table,
        column,
        value: value.into(),
    }
}

pub(crate) fn budget_err(e: sandboxio_budget::BudgetError) -> GatewayError {
    corrupt("budget_scopes", "state", e.to_string())
}
