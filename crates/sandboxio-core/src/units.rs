//! Human-friendly sizes (`512MiB`) and durations (`30s`), validated at parse time.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// A size in bytes, written as `512MiB`, `1GiB`, `64KiB`, `10MB` or a plain byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SizeRepr", into = "u64")]
pub struct ByteSize(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Str(String),
}

impl TryFrom<SizeRepr> for ByteSize {
    type Error = CoreError;
    fn try_from(r: SizeRepr) -> Result<Self, Self::Error> {
        match r {
            SizeRepr::Int(n) => Ok(ByteSize(n)),
            SizeRepr::Str(s) => s.parse(),
        }
    }
}

impl From<ByteSize> for u64 {
    fn from(b: ByteSize) -> u64 {
        b.0
    }
}

impl ByteSize {
    pub const fn mib(n: u64) -> ByteSize {
        ByteSize(n * 1024 * 1024)
    }
    pub fn bytes(&self) -> u64 {
        self.0
    }
}

fn split_number(s: &str) -> (&str, &str) {
    let idx = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..idx], s[idx..].trim())
}

impl FromStr for ByteSize {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| CoreError::InvalidSize {
            input: s.to_string(),
            why,
        };
        let t = s.trim();
        let (num, unit) = split_number(t);
        if num.is_empty() {
            return Err(err("expected a number followed by a unit, such as 512MiB"));
        }
        if num.contains('.') {
            return Err(err("fractional sizes are not accepted; use a smaller unit"));
        }
        let n: u64 = num.parse().map_err(|_| err("number too large"))?;
        let mult: u64 = match unit {
            "" | "B" => 1,
            "KiB" | "K" => 1 << 10,
            "MiB" | "M" => 1 << 20,
            "GiB" | "G" => 1 << 30,
            "TiB" | "T" => 1 << 40,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            _ => {
                return Err(err(
                    "unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                ))
            }
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| err("size overflows 64 bits"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, m) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if n >= m && n.is_multiple_of(m) {
                return write!(f, "{}{}", n / m, unit);
            }
        }
        write!(f, "{n}B")
    }
}

/// A duration written as `30s`, `5m`, `100ms`, `2h`, `1h30m`, or a plain number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "DurRepr", into = "String")]
pub struct HumanDuration(pub Duration);

#[derive(Deserialize)]
#[serde(untagged)]
enum DurRepr {
    Int(u64),
    Str(String),
}

impl TryFrom<DurRepr> for HumanDuration {
    type Error = CoreError;
    fn try_from(r: DurRepr) -> Result<Self, Self::Error> {
        match r {
            DurRepr::Int(n) => Ok(HumanDuration(Duration::from_secs(n))),
            DurRepr::Str(s) => s.parse(),
        }
    }
}

impl From<HumanDuration> for String {
    fn from(d: HumanDuration) -> String {
        d.to_string()
    }
}

impl HumanDuration {
    pub fn as_duration(&self) -> Duration {
        self.0
    }
}

impl FromStr for HumanDuration {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| CoreError::InvalidDuration {
            input: s.to_string(),
            why,
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(err("empty"));
        }
        if t.chars().all(|c| c.is_ascii_digit()) {
            let n: u64 = t.parse().map_err(|_| err("number too large"))?;
            return Ok(HumanDuration(Duration::from_secs(n)));
        }
        let mut total = Duration::ZERO;
        let mut rest = t;
        while !rest.is_empty() {
            let idx = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if idx == 0 {
                return Err(err("expected a number such as 30s, 5m or 100ms"));
            }
            let n: u64 = rest[..idx].parse().map_err(|_| err("number too large"))?;
            rest = &rest[idx..];
            let uidx = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = &rest[..uidx];
            rest = &rest[uidx..];
            let part = match unit {
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(|| err("overflow"))?),
                "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(|| err("overflow"))?),
                "d" => Duration::from_secs(n.checked_mul(86400).ok_or_else(|| err("overflow"))?),
                _ => return Err(err("unknown unit (use ms, s, m, h or d)")),
            };
            total = total.checked_add(part).ok_or_else(|| err("overflow"))?;
        }
        Ok(HumanDuration(total))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!("512MiB".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("10MB".parse::<ByteSize>().unwrap().0, 10_000_000);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert!("12XB".parse::<ByteSize>().is_err());
        assert!("1.5GiB".parse::<ByteSize>().is_err());
        assert!("99999999999999TiB".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize::mib(512).to_string(), "512MiB");
    }

    #[test]
    fn durations() {
        assert_eq!(
            "30s".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(30)
        );
        assert_eq!(
            "1h30m".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(5400)
        );
        assert_eq!(
            "250ms".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(250)
        );
        assert!("3 weeks".parse::<HumanDuration>().is_err());
        assert!("s".parse::<HumanDuration>().is_err());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,32}") {
            let _ = s.parse::<ByteSize>();
            let _ = s.parse::<HumanDuration>();
        }
    }
}
