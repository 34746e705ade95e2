//! Budget windows: a ceiling applies to the spend of one UTC calendar day, ISO week or
//! month, or to all spend ever (`lifetime`, the default).
//!
//! A windowed ceiling is kept as its own scope whose key names the window
//! (`tenant:acme@day:2026-12-01`): a new window starts from zero without anyone resetting
//! anything, and a reservation made in one window settles into that same window.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Utc};
use serde::{Deserialize, Serialize};

/// The period a ceiling covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    #[default]
    Lifetime,
    Day,
    Week,
    Month,
}

impl Window {
    pub fn as_str(&self) -> &'static str {
        match self {
            Window::Lifetime => "lifetime",
            Window::Day => "day",
            Window::Week => "week",
            Window::Month => "month",
        }
    }

    /// The id of the window containing `at` (`day:2026-12-01`, `week:2026-W49`,
    /// `month:2026-12`); `None` for `lifetime`.
    pub fn id_at(&self, at: DateTime<Utc>) -> Option<String> {
        match self {
            Window::Lifetime => None,
            Window::Day => Some(format!("day:{}", at.format("%Y-%m-%d"))),
            Window::Week => {
                let w = at.iso_week();
                Some(format!("week:{}-W{:02}", w.year(), w.week()))
            }
            Window::Month => Some(format!("month:{}", at.format("%Y-%m"))),
        }
    }

    /// The window kind named by a window id (`day:...` is `Day`).
    pub fn of_id(id: &str) -> Option<Window> {
        let kind = id.split_once(':').map(|(k, _)| k)?;
        match kind {
            "day" => Some(Window::Day),
            "week" => Some(Window::Week),
            "month" => Some(Window::Month),
            _ => None,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lifetime" => Ok(Window::Lifetime),
            "day" => Ok(Window::Day),
            "week" => Ok(Window::Week),
            "month" => Ok(Window::Month),
            _ => Err(format!(
                "unknown window `{s}` (expected lifetime, day, week or month)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn calendar_window_ids() {
        let t = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(Window::Day.id_at(t).unwrap(), "day:2026-12-31");
        assert_eq!(Window::Month.id_at(t).unwrap(), "month:2026-12");
        // ISO week 53 of 2026 contains Dec 31st.
        assert_eq!(Window::Week.id_at(t).unwrap(), "week:2026-W53");
        assert_eq!(Window::Lifetime.id_at(t), None);
        let next = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
        assert_ne!(Window::Day.id_at(t), Window::Day.id_at(next));
        assert_eq!(Window::of_id("day:2026-12-31"), Some(Window::Day));
        assert_eq!(Window::of_id("bogus"), None);
    }
}
