//! What one attempt row means for the metrics: a pure mapping, so the whole contract
//! between attempt kinds and metric families is in one table with its tests.

use crate::guard::{AdmissionOutcome, AttemptKind, Resolution, Status};

/// One metric update caused by one attempt row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricUpdate {
    /// `idempotency_requests_total{outcome}`.
    Request(AdmissionOutcome),
    /// `idempotency_transitions_total{status}`.
    Transition(Status),
    /// `idempotency_resolutions_total{resolution}`.
    Resolution(Resolution),
    /// `idempotency_escalations_total`.
    Escalation,
    /// `idempotency_attempt_duration_seconds`.
    Duration(f64),
    /// `idempotency_suspected_duplicates_total`.
    SuspectedDuplicate,
}

/// The metric updates of one row. `resolution` and `previous_status` come from the
/// row's detail (only `resolved` rows carry them); `suspected_duplicate` is whether a
/// `claimed` row names `detail.suspected_duplicate_of`.
///
/// Transitions count records *entering* a status: `completed`, `reconciled_found` and
/// a `done` resolution enter DONE; `failed` and a `failed` resolution enter FAILED;
/// `marked_unknown`, `escalated` and a `release` of an expired IN_PROGRESS lease enter
/// UNKNOWN (a release of a key that already was UNKNOWN leaves it there: no entry).
/// `taken_over` moves a key back to IN_PROGRESS, which this family does not count.
pub fn effects(
    kind: AttemptKind,
    resolution: Option<&str>,
    previous_status: Option<&str>,
    duration_ms: Option<i64>,
    suspected_duplicate: bool,
) -> Vec<MetricUpdate> {
    let mut out = Vec::with_capacity(2);
    if let Some(outcome) = kind.admission_outcome() {
        out.push(MetricUpdate::Request(outcome));
    }
    if kind == AttemptKind::Claimed && suspected_duplicate {
        out.push(MetricUpdate::SuspectedDuplicate);
    }
    match kind {
        AttemptKind::Completed | AttemptKind::ReconciledFound => {
            out.push(MetricUpdate::Transition(Status::Done));
        }
        AttemptKind::Failed => out.push(MetricUpdate::Transition(Status::Failed)),
        AttemptKind::MarkedUnknown => out.push(MetricUpdate::Transition(Status::Unknown)),
        AttemptKind::Escalated => {
            out.push(MetricUpdate::Transition(Status::Unknown));
            out.push(MetricUpdate::Escalation);
        }
        AttemptKind::Resolved => {
            if let Some(r) = resolution.and_then(|r| r.parse::<Resolution>().ok()) {
                out.push(MetricUpdate::Resolution(r));
                let entered = match r {
                    Resolution::Done => Some(Status::Done),
                    Resolution::Failed => Some(Status::Failed),
                    Resolution::Release => (previous_status != Some(Status::Unknown.as_str()))
                        .then_some(Status::Unknown),
                };
                out.extend(entered.map(MetricUpdate::Transition));
            }
        }
        _ => {}
    }
    // Provider calls only: the guard times `execute` into these three kinds.
    if matches!(
        kind,
        AttemptKind::Completed | AttemptKind::Failed | AttemptKind::MarkedUnknown
    ) && let Some(ms) = duration_ms
    {
        out.push(MetricUpdate::Duration(ms.max(0) as f64 / 1000.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptKind::*;
    use MetricUpdate::*;

    #[test]
    fn every_kind_maps_to_the_documented_updates() {
        let table: &[(AttemptKind, &[MetricUpdate])] = &[
            (Claimed, &[Request(AdmissionOutcome::New)]),
            (Replayed, &[Request(AdmissionOutcome::Replay)]),
            (ReplayedFailure, &[Request(AdmissionOutcome::ReplayFailure)]),
            (PayloadMismatch, &[Request(AdmissionOutcome::Conflict)]),
            (InFlightRejected, &[Request(AdmissionOutcome::InFlight)]),
            (TakenOver, &[Request(AdmissionOutcome::Takeover)]),
            (Completed, &[Transition(Status::Done), Duration(1.5)]),
            (ReconciledFound, &[Transition(Status::Done)]),
            (Failed, &[Transition(Status::Failed), Duration(1.5)]),
            (MarkedUnknown, &[Transition(Status::Unknown), Duration(1.5)]),
            (Escalated, &[Transition(Status::Unknown), Escalation]),
            (Resent, &[]),
            (StaleWriteRejected, &[]),
            (DuplicateReviewed, &[]),
        ];
        for (kind, expected) in table {
            assert_eq!(
                &effects(*kind, None, None, Some(1500), false),
                expected,
                "{kind}"
            );
        }
        assert_eq!(
            table.len() + 1,
            AttemptKind::ALL.len(),
            "every kind but `resolved` is in the table"
        );
    }

    #[test]
    fn a_claim_naming_a_suspected_duplicate_counts_one() {
        assert_eq!(
            effects(Claimed, None, None, None, true),
            [Request(AdmissionOutcome::New), SuspectedDuplicate]
        );
        assert_eq!(
            effects(Replayed, None, None, None, true),
            [Request(AdmissionOutcome::Replay)]
        );
    }

    #[test]
    fn a_resolution_enters_the_status_it_decides() {
        assert_eq!(
            effects(Resolved, Some("done"), Some("UNKNOWN"), None, false),
            [
                Resolution(super::Resolution::Done),
                Transition(Status::Done)
            ]
        );
        assert_eq!(
            effects(Resolved, Some("failed"), Some("IN_PROGRESS"), None, false),
            [
                Resolution(super::Resolution::Failed),
                Transition(Status::Failed)
            ]
        );
    }

    #[test]
    fn releasing_an_unknown_key_is_not_an_entry_into_unknown() {
        assert_eq!(
            effects(Resolved, Some("release"), Some("UNKNOWN"), None, false),
            [Resolution(super::Resolution::Release)]
        );
        assert_eq!(
            effects(Resolved, Some("release"), Some("IN_PROGRESS"), None, false),
            [
                Resolution(super::Resolution::Release),
                Transition(Status::Unknown)
            ]
        );
    }

    #[test]
    fn a_resolution_this_version_does_not_know_counts_nothing() {
        assert_eq!(effects(Resolved, Some("refund"), None, None, false), []);
        assert_eq!(effects(Resolved, None, None, None, false), []);
    }

    #[test]
    fn a_missing_duration_is_not_observed() {
        assert_eq!(
            effects(MarkedUnknown, None, None, None, false),
            [Transition(Status::Unknown)]
        );
    }
}
