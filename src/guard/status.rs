//! The closed vocabularies: record statuses, attempt kinds, admission outcomes and
//! resolutions. Each is written once here, with `ALL` and its string form, and every
//! user (metric families and their pre-created label slots, the tailer, the overview,
//! the key page, the demo's stats, the filters) reads it from here, so a new variant is
//! a compile error wherever it matters. The string forms are public contract (other
//! languages' guards, SQL users, metric labels).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($(#[$vmeta])* #[serde(rename = $text)] $variant),+ }

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
    /// What an admission to the guard found, as `idempotency_requests_total{outcome}`
    /// and the `/keys?outcome=` filter name it.
    AdmissionOutcome {
        /// Claimed the key.
        New = "new",
        /// The stored result, returned again.
        Replay = "replay",
        /// The stored definitive failure, returned again.
        ReplayFailure = "replay_failure",
        /// Refused while the first attempt runs (409).
        InFlight = "in_flight",
        /// Same key, other payload (422).
        Conflict = "conflict",
        /// Took over an UNKNOWN key or an expired lease.
        Takeover = "takeover",
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
    /// The statuses a record can enter from IN_PROGRESS, as
    /// `idempotency_transitions_total{status}` counts them.
    pub const ENTERED: [Status; 3] = [Status::Done, Status::Failed, Status::Unknown];

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Failed)
    }
}

impl AttemptKind {
    /// The admission outcome this row stands for, if it records an admission
    /// (`idempotency_requests_total{outcome}`). Exhaustive on purpose: a new kind must
    /// say whether it is an admission.
    pub fn admission_outcome(self) -> Option<AdmissionOutcome> {
        use AttemptKind::*;
        match self {
            Claimed => Some(AdmissionOutcome::New),
            Replayed => Some(AdmissionOutcome::Replay),
            ReplayedFailure => Some(AdmissionOutcome::ReplayFailure),
            PayloadMismatch => Some(AdmissionOutcome::Conflict),
            InFlightRejected => Some(AdmissionOutcome::InFlight),
            TakenOver => Some(AdmissionOutcome::Takeover),
            Completed | Failed | MarkedUnknown | ReconciledFound | Resent | Escalated
            | Resolved | StaleWriteRejected | DuplicateReviewed => None,
        }
    }
}

impl AdmissionOutcome {
    /// The attempt kind that records this outcome (the inverse of
    /// [`AttemptKind::admission_outcome`]).
    pub fn kind(self) -> AttemptKind {
        match self {
            AdmissionOutcome::New => AttemptKind::Claimed,
            AdmissionOutcome::Replay => AttemptKind::Replayed,
            AdmissionOutcome::ReplayFailure => AttemptKind::ReplayedFailure,
            AdmissionOutcome::Conflict => AttemptKind::PayloadMismatch,
            AdmissionOutcome::InFlight => AttemptKind::InFlightRejected,
            AdmissionOutcome::Takeover => AttemptKind::TakenOver,
        }
    }

    /// A stored answer returned again: what the replay rate counts.
    pub(crate) fn is_replay(self) -> bool {
        matches!(
            self,
            AdmissionOutcome::Replay | AdmissionOutcome::ReplayFailure
        )
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
    fn each_outcome_is_recorded_by_exactly_one_kind() {
        for outcome in AdmissionOutcome::ALL {
            assert_eq!(outcome.kind().admission_outcome(), Some(*outcome));
        }
        let admissions = AttemptKind::ALL
            .iter()
            .filter(|k| k.admission_outcome().is_some())
            .count();
        assert_eq!(admissions, AdmissionOutcome::ALL.len());
        assert_eq!(
            "replay_failure".parse::<AdmissionOutcome>(),
            Ok(AdmissionOutcome::ReplayFailure)
        );
        assert!("escalated".parse::<AdmissionOutcome>().is_err());
    }

    #[test]
    fn an_unknown_status_names_itself_in_the_error() {
        let err = "done".parse::<Status>().unwrap_err();
        assert_eq!(err.to_string(), "unknown Status \"done\"");
    }
}
