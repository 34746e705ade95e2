//! Budget windows: a ceiling applies to the spend of one UTC calendar day, ISO week or
//! month, to the spend of the last N hours (`rolling:24h`), or to all spend ever
//! (`lifetime`, the default).
//!
//! A calendar-windowed ceiling is kept as its own scope whose key names the window
//! (`tenant:acme@day:2026-12-01`): a new window starts from zero without anyone resetting
//! anything, and a reservation made in one window settles into that same window.
//!
//! A rolling window is one scope (`tenant:acme@rolling:86400s`) whose charges are kept in
//! 60 time buckets per window ([`Window::bucket_ms`]), stamped with the time their
//! reservation was made. A bucket leaves the spend once it lies entirely before
//! `now - window`, so the spend counted is never less than the true spend of the last
//! window (at most one bucket, a sixtieth of the window, more): a rolling ceiling is never
//! passed, and it frees up at most a sixtieth of the window late.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Utc};
use serde::{Deserialize, Serialize};

/// The shortest rolling window: a minute.
pub const MIN_ROLLING_SECS: u64 = 60;
/// The longest rolling window: 400 days.
pub const MAX_ROLLING_SECS: u64 = 400 * 86_400;
/// Buckets per rolling window.
pub const ROLLING_BUCKETS: u64 = 60;

/// The period a ceiling covers. In configuration: `lifetime`, `day`, `week`, `month`, or
/// `rolling:<duration>` (`rolling:1h`, `rolling:7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Window {
    #[default]
    Lifetime,
    Day,
    Week,
    Month,
    /// The last `secs` seconds, whenever now is.
    Rolling {
        secs: u64,
    },
}

impl TryFrom<String> for Window {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Window> for String {
    fn from(w: Window) -> String {
        w.to_string()
    }
}

impl Window {
    pub fn as_str(&self) -> &'static str {
        match self {
            Window::Lifetime => "lifetime",
            Window::Day => "day",
            Window::Week => "week",
            Window::Month => "month",
            Window::Rolling { .. } => "rolling",
        }
    }

    /// The length of a rolling window in milliseconds; `None` for the others.
    pub fn rolling_ms(&self) -> Option<i64> {
        match self {
            Window::Rolling { secs } => i64::try_from(secs.saturating_mul(1000)).ok(),
            _ => None,
        }
    }

    /// The width of one charge bucket of a rolling window (a sixtieth of it, at least a
    /// second); `None` for the others.
    pub fn bucket_ms(&self) -> Option<i64> {
        self.rolling_ms()
            .map(|w| (w / ROLLING_BUCKETS as i64).max(1000))
    }

    /// The id of the window containing `at` (`day:2026-12-01`, `week:2026-W49`,
    /// `month:2026-12`; a rolling window's id is its length, `rolling:3600s`); `None` for
    /// `lifetime`.
    pub fn id_at(&self, at: DateTime<Utc>) -> Option<String> {
        match self {
            Window::Lifetime => None,
            Window::Day => Some(format!("day:{}", at.format("%Y-%m-%d"))),
            Window::Week => {
                let w = at.iso_week();
                Some(format!("week:{}-W{:02}", w.year(), w.week()))
            }
            Window::Month => Some(format!("month:{}", at.format("%Y-%m"))),
            Window::Rolling { secs } => Some(format!("rolling:{secs}s")),
        }
    }

    /// The window kind named by a window id (`day:...` is `Day`).
    pub fn of_id(id: &str) -> Option<Window> {
        let (kind, rest) = id.split_once(':')?;
        match kind {
            "day" => Some(Window::Day),
            "week" => Some(Window::Week),
            "month" => Some(Window::Month),
            "rolling" => {
                let secs = rest.strip_suffix('s')?.parse().ok()?;
                Some(Window::Rolling { secs })
            }
            _ => None,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Rolling { secs } => write!(f, "rolling:{secs}s"),
            other => f.write_str(other.as_str()),
        }
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
            _ => match s.strip_prefix("rolling:") {
                Some(d) => {
                    let secs = d
                        .parse::<sandboxio_core::HumanDuration>()
                        .map_err(|e| format!("rolling window `{s}`: {e}"))?
                        .0
                        .as_secs();
                    if !(MIN_ROLLING_SECS..=MAX_ROLLING_SECS).contains(&secs) {
                        return Err(format!(
                            "rolling window `{s}` must be between 1m and 400d"
                        ));
                    }
                    Ok(Window::Rolling { secs })
                }
                None => Err(format!(
                    "unknown window `{s}` (expected lifetime, day, week, month or rolling:<duration> such as rolling:24h)"
                )),
            },
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

    #[test]
    fn rolling_windows_parse_and_keep_one_id() {
        let w: Window = "rolling:1h".parse().unwrap();
        assert_eq!(w, Window::Rolling { secs: 3600 });
        let t = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        let later = Utc.with_ymd_and_hms(2027, 3, 1, 0, 0, 0).unwrap();
        assert_eq!(w.id_at(t).unwrap(), "rolling:3600s");
        assert_eq!(w.id_at(t), w.id_at(later));
        assert_eq!(Window::of_id("rolling:3600s"), Some(w));
        assert_eq!(w.to_string().parse::<Window>(), Ok(w));
        assert_eq!(w.bucket_ms(), Some(60_000));
        assert_eq!(Window::Rolling { secs: 60 }.bucket_ms(), Some(1000));
        for bad in [
            "rolling:",
            "rolling:0s",
            "rolling:30s",
            "rolling:500d",
            "rolling:xh",
            "hourly",
        ] {
            assert!(bad.parse::<Window>().is_err(), "{bad} was accepted");
        }
    }
}
