//! The attempts behind a metric series, for the links that open its keys:
//! `entered=UNKNOWN` is what `idempotency_transitions_total{status="UNKNOWN"}` counts,
//! `resolution=release` what `idempotency_resolutions_total{resolution="release"}`
//! counts. Which attempts those are is read off the tailer's own table ([`effects`])
//! rather than written again here, so a link and its metric cannot disagree: a
//! `resolved` attempt enters the status its resolution decided, and a release enters
//! UNKNOWN only from another status.

use crate::guard::{AttemptKind, Resolution, Status};
use crate::store::ResolvedAs;
use crate::tail::events::{MetricUpdate, effects};

/// The attempts some of whose metric updates `counts` accepts: their kinds, and of the
/// `resolved` ones, what they decided from which previous status.
fn attempts_counted(counts: impl Fn(&MetricUpdate) -> bool) -> (Vec<AttemptKind>, Vec<ResolvedAs>) {
    let counted = |updates: Vec<MetricUpdate>| updates.iter().any(&counts);
    // Only a `resolved` row's detail changes what it counts (`effects`' contract).
    let mut kinds: Vec<AttemptKind> = AttemptKind::ALL
        .iter()
        .copied()
        .filter(|k| *k != AttemptKind::Resolved && counted(effects(*k, None, None, None, false)))
        .collect();
    let previous: Vec<Option<Status>> = std::iter::once(None)
        .chain(Status::ALL.iter().copied().map(Some))
        .collect();
    let resolved: Vec<ResolvedAs> = Resolution::ALL
        .iter()
        .flat_map(|r| {
            previous.iter().map(|p| ResolvedAs {
                resolution: *r,
                previous_status: *p,
            })
        })
        .filter(|r| {
            counted(effects(
                AttemptKind::Resolved,
                Some(r.resolution.as_str()),
                r.previous_status.map(Status::as_str),
                None,
                false,
            ))
        })
        .collect();
    if !resolved.is_empty() {
        kinds.push(AttemptKind::Resolved);
    }
    (kinds, resolved)
}

/// The attempts that enter one of `statuses` (`idempotency_transitions_total`).
pub fn attempts_entering(statuses: &[Status]) -> (Vec<AttemptKind>, Vec<ResolvedAs>) {
    attempts_counted(|e| matches!(e, MetricUpdate::Transition(s) if statuses.contains(s)))
}

/// The attempts that record one of `resolutions` (`idempotency_resolutions_total`).
pub fn attempts_resolving(resolutions: &[Resolution]) -> (Vec<AttemptKind>, Vec<ResolvedAs>) {
    attempts_counted(|e| matches!(e, MetricUpdate::Resolution(r) if resolutions.contains(r)))
}

/// The statuses some attempt enters: the series the transitions metric can have.
pub fn enterable() -> Vec<Status> {
    Status::ALL
        .iter()
        .copied()
        .filter(|s| !attempts_entering(&[*s]).0.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptKind::*;

    #[test]
    fn each_status_is_entered_by_its_settles_and_resolutions() {
        let done = attempts_entering(&[Status::Done]);
        assert_eq!(done.0, [Completed, ReconciledFound, Resolved]);
        assert!(
            done.1.iter().all(|r| r.resolution == Resolution::Done) && done.1.len() == 5,
            "{:?}",
            done.1
        );
        assert_eq!(attempts_entering(&[Status::Failed]).0, [Failed, Resolved]);
        let (kinds, resolved) = attempts_entering(&[Status::Unknown]);
        assert_eq!(kinds, [MarkedUnknown, Escalated, Resolved]);
        // A release enters UNKNOWN from anything but UNKNOWN.
        assert!(resolved.iter().all(|r| r.resolution == Resolution::Release));
        assert!(resolved.contains(&ResolvedAs {
            resolution: Resolution::Release,
            previous_status: Some(Status::InProgress),
        }));
        assert!(
            !resolved
                .iter()
                .any(|r| r.previous_status == Some(Status::Unknown))
        );
    }

    #[test]
    fn a_resolution_is_recorded_by_resolved_attempts_of_it_whatever_came_before() {
        let (kinds, resolved) = attempts_resolving(&[Resolution::Release]);
        assert_eq!(kinds, [Resolved]);
        assert_eq!(resolved.len(), 1 + Status::ALL.len());
        assert!(resolved.iter().all(|r| r.resolution == Resolution::Release));
    }

    #[test]
    fn no_attempt_enters_in_progress() {
        assert_eq!(attempts_entering(&[Status::InProgress]), (vec![], vec![]));
        assert_eq!(enterable(), [Status::Done, Status::Failed, Status::Unknown]);
    }
}
