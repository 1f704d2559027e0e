//! Reading query parameters. Every value is checked here and a bad one becomes a 400
//! that names the parameter and the form it expects. Empty values (an untouched form
//! field) count as absent; unknown parameters (Grafana adds `orgId`) are ignored.

use crate::guard::{AdmissionOutcome, AttemptKind, IdempotencyKey, Resolution, Status};
use crate::store::Cursor;
use crate::time_input::{self, quoted};
use crate::web::Error;
use chrono::{DateTime, Utc};

/// The longest text a filter may carry: the guard's limit on intent fields.
const MAX_TEXT_BYTES: usize = 512;

/// The query string as name/value pairs, in order.
#[derive(Debug, Clone, Default)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    /// The first non-empty value of `name`, trimmed.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .find(|v| !v.is_empty())
    }

    /// A free-text filter (tenant, tool, business ref…), bounded in length.
    pub fn text(&self, name: &'static str) -> Result<Option<String>, Error> {
        match self.get(name) {
            Some(v) if v.len() > MAX_TEXT_BYTES => Err(Error::bad_request(
                name,
                format!("expected at most {MAX_TEXT_BYTES} bytes, got {}", v.len()),
            )),
            Some(v) => Ok(Some(v.to_string())),
            None => Ok(None),
        }
    }

    pub fn time(
        &self,
        name: &'static str,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, Error> {
        self.get(name).map(|v| parse_time(name, v, now)).transpose()
    }
}

/// A filter time in [`time_input`]'s grammar, as a 400 naming the parameter.
pub fn parse_time(
    field: &'static str,
    value: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, Error> {
    time_input::parse(value, now).map_err(|message| Error::bad_request(field, message))
}

pub fn parse_status(value: &str) -> Result<Status, Error> {
    value.to_ascii_uppercase().parse().map_err(|_| {
        Error::bad_request(
            "status",
            format!(
                "{} is not a status; expected one of IN_PROGRESS, DONE, FAILED, UNKNOWN",
                quoted(value)
            ),
        )
    })
}

/// Attempt kinds by their stored names, comma-separated (`taken_over,escalated`).
pub fn parse_attempt_kinds(value: &str) -> Result<Vec<AttemptKind>, Error> {
    list(value)
        .map(|name| {
            name.parse().map_err(|_| {
                Error::bad_request(
                    "attempt_kind",
                    format!(
                        "{} is not an attempt kind; expected one or more of {}, comma-separated",
                        quoted(name),
                        names(AttemptKind::ALL.iter().map(|k| k.as_str()))
                    ),
                )
            })
        })
        .collect()
}

/// Admission outcomes as `idempotency_requests_total{outcome}` names them,
/// comma-separated (`replay,replay_failure`): the attempt kinds that record them.
pub fn parse_outcomes(value: &str) -> Result<Vec<AttemptKind>, Error> {
    let mut kinds = Vec::new();
    for name in list(value) {
        let outcome = name.parse::<AdmissionOutcome>().map_err(|_| {
            Error::bad_request(
                "outcome",
                format!(
                    "{} is not an admission outcome; expected one or more of {}, comma-separated",
                    quoted(name),
                    names(AdmissionOutcome::ALL.iter().map(|o| o.as_str()))
                ),
            )
        })?;
        kinds.push(outcome.kind());
    }
    Ok(kinds)
}

/// Statuses a key entered, in any case, comma-separated (`DONE,FAILED`): those
/// `idempotency_transitions_total{status}` has ([`super::counted::enterable`]).
pub fn parse_entered(value: &str) -> Result<Vec<Status>, Error> {
    let enterable = super::counted::enterable();
    let expected = || names(enterable.iter().map(|s| s.as_str()));
    list(value)
        .map(|name| match name.to_ascii_uppercase().parse::<Status>() {
            Ok(s) if enterable.contains(&s) => Ok(s),
            Ok(s) => Err(Error::bad_request(
                "entered",
                format!(
                    "no attempt enters {s} (idempotency_transitions_total has no such series); \
                     expected one or more of {}, comma-separated",
                    expected()
                ),
            )),
            Err(_) => Err(Error::bad_request(
                "entered",
                format!(
                    "{} is not a status; expected one or more of {}, comma-separated",
                    quoted(name),
                    expected()
                ),
            )),
        })
        .collect()
}

/// Resolutions as `idempotency_resolutions_total{resolution}` names them, in any case,
/// comma-separated (`done,release`).
pub fn parse_resolutions(value: &str) -> Result<Vec<Resolution>, Error> {
    list(value)
        .map(|name| {
            name.to_ascii_lowercase().parse().map_err(|_| {
                Error::bad_request(
                    "resolution",
                    format!(
                        "{} is not a resolution; expected one or more of {}, comma-separated",
                        quoted(name),
                        names(Resolution::ALL.iter().map(|r| r.as_str()))
                    ),
                )
            })
        })
        .collect()
}

/// The non-empty items of a comma-separated value, trimmed.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty())
}

fn names<'a>(all: impl Iterator<Item = &'a str>) -> String {
    all.collect::<Vec<_>>().join(", ")
}

/// A key or its beginning: 4 to 64 hex digits, any case (stored keys are lowercase).
pub fn parse_key_prefix(field: &'static str, value: &str) -> Result<String, Error> {
    let ok = (4..=64).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(Error::bad_request(
            field,
            format!(
                "expected 4 to 64 hexadecimal characters (a key or its beginning), got {}",
                quoted(value)
            ),
        ))
    }
}

/// A page position as the "next page" link writes it: `<RFC 3339 time>_<key>`.
pub fn format_cursor(c: &Cursor) -> String {
    format!("{}_{}", crate::guard::rfc3339(c.at), c.key)
}

pub fn parse_cursor(field: &'static str, value: &str) -> Result<Cursor, Error> {
    let bad = || {
        Error::bad_request(
            field,
            format!(
                "expected a page position as a \"next page\" link writes it (TIME_KEY), got {}",
                quoted(value)
            ),
        )
    };
    let (at, key) = value.rsplit_once('_').ok_or_else(bad)?;
    let at = DateTime::parse_from_rfc3339(at)
        .map_err(|_| bad())?
        .to_utc();
    let key_ok = key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !key_ok {
        return Err(bad());
    }
    Ok(Cursor {
        at,
        key: key.to_string(),
    })
}

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 200;

pub fn parse_limit(value: Option<&str>) -> Result<u32, Error> {
    let Some(v) = value else {
        return Ok(DEFAULT_LIMIT);
    };
    match v.parse::<u32>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(Error::bad_request(
            "limit",
            format!(
                "expected a whole number from 1 to {MAX_LIMIT}, got {}",
                quoted(v)
            ),
        )),
    }
}

/// A whole key from a path: 64 lowercase hex digits.
pub fn parse_key(text: &str) -> Result<IdempotencyKey, Error> {
    IdempotencyKey::parse(text).map_err(|_| {
        Error::bad_request(
            "key",
            "expected 64 lowercase hexadecimal characters (a SHA-256 key)",
        )
    })
}

/// What a person decided, from a form or JSON field.
pub fn parse_resolution(text: Option<&str>) -> Result<Resolution, Error> {
    let text = text.map(str::trim).unwrap_or_default();
    text.parse().map_err(|_| {
        Error::bad_request(
            "resolution",
            if text.is_empty() {
                "choose what happened: done, failed or release".to_string()
            } else {
                format!("{text:?} is not a resolution; expected done, failed or release")
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn an_unreadable_time_is_a_400_naming_the_parameter() {
        let now = t("2026-11-29T14:02:11Z");
        assert_eq!(
            parse_time("from", "now-1h", now).unwrap(),
            t("2026-11-29T13:02:11Z")
        );
        let e = parse_time("to", "yesterday", now).unwrap_err().to_string();
        assert!(e.starts_with("to: cannot read"), "{e}");
        let e = parse_time("from", "now-400000w", now)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("from: ") && e.contains("between the years 1 and 9999"),
            "{e}"
        );
    }

    #[test]
    fn statuses_are_read_in_any_case() {
        assert_eq!(parse_status("UNKNOWN").unwrap(), Status::Unknown);
        assert_eq!(parse_status("in_progress").unwrap(), Status::InProgress);
        let e = parse_status("finished").unwrap_err().to_string();
        assert!(
            e.contains("status") && e.contains("IN_PROGRESS, DONE, FAILED, UNKNOWN"),
            "{e}"
        );
    }

    #[test]
    fn attempt_kinds_and_outcomes_are_read_as_lists() {
        use AttemptKind::*;
        let cases: [(&str, Vec<AttemptKind>); 3] = [
            ("escalated", vec![Escalated]),
            ("taken_over, escalated,", vec![TakenOver, Escalated]),
            ("payload_mismatch", vec![PayloadMismatch]),
        ];
        for (input, want) in cases {
            assert_eq!(parse_attempt_kinds(input).unwrap(), want, "{input}");
        }
        let cases: [(&str, Vec<AttemptKind>); 3] = [
            ("conflict", vec![PayloadMismatch]),
            ("replay,replay_failure", vec![Replayed, ReplayedFailure]),
            ("new,takeover", vec![Claimed, TakenOver]),
        ];
        for (input, want) in cases {
            assert_eq!(parse_outcomes(input).unwrap(), want, "{input}");
        }
        let e = parse_attempt_kinds("escalated,mismatch")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("attempt_kind: \"mismatch\" is not an attempt kind; expected one or more of claimed, replayed,"),
            "{e}"
        );
        let e = parse_outcomes("escalated").unwrap_err().to_string();
        assert!(
            e.starts_with("outcome: \"escalated\" is not an admission outcome; expected one or more of new, replay, replay_failure, in_flight, conflict, takeover"),
            "{e}"
        );
    }

    #[test]
    fn entered_statuses_are_those_the_transitions_metric_counts() {
        assert_eq!(
            parse_entered("done, unknown").unwrap(),
            [Status::Done, Status::Unknown]
        );
        let e = parse_entered("IN_PROGRESS").unwrap_err().to_string();
        assert!(
            e.starts_with("entered: no attempt enters IN_PROGRESS")
                && e.contains("expected one or more of DONE, FAILED, UNKNOWN"),
            "{e}"
        );
        let e = parse_entered("DONE,finished").unwrap_err().to_string();
        assert!(
            e.starts_with("entered: \"finished\" is not a status"),
            "{e}"
        );
    }

    #[test]
    fn key_prefixes_are_hex_of_four_to_sixty_four() {
        assert_eq!(parse_key_prefix("key", "AB12").unwrap(), "ab12");
        assert_eq!(
            parse_key_prefix("key", &"f".repeat(64)).unwrap(),
            "f".repeat(64)
        );
        for bad in ["ab1", "xyz1", &"a".repeat(65), "ab 12"] {
            let e = parse_key_prefix("key", bad).unwrap_err().to_string();
            assert!(e.starts_with("key: expected 4 to 64 hexadecimal"), "{e}");
        }
    }

    #[test]
    fn a_cursor_survives_the_round_trip_through_a_link() {
        let c = Cursor {
            at: t("2026-11-29T14:02:11.402123Z"),
            key: "a".repeat(64),
        };
        assert_eq!(parse_cursor("after", &format_cursor(&c)).unwrap(), c);
        for bad in ["", "x_y", "2026-11-29T14:02:11Z_abc", "garbage"] {
            assert!(
                parse_cursor("after", bad)
                    .unwrap_err()
                    .to_string()
                    .starts_with("after: ")
            );
        }
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(parse_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(parse_limit(Some("200")).unwrap(), 200);
        for bad in ["0", "201", "-1", "ten"] {
            assert!(
                parse_limit(Some(bad))
                    .unwrap_err()
                    .to_string()
                    .starts_with("limit: ")
            );
        }
    }

    #[test]
    fn the_last_non_empty_value_of_a_parameter_counts() {
        let p = Params(vec![
            ("tool".into(), "  ".into()),
            ("tool".into(), " x ".into()),
        ]);
        assert_eq!(p.get("tool"), Some("x"));
        assert_eq!(p.get("tenant"), None);
    }
}
