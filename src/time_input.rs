//! Times as people, Grafana and scripts write them in filters: one grammar for the
//! pages' `from`/`to`, the exports' `since`/`until` (HTTP and CLI) and every link
//! between them, so a time copied from one place works in every other.
//!
//! - RFC 3339 with any offset: `2026-11-29T14:02:11Z`, `2026-11-29T15:02:11+01:00`;
//! - a date, meaning midnight UTC: `2026-11-29`;
//! - `now`, or `now` plus or minus a [duration](crate::duration): `now-1h`, `now-1d12h`;
//! - Unix epoch milliseconds, what Grafana's `${__from}` writes: `1795960931000`.
//!
//! Every time is then held to the years 1 to 9999, the range both stores compare.

use crate::duration::HumanDuration;
use chrono::{DateTime, Datelike, NaiveDate, Utc};

/// The forms, for error messages.
pub const TIME_FORMS: &str = "expected an RFC 3339 time (2026-11-29T14:02:11Z), a date (2026-11-29), \
     a relative time (now, now-1h, now-1d12h) or Unix epoch milliseconds";

/// How [`in_range`] is explained to a person.
pub const TIME_RANGE: &str = "between the years 1 and 9999";

/// Whether a time given as a filter can be compared in both backends: PostgreSQL's
/// `timestamptz` starts in 4713 BC (an earlier bound is an error, not an empty
/// result), and SQLite's text times sort correctly only with four-digit years.
pub fn in_range(t: DateTime<Utc>) -> bool {
    (1..=9999).contains(&t.year())
}

/// Reads a filter time. The error is a sentence for a person, without the field name
/// (each caller names its own parameter or flag).
pub fn parse(value: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = read(value, now)
        .ok_or_else(|| format!("cannot read {} as a time; {TIME_FORMS}", quoted(value)))?;
    if !in_range(t) {
        return Err(format!(
            "{} is {t}, expected a time {TIME_RANGE}",
            quoted(value)
        ));
    }
    Ok(t)
}

fn read(value: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if let Some(rest) = value.strip_prefix("now") {
        if rest.is_empty() {
            return Some(now);
        }
        // By character, not by byte: `now` followed by `é` is an error, not a panic.
        let (negative, amount) = match rest.chars().next()? {
            '-' => (true, &rest[1..]),
            '+' => (false, &rest[1..]),
            _ => return None,
        };
        // The sign belongs to `now`: `now--1h` is not a time.
        if !amount.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let delta = amount.parse::<HumanDuration>().ok()?.0;
        return if negative {
            now.checked_sub_signed(delta)
        } else {
            now.checked_add_signed(delta)
        };
    }
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return DateTime::from_timestamp_millis(value.parse().ok()?);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Some(t.to_utc());
    }
    // A `+01:00` pasted into a URL unencoded arrives as a space.
    if value.contains(' ')
        && let Ok(t) = DateTime::parse_from_rfc3339(&value.replace(' ', "+"))
    {
        return Some(t.to_utc());
    }
    let date = NaiveDate::parse_from_str(value, "%Y-%m-%d").ok()?;
    date.and_hms_opt(0, 0, 0).map(|t| t.and_utc())
}

/// User input inside an error message, shortened (every filter parser quotes this way).
pub(crate) fn quoted(v: &str) -> String {
    let short: String = v.chars().take(40).collect();
    if short.len() < v.len() {
        format!("\"{short}…\"")
    } else {
        format!("\"{short}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn times_are_read_in_every_form_grafana_and_people_write() {
        let now = t("2026-11-29T14:02:11Z");
        let cases = [
            ("now", "2026-11-29T14:02:11Z"),
            ("now-1h", "2026-11-29T13:02:11Z"),
            ("now-30m", "2026-11-29T13:32:11Z"),
            ("now-15s", "2026-11-29T14:01:56Z"),
            ("now-2d", "2026-11-27T14:02:11Z"),
            ("now-1w", "2026-11-22T14:02:11Z"),
            ("now-1d12h", "2026-11-28T02:02:11Z"),
            ("now+5m", "2026-11-29T14:07:11Z"),
            ("2026-11-29T14:02:11Z", "2026-11-29T14:02:11Z"),
            ("2026-11-29T15:02:11+01:00", "2026-11-29T14:02:11Z"),
            ("2026-11-29T15:02:11 01:00", "2026-11-29T14:02:11Z"),
            ("2026-11-29T14:02:11.402Z", "2026-11-29T14:02:11.402Z"),
            ("1795960931000", "2026-11-29T14:02:11Z"),
            ("2026-11-29", "2026-11-29T00:00:00Z"),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input, now).unwrap(), t(want), "{input}");
        }
    }

    #[test]
    fn an_unreadable_time_names_the_forms() {
        let now = t("2026-11-29T14:02:11Z");
        for input in [
            "yesterday",
            "now-h",
            "now1h",
            "now--1h",
            "now-1h-",
            "2026-13-01",
            "29/11/2026",
            "now-99999999999999w",
            "nowé",
            "now—1h",
            "now-1é",
            "now+",
        ] {
            let e = parse(input, now).unwrap_err();
            assert!(e.starts_with("cannot read"), "{input}: {e}");
            assert!(e.contains("RFC 3339") && e.contains("now-1h"), "{e}");
        }
    }

    #[test]
    fn times_before_year_1_or_after_9999_are_refused() {
        let now = t("2026-11-29T14:02:11Z");
        for input in [
            "now-400000w",
            "-5000-01-01",
            "+10000-01-01",
            "0000-12-31T23:59:59Z",
            "253402300800000",
        ] {
            let e = parse(input, now).unwrap_err();
            assert!(e.contains("between the years 1 and 9999"), "{input}: {e}");
        }
        assert!(parse("0001-01-01", now).is_ok());
    }
}
