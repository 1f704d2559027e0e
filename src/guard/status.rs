//! The closed vocabularies stored in the tables: record statuses and attempt kinds.
//! Their string forms are public contract (other languages' guards, SQL users).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownName { kind: stringify!($name), name: other.chars().take(40).collect() }),
                }
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {name:?}")]
pub struct UnknownName {
    pub kind: &'static str,
    pub name: String,
}

string_enum!(
    /// Where a key stands. UNKNOWN means exactly that: the provider may or may not
    /// have performed the effect. A timeout is never FAILED.
    Status {
        InProgress = "IN_PROGRESS",
        Done = "DONE",
        Failed = "FAILED",
        Unknown = "UNKNOWN",
    }
);

string_enum!(
    /// One row of the attempt log. Each kind is written in the same transaction as the
    /// record change it describes.
    AttemptKind {
        Claimed = "claimed",
        Replayed = "replayed",
        ReplayedFailure = "replayed_failure",
        InFlightRejected = "in_flight_rejected",
        PayloadMismatch = "payload_mismatch",
        Completed = "completed",
        Failed = "failed",
        MarkedUnknown = "marked_unknown",
        TakenOver = "taken_over",
        ReconciledFound = "reconciled_found",
        Resent = "resent",
        Escalated = "escalated",
        Resolved = "resolved",
        StaleWriteRejected = "stale_write_rejected",
        DuplicateReviewed = "duplicate_reviewed",
    }
);

string_enum!(
    /// A resolver's verdict on a suspected duplicate pair (`/duplicates`): intended (a
    /// genuine repeat, both effects wanted) or confirmed (a real duplicate, to be undone
    /// at the provider).
    DuplicateVerdict {
        Intended = "intended",
        Confirmed = "confirmed",
    }
);

string_enum!(
    /// A person's decision on a key the guard could not decide.
    Resolution {
        Done = "done",
        Failed = "failed",
        Release = "release",
    }
);

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Failed)
    }
}

impl AttemptKind {
    /// The admission outcome this row stands for, if it records an admission
    /// (`idempotency_requests_total{outcome}`).
    pub fn admission_outcome(self) -> Option<&'static str> {
        Some(match self {
            AttemptKind::Claimed => "new",
            AttemptKind::Replayed => "replay",
            AttemptKind::ReplayedFailure => "replay_failure",
            AttemptKind::PayloadMismatch => "conflict",
            AttemptKind::InFlightRejected => "in_flight",
            AttemptKind::TakenOver => "takeover",
            _ => return None,
        })
    }

    /// The attempt kinds recorded for admissions with `outcome` (the inverse of
    /// [`admission_outcome`](Self::admission_outcome)); empty for a name that is no
    /// outcome.
    pub fn with_outcome(outcome: &str) -> Vec<AttemptKind> {
        Self::ALL
            .iter()
            .copied()
            .filter(|k| k.admission_outcome() == Some(outcome))
            .collect()
    }

    /// Every admission outcome, in the order of [`AttemptKind::ALL`].
    pub fn outcomes() -> impl Iterator<Item = &'static str> {
        Self::ALL.iter().filter_map(|k| k.admission_outcome())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_through_its_string() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>().unwrap(), *s);
        }
        for k in AttemptKind::ALL {
            assert_eq!(k.as_str().parse::<AttemptKind>().unwrap(), *k);
        }
        assert_eq!(AttemptKind::ALL.len(), 15);
    }

    #[test]
    fn each_outcome_stands_for_the_kinds_that_record_it() {
        let cases: [(&str, &[AttemptKind]); 7] = [
            ("new", &[AttemptKind::Claimed]),
            ("replay", &[AttemptKind::Replayed]),
            ("replay_failure", &[AttemptKind::ReplayedFailure]),
            ("conflict", &[AttemptKind::PayloadMismatch]),
            ("in_flight", &[AttemptKind::InFlightRejected]),
            ("takeover", &[AttemptKind::TakenOver]),
            ("escalated", &[]),
        ];
        for (outcome, kinds) in cases {
            assert_eq!(AttemptKind::with_outcome(outcome), kinds, "{outcome}");
        }
        assert_eq!(AttemptKind::outcomes().count(), 6);
    }

    #[test]
    fn an_unknown_status_names_itself_in_the_error() {
        let err = "done".parse::<Status>().unwrap_err();
        assert_eq!(err.to_string(), "unknown Status \"done\"");
    }
}
