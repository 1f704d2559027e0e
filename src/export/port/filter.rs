//! Which attempts an export selects. The same filters serve the CLI flags, the HTTP
//! query parameters and the manifest, where they are written back as given.

use crate::base::time::micros;
use crate::guard::IdempotencyKey;
use crate::time_input;
use chrono::{DateTime, Utc};
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
    pub key: Option<IdempotencyKey>,
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
    /// Builds a filter from text as a person types it: times in [`time_input`]'s
    /// grammar (RFC 3339, a date, `now-24h`, epoch milliseconds), read against `now`;
    /// empty text means "no filter" (what an HTML form sends for an empty field).
    pub fn parse(
        now: DateTime<Utc>,
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
        let mut filter = ExportFilter {
            since: text(since)
                .map(|t| parse_time("since", t, now))
                .transpose()?,
            until: text(until)
                .map(|t| parse_time("until", t, now))
                .transpose()?,
            tenant: text(tenant).map(String::from),
            tool: text(tool).map(String::from),
            key: None,
            business_ref: text(business_ref).map(String::from),
        };
        filter.validate()?;
        // Read after the times are checked, so a request wrong in both is told about
        // the times first, as before the key was typed.
        filter.key = text(key).map(parse_key).transpose()?;
        Ok(filter)
    }

    pub(crate) fn validate(&self) -> Result<(), FilterError> {
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since >= until
        {
            return Err(FilterError {
                field: "until",
                message: "must be later than since".into(),
            });
        }
        Ok(())
    }
}

/// The `key` filter, naming the field when it is no key.
fn parse_key(text: &str) -> Result<IdempotencyKey, FilterError> {
    IdempotencyKey::parse(text).map_err(|_| FilterError {
        field: "key",
        message: "must be an idempotency key: 64 lowercase hex characters".into(),
    })
}

/// A filter time in [`time_input`]'s grammar, naming the field when it cannot be used.
fn parse_time(
    field: &'static str,
    text: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, FilterError> {
    time_input::parse(text, now).map_err(|message| FilterError { field, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T14:02:11Z")
            .unwrap()
            .to_utc()
    }

    #[test]
    fn times_share_the_pages_grammar_and_name_their_field() {
        assert_eq!(
            parse_time("since", "now-1d", now()).unwrap().to_rfc3339(),
            "2026-11-28T14:02:11+00:00"
        );
        let err = parse_time("since", "yesterday", now()).unwrap_err();
        assert_eq!(err.field, "since");
        assert!(err.message.contains("RFC 3339"), "{err}");
        let err = parse_time("until", "+10000-01-01", now()).unwrap_err();
        assert_eq!(err.field, "until");
        assert!(
            err.message.contains("between the years 1 and 9999"),
            "{err}"
        );
    }

    #[test]
    fn empty_fields_mean_no_filter() {
        let f = ExportFilter::parse(
            now(),
            Some(""),
            None,
            Some("  "),
            Some("issue_refund"),
            None,
            None,
        )
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
            now(),
            Some("2026-12-01"),
            Some("2026-11-01"),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "until");
        let err = ExportFilter::parse(now(), None, None, None, None, Some("order:A-1"), None)
            .unwrap_err();
        assert_eq!(err.field, "key");
    }
}
