//! The one time format of exports, hashes and pages.

use chrono::{DateTime, SecondsFormat, Utc};

/// RFC 3339 UTC with microseconds and a `Z`, the one time format of exports and hashes.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Times in exports, manifests and checkpoints: RFC 3339 UTC with microseconds, the
/// form the hash covers.
pub mod micros {
    use super::rfc3339;
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rfc3339(*t))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.to_utc())
            .map_err(serde::de::Error::custom)
    }

    pub(crate) mod option {
        use super::*;

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&rfc3339(*t)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    DateTime::parse_from_rfc3339(&text)
                        .map(|t| t.to_utc())
                        .map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}
