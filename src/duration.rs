//! Durations as operators write them in flags and environment variables: `30d`,
//! `12h`, `90m`, `45s`, `250ms`, `2w`, sums such as `1d12h`, or spelled out (`2 weeks`).
//! `0` means zero. Every duration flag of every command, and the offset in a relative
//! time (`now-1h`, see [`crate::time_input`]), takes this one syntax: humantime's.

use chrono::TimeDelta;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub TimeDelta);

impl HumanDuration {
    pub fn days(n: i64) -> Self {
        HumanDuration(TimeDelta::days(n))
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    pub fn to_std(self) -> std::time::Duration {
        self.0.to_std().unwrap_or_default()
    }
}

impl FromStr for HumanDuration {
    type Err = String;
    /// humantime's grammar (`30d`, `1d12h`, `250ms`, `2 weeks`), bounded to what a
    /// `TimeDelta` holds. `0` needs no unit.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{:?} is not a duration: write a number and a unit (ms, s, m, h, d, w), e.g. 30d, 12h, 1d12h, 250ms",
                text.chars().take(40).collect::<String>()
            )
        };
        let std = humantime::parse_duration(text.trim()).map_err(|_| bad())?;
        TimeDelta::from_std(std)
            .map(HumanDuration)
            .map_err(|_| bad())
    }
}

/// The largest exact unit up to days: `30d`, `36h`, `90s` (weeks print as days).
impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.num_seconds();
        if s == 0 {
            return f.write_str("0");
        }
        for (unit, secs) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if s % secs == 0 {
                return write!(f, "{}{unit}", s / secs);
            }
        }
        let ms = self.0.num_milliseconds();
        if ms % 1000 != 0 {
            return write!(f, "{ms}ms");
        }
        write!(f, "{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_operators_write_them() {
        let table = [
            ("30d", TimeDelta::days(30)),
            ("90d", TimeDelta::days(90)),
            ("12h", TimeDelta::hours(12)),
            ("1d12h", TimeDelta::hours(36)),
            ("45s", TimeDelta::seconds(45)),
            ("2w", TimeDelta::weeks(2)),
            ("0", TimeDelta::zero()),
            (" 5m ", TimeDelta::minutes(5)),
            ("250ms", TimeDelta::milliseconds(250)),
            ("1s500ms", TimeDelta::milliseconds(1500)),
            ("30 days", TimeDelta::days(30)),
            ("2 weeks", TimeDelta::weeks(2)),
        ];
        for (text, expected) in table {
            assert_eq!(text.parse::<HumanDuration>().unwrap().0, expected, "{text}");
        }
        for bad in ["", "30", "d", "30 dayz", "-1d", "1d-", "99999999999999999w"] {
            let err = bad.parse::<HumanDuration>().unwrap_err();
            assert!(err.contains("not a duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        for (text, shown) in [
            ("30d", "30d"),
            ("1d12h", "36h"),
            ("2w", "14d"),
            ("90s", "90s"),
        ] {
            assert_eq!(text.parse::<HumanDuration>().unwrap().to_string(), shown);
        }
    }
}
