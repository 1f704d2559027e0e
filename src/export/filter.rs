//! Which attempts an export selects. The same filters serve the CLI flags, the HTTP
//! query parameters and the manifest, where they are written back as given.

use super::row::micros;
use crate::guard::IdempotencyKey;
use crate::store::{FILTER_TIME_RANGE, filter_time_in_range};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// All filters are optional and combine with AND. `since` is inclusive and `until`
/// exclusive, both on the attempt's `occurred_at`; `tenant`, `tool`, `key` and
/// `business_ref` select whole keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportFilter {
    #[serde(with = "micros::option")]
    pub since: Option<DateTime<Utc>>,
    #[serde(with = "micros::option")]
    pub until: Option<DateTime<Utc>>,
    pub tenant: Option<String>,
    pub tool: Option<String>,
    pub key: Option<String>,
    pub business_ref: Option<String>,
}

/// A filter that cannot be used, naming the field (a CLI flag or query parameter).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct FilterError {
    pub field: &'static str,
    pub message: String,
}

impl ExportFilter {
    /// Builds a filter from text as a person types it: times as RFC 3339
    /// (`2026-11-29T14:02:11Z`) or a date (`2026-11-29`, midnight UTC); empty text
    /// means "no filter" (what an HTML form sends for an empty field).
    pub fn parse(
        since: Option<&str>,
        until: Option<&str>,
        tenant: Option<&str>,
        tool: Option<&str>,
        key: Option<&str>,
        business_ref: Option<&str>,
    ) -> Result<ExportFilter, FilterError> {
        fn text(v: Option<&str>) -> Option<&str> {
            v.map(str::trim).filter(|s| !s.is_empty())
        }
        let filter = ExportFilter {
            since: text(since).map(|t| parse_time("since", t)).transpose()?,
            until: text(until).map(|t| parse_time("until", t)).transpose()?,
            tenant: text(tenant).map(String::from),
            tool: text(tool).map(String::from),
            key: text(key).map(String::from),
            business_ref: text(business_ref).map(String::from),
        };
        filter.validate()?;
        Ok(filter)
    }

    pub fn validate(&self) -> Result<(), FilterError> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(FilterError {
                field: "until",
                message: "must be later than since".into(),
            });
        }
        if let Some(key) = &self.key {
            IdempotencyKey::parse(key).map_err(|_| FilterError {
                field: "key",
                message: "must be an idempotency key: 64 lowercase hex characters".into(),
            })?;
        }
        Ok(())
    }
}

/// RFC 3339 with any offset, or a plain date meaning midnight UTC, within the years
/// both stores can compare.
pub fn parse_time(field: &'static str, text: &str) -> Result<DateTime<Utc>, FilterError> {
    let read = DateTime::parse_from_rfc3339(text)
        .map(|t| t.to_utc())
        .ok()
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| t.and_utc())
        });
    if let Some(t) = read {
        if filter_time_in_range(t) {
            return Ok(t);
        }
        return Err(FilterError {
            field,
            message: format!(
                "{:?} is {t}, expected a time {FILTER_TIME_RANGE}",
                text.chars().take(60).collect::<String>()
            ),
        });
    }
    Err(FilterError {
        field,
        message: format!(
            "{:?} is not a time: use RFC 3339 (2026-11-29T14:02:11Z) or a date (2026-11-29)",
            text.chars().take(60).collect::<String>()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_dates_in_utc() {
        let table = [
            ("2026-11-29T14:02:11Z", "2026-11-29T14:02:11+00:00"),
            ("2026-11-29T15:02:11+01:00", "2026-11-29T14:02:11+00:00"),
            ("2026-11-29", "2026-11-29T00:00:00+00:00"),
        ];
        for (input, expected) in table {
            assert_eq!(parse_time("since", input).unwrap().to_rfc3339(), expected);
        }
        let err = parse_time("since", "yesterday").unwrap_err();
        assert_eq!(err.field, "since");
        assert!(err.message.contains("RFC 3339"), "{err}");
    }

    #[test]
    fn times_outside_the_years_1_to_9999_name_their_field() {
        for input in ["-5000-01-01", "+10000-01-01", "0000-12-31T23:59:59Z"] {
            let err = parse_time("since", input).unwrap_err();
            assert_eq!(err.field, "since");
            assert!(
                err.message.contains("between the years 1 and 9999"),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_fields_mean_no_filter() {
        let f = ExportFilter::parse(Some(""), None, Some("  "), Some("issue_refund"), None, None)
            .unwrap();
        assert_eq!(
            f,
            ExportFilter {
                tool: Some("issue_refund".into()),
                ..ExportFilter::default()
            }
        );
    }

    #[test]
    fn a_backwards_range_and_a_malformed_key_name_their_field() {
        let err = ExportFilter::parse(
            Some("2026-12-01"),
            Some("2026-11-01"),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "until");
        let err = ExportFilter::parse(None, None, None, None, Some("order:A-1"), None).unwrap_err();
        assert_eq!(err.field, "key");
    }
}
