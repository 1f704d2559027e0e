//! The one time format of exports, hashes and pages.

use chrono::{DateTime, SecondsFormat, Utc};

/// RFC 3339 UTC with microseconds and a `Z`, the one time format of exports and hashes.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}
