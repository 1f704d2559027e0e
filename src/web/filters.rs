//! How pages write times, durations, counts and JSON. Plain functions, tested in tables
//! below, plus the few askama filters templates call (`{{ n|thousands }}`). Times are
//! always UTC with the offset written out, next to a relative form ("3 min ago").

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use serde_json::Value;

/// `2026-11-29 14:02:11 UTC (+00:00)`.
pub(crate) fn utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC (%:z)").to_string()
}

/// `14:05 UTC`: a time of day, for chart captions.
pub(crate) fn utc_hm(t: DateTime<Utc>) -> String {
    t.format("%H:%M UTC").to_string()
}

/// A length of time in at most two units: `45 s`, `3 min 20 s`, `2 h 5 min`, `3 d 4 h`.
pub fn duration(d: TimeDelta) -> String {
    let s = d.num_seconds().unsigned_abs();
    let (value, unit, rest, rest_unit) = match s {
        0..60 => return format!("{s} s"),
        60..3600 => (s / 60, "min", s % 60, "s"),
        3600..86400 => (s / 3600, "h", s % 3600 / 60, "min"),
        _ => (s / 86400, "d", s % 86400 / 3600, "h"),
    };
    if rest == 0 {
        format!("{value} {unit}")
    } else {
        format!("{value} {unit} {rest} {rest_unit}")
    }
}

/// `t` seen from `now`: `just now`, `3 min ago`, `in 2 h 5 min`.
pub(crate) fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = now - t;
    if d.num_seconds().abs() < 5 {
        "just now".to_string()
    } else if d > TimeDelta::zero() {
        format!("{} ago", duration(d))
    } else {
        format!("in {}", duration(-d))
    }
}

/// A provider call's duration: `840 ms`, `11.4 s`, `2 min 3 s`.
pub fn duration_ms(ms: i64) -> String {
    match ms {
        ..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => duration(TimeDelta::milliseconds(ms)),
    }
}

/// `1,234,567`.
pub(crate) fn thousands_sep(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An amount in minor units as money, for the tools file's `amount` field: `2500` in
/// GBP with 2 decimals is `£25.00`; a currency without a symbol here is `9.90 CHF`.
pub fn money(m: &crate::guard::MoneyField, minor: i64) -> String {
    let unit = 10_i64.pow(u32::from(m.minor_unit));
    let (whole, part) = (minor / unit, (minor % unit).unsigned_abs());
    // i64::MIN has no absolute value; an amount that size is never a real one.
    let mut number = thousands_sep(whole.checked_abs().unwrap_or(i64::MAX));
    if m.minor_unit > 0 {
        let width = usize::from(m.minor_unit);
        number = format!("{number}.{part:0width$}");
    }
    let sign = if minor < 0 { "-" } else { "" };
    let symbol = match m.currency.as_str() {
        "GBP" => "£",
        "EUR" => "€",
        "USD" => "$",
        "JPY" => "¥",
        other => return format!("{sign}{number} {other}"),
    };
    format!("{sign}{symbol}{number}")
}

/// A share as a percentage with one decimal: `0.4%`; `–` when there was nothing to share.
pub fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        "–".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// JSON indented for reading (object keys sorted, as serde_json keeps them).
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// JSON on one line, for table cells.
pub(crate) fn compact(v: &Value) -> String {
    v.to_string()
}

/// The first 12 characters of a key and an ellipsis: enough to tell keys apart on a page.
pub(crate) fn short_key(key: &str) -> String {
    match key.char_indices().nth(12) {
        Some((i, _)) => format!("{}…", &key[..i]),
        None => key.to_string(),
    }
}

/// A time as a page shows it: machine-readable, absolute UTC, and relative to the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct When {
    /// RFC 3339 with microseconds, for `<time datetime>`.
    pub iso: String,
    pub utc: String,
    pub rel: String,
}

pub fn when(t: DateTime<Utc>, now: DateTime<Utc>) -> When {
    When {
        iso: crate::guard::rfc3339(t),
        utc: utc(t),
        rel: relative(t, now),
    }
}

/// `{{ n|thousands }}`
#[askama::filter_fn]
pub fn thousands(n: &i64, _: &dyn askama::Values) -> askama::Result<String> {
    Ok(thousands_sep(*n))
}

/// `{{ value|pretty_json }}`
#[askama::filter_fn]
pub fn pretty_json(v: &Value, _: &dyn askama::Values) -> askama::Result<String> {
    Ok(pretty(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn minor_units_show_as_money() {
        let m = |currency: &str, minor_unit| {
            crate::guard::MoneyField::new("amount_p".into(), currency.into(), minor_unit).unwrap()
        };
        let cases = [
            (m("GBP", 2), 2500, "£25.00"),
            (m("GBP", 2), 5, "£0.05"),
            (m("GBP", 2), -1250, "-£12.50"),
            (m("GBP", 2), -5, "-£0.05"),
            (m("EUR", 2), 123_456_789, "€1,234,567.89"),
            (m("JPY", 0), 1500, "¥1,500"),
            (m("CHF", 2), 990, "9.90 CHF"),
            (m("KWD", 3), 1234, "1.234 KWD"),
            (m("USD", 0), i64::MIN, "-$9,223,372,036,854,775,807"),
        ];
        for (money_field, minor, shown) in cases {
            assert_eq!(
                money(&money_field, minor),
                shown,
                "{minor} {}",
                money_field.currency
            );
        }
    }

    #[test]
    fn times_are_written_in_utc_with_the_offset_shown() {
        let cases = [
            (
                "2026-11-29T14:02:11.402Z",
                "2026-11-29 14:02:11 UTC (+00:00)",
            ),
            (
                "2026-11-29T15:02:11+01:00",
                "2026-11-29 14:02:11 UTC (+00:00)",
            ),
            ("2026-01-01T00:00:00Z", "2026-01-01 00:00:00 UTC (+00:00)"),
        ];
        for (input, want) in cases {
            assert_eq!(utc(t(input)), want, "{input}");
        }
        assert_eq!(utc_hm(t("2026-11-29T14:05:59Z")), "14:05 UTC");
    }

    #[test]
    fn durations_use_at_most_two_units() {
        let cases = [
            (0, "0 s"),
            (45, "45 s"),
            (60, "1 min"),
            (200, "3 min 20 s"),
            (3600, "1 h"),
            (7500, "2 h 5 min"),
            (86400, "1 d"),
            (273_600, "3 d 4 h"),
            (-200, "3 min 20 s"),
        ];
        for (secs, want) in cases {
            assert_eq!(duration(TimeDelta::seconds(secs)), want, "{secs}");
        }
    }

    #[test]
    fn relative_times_say_which_way() {
        let now = t("2026-11-29T14:05:11Z");
        let cases = [
            ("2026-11-29T14:05:09Z", "just now"),
            ("2026-11-29T14:02:11Z", "3 min ago"),
            ("2026-11-29T16:10:11Z", "in 2 h 5 min"),
            ("2026-11-28T14:05:11Z", "1 d ago"),
        ];
        for (input, want) in cases {
            assert_eq!(relative(t(input), now), want, "{input}");
        }
    }

    #[test]
    fn call_durations_keep_a_tenth_of_a_second() {
        let cases = [
            (0, "0 ms"),
            (840, "840 ms"),
            (1000, "1.0 s"),
            (11_402, "11.4 s"),
            (123_000, "2 min 3 s"),
        ];
        for (ms, want) in cases {
            assert_eq!(duration_ms(ms), want, "{ms}");
        }
    }

    #[test]
    fn counts_and_shares_read_at_a_glance() {
        let cases = [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1_234_567, "1,234,567"),
            (-4500, "-4,500"),
        ];
        for (n, want) in cases {
            assert_eq!(thousands_sep(n), want, "{n}");
        }
        let shares = [
            (4, 1000, "0.4%"),
            (22, 100, "22.0%"),
            (0, 0, "–"),
            (1, 3, "33.3%"),
        ];
        for (part, whole, want) in shares {
            assert_eq!(percent(part, whole), want, "{part}/{whole}");
        }
    }

    #[test]
    fn json_is_indented_or_kept_on_one_line() {
        let v = json!({"refund_id": "rf_8XM1", "amount_p": 4500});
        assert_eq!(
            pretty(&v),
            "{\n  \"amount_p\": 4500,\n  \"refund_id\": \"rf_8XM1\"\n}"
        );
        assert_eq!(compact(&v), "{\"amount_p\":4500,\"refund_id\":\"rf_8XM1\"}");
        assert_eq!(pretty(&json!(null)), "null");
    }

    #[test]
    fn keys_are_shortened_to_twelve_characters() {
        let cases = [
            ("0123456789abcdef", "0123456789ab…"),
            ("abc", "abc"),
            ("", ""),
        ];
        for (key, want) in cases {
            assert_eq!(short_key(key), want);
        }
    }

    #[test]
    fn a_time_carries_all_three_forms() {
        let w = when(t("2026-11-29T14:02:11.402Z"), t("2026-11-29T14:05:11.402Z"));
        assert_eq!(w.iso, "2026-11-29T14:02:11.402000Z");
        assert_eq!(w.utc, "2026-11-29 14:02:11 UTC (+00:00)");
        assert_eq!(w.rel, "3 min ago");
    }
}
