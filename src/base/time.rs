//! The one time format of exports, hashes and pages.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};

/// RFC 3339 UTC with microseconds and a `Z`, the one time format of exports and hashes.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(27);
    write_rfc3339(&mut out, t);
    out
}

/// [`rfc3339`] appended to `out`: the chain hashes a time for every row `verify` reads,
/// so without a `String` or `fmt` per time. Years outside 0..=9999 and leap seconds
/// take chrono's way.
pub(crate) fn write_rfc3339(out: &mut String, t: DateTime<Utc>) {
    let (year, nanos) = (t.year(), t.nanosecond());
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        out.push_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true));
        return;
    }
    let fields = [
        (year as u32, 4, '-'),
        (t.month(), 2, '-'),
        (t.day(), 2, 'T'),
        (t.hour(), 2, ':'),
        (t.minute(), 2, ':'),
        (t.second(), 2, '.'),
        (nanos / 1000, 6, 'Z'),
    ];
    for (n, width, after) in fields {
        let mut digits = [b'0'; 6];
        let mut rest = n;
        for d in digits[..width].iter_mut().rev() {
            *d = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        out.push_str(std::str::from_utf8(&digits[..width]).expect("ASCII digits"));
        out.push(after);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_chrono_writes_them() {
        let times = [
            "2026-11-29T14:02:11.000402Z",
            "2026-01-01T00:00:00Z",
            "0001-02-03T04:05:06.999999999Z",
            "9999-12-31T23:59:59.123456789Z",
            "2016-12-31T23:59:60.5Z",
            "1969-07-20T20:17:40.000001Z",
        ];
        let mut all: Vec<DateTime<Utc>> = times
            .iter()
            .map(|t| DateTime::parse_from_rfc3339(t).unwrap().to_utc())
            .collect();
        all.extend([DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC]);
        all.extend((0..2000i64).map(|i| {
            DateTime::UNIX_EPOCH + chrono::TimeDelta::microseconds(i * 7_919_000_003_917)
        }));
        for t in all {
            let mut out = String::from("x");
            write_rfc3339(&mut out, t);
            let chrono = t.to_rfc3339_opts(SecondsFormat::Micros, true);
            assert_eq!(out[1..], chrono, "{t:?}");
            assert_eq!(rfc3339(t), chrono);
        }
    }
}
