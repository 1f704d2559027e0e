//! What the demo counts: in memory, what callers got back from the guard; from the
//! attempt log, the admissions exactly as `idempotency_requests_total{outcome}` counts
//! them; from the provider, the effects.

use crate::guard::{AdmissionOutcome, AttemptKind, GuardError, Outcome};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What one `Guard::run` returned, as the caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallResult {
    Completed,
    Replayed,
    InFlight,
    PayloadMismatch,
    Failed,
    Unknown,
    NeedsHumanReview,
    LeaseLost,
    Error,
}

impl CallResult {
    pub const ALL: [CallResult; 9] = [
        CallResult::Completed,
        CallResult::Replayed,
        CallResult::InFlight,
        CallResult::PayloadMismatch,
        CallResult::Failed,
        CallResult::Unknown,
        CallResult::NeedsHumanReview,
        CallResult::LeaseLost,
        CallResult::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallResult::Completed => "completed",
            CallResult::Replayed => "replayed",
            CallResult::InFlight => "in_flight",
            CallResult::PayloadMismatch => "payload_mismatch",
            CallResult::Failed => "failed",
            CallResult::Unknown => "unknown",
            CallResult::NeedsHumanReview => "needs_human_review",
            CallResult::LeaseLost => "lease_lost",
            CallResult::Error => "error",
        }
    }

    pub fn of(result: &Result<Outcome, GuardError>) -> CallResult {
        match result {
            Ok(o) if o.replayed => CallResult::Replayed,
            Ok(_) => CallResult::Completed,
            Err(GuardError::InFlight { .. }) => CallResult::InFlight,
            Err(GuardError::PayloadMismatch { .. }) => CallResult::PayloadMismatch,
            Err(GuardError::OperationFailed { .. }) => CallResult::Failed,
            Err(GuardError::OutcomeUnknown { .. }) => CallResult::Unknown,
            Err(GuardError::NeedsHumanReview { .. }) => CallResult::NeedsHumanReview,
            Err(GuardError::LeaseLost { .. }) => CallResult::LeaseLost,
            Err(_) => CallResult::Error,
        }
    }
}

/// Counters updated by the traffic generator.
#[derive(Debug, Default)]
pub struct Counters {
    pub intents: AtomicU64,
    pub guard_calls: AtomicU64,
    /// Admissions sent through the HTTP guard API (part of `guard_calls`).
    pub http_calls: AtomicU64,
    pub client_timeouts: AtomicU64,
    pub worker_crashes: AtomicU64,
    results: [AtomicU64; CallResult::ALL.len()],
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record(&self, result: CallResult) {
        Self::bump(&self.results[result as usize]);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn results(&self) -> BTreeMap<&'static str, u64> {
        CallResult::ALL
            .iter()
            .map(|r| (r.as_str(), Self::get(&self.results[*r as usize])))
            .collect()
    }
}

/// Admissions by outcome and the replay ratio, from attempt-row counts by kind. The
/// ratio is the one the recording rules compute: (replay + replay_failure) / all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Admissions {
    pub requests: i64,
    pub replays: i64,
    pub by_outcome: BTreeMap<&'static str, i64>,
}

impl Admissions {
    pub(crate) fn from_kinds(kinds: &[(AttemptKind, i64)]) -> Self {
        let mut by_outcome: BTreeMap<&'static str, i64> = AdmissionOutcome::ALL
            .iter()
            .map(|o| (o.as_str(), 0))
            .collect();
        let mut replays = 0;
        for (kind, n) in kinds {
            if let Some(outcome) = kind.admission_outcome() {
                *by_outcome.entry(outcome.as_str()).or_default() += n;
                if outcome.is_replay() {
                    replays += n;
                }
            }
        }
        let requests = by_outcome.values().sum();
        Self {
            requests,
            replays,
            by_outcome,
        }
    }

    pub fn replay_ratio(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.replays as f64 / self.requests as f64)
    }
}

/// `GET /demo/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct DemoStats {
    /// Real effects the provider performed in this run.
    pub effects: u64,
    /// Effects beyond one per intent (per idempotency key). Must be 0.
    pub duplicates: u64,
    /// Admissions to the guard in this run (attempt log).
    pub requests: i64,
    /// Admissions answered from a stored result (`replay` + `replay_failure`).
    pub replays: i64,
    pub replay_ratio: Option<f64>,
    /// The same ratio over the last minute: watch it climb during an incident.
    pub replay_ratio_1m: Option<f64>,
    /// Admissions by outcome, as `idempotency_requests_total{outcome}` counts them.
    pub by_outcome: BTreeMap<&'static str, i64>,
    /// Attempt rows by kind in this run.
    pub attempts: BTreeMap<&'static str, i64>,
    /// What callers got back from `Guard::run`.
    pub results: BTreeMap<&'static str, u64>,
    pub unknown_backlog: i64,
    /// Tool calls the traffic generator started (each one intent).
    pub intents: u64,
    /// Admissions the demo's HTTP workers sent to `POST /api/v1/guard/admit`.
    pub http_guard_calls: u64,
    pub client_timeouts: u64,
    pub worker_crashes: u64,
    /// Whether the provider is in its incident (p99 above the client deadline).
    pub incident: bool,
    pub uptime_seconds: f64,
}

/// The console's one live line.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusLine {
    pub elapsed: Duration,
    pub requests: u64,
    pub replay_ratio_1m: Option<f64>,
    pub unknown_backlog: i64,
    pub effects: u64,
    pub duplicates: u64,
    pub incident: bool,
    /// When the provider's state next changes, if it will.
    pub next_change: Option<Duration>,
}

impl fmt::Display for StatusLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ratio = match self.replay_ratio_1m {
            Some(r) => format!("{:.1}%", r * 100.0),
            None => "-".to_string(),
        };
        write!(
            f,
            "[{}] requests {} | replay ratio (1m) {} | UNKNOWN backlog {} | effects {} | duplicates {}",
            clock(self.elapsed),
            self.requests,
            ratio,
            self.unknown_backlog,
            self.effects,
            self.duplicates
        )?;
        match (self.incident, self.next_change) {
            (true, Some(d)) => write!(
                f,
                " | INCIDENT: provider p99 over the deadline, {} left",
                clock(d)
            ),
            (true, None) => write!(f, " | INCIDENT: provider p99 over the deadline"),
            (false, Some(d)) => write!(f, " | provider normal, incident in {}", clock(d)),
            (false, None) => write!(f, " | provider normal"),
        }
    }
}

/// `m:ss`, or `h:mm:ss` past an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_ratio_counts_replays_of_successes_and_failures_over_all_admissions() {
        let a = Admissions::from_kinds(&[
            (AttemptKind::Claimed, 990),
            (AttemptKind::Completed, 985),
            (AttemptKind::Replayed, 3),
            (AttemptKind::ReplayedFailure, 1),
            (AttemptKind::TakenOver, 4),
            (AttemptKind::InFlightRejected, 2),
        ]);
        assert_eq!((a.requests, a.replays), (1000, 4));
        assert_eq!(a.replay_ratio(), Some(0.004));
        assert_eq!(
            a.by_outcome["conflict"], 0,
            "every outcome is listed, 0 included"
        );
        assert_eq!(Admissions::from_kinds(&[]).replay_ratio(), None);
    }

    #[test]
    fn the_status_line_says_what_an_operator_looks_for() {
        let line = StatusLine {
            elapsed: Duration::from_secs(75),
            requests: 812,
            replay_ratio_1m: Some(0.2234),
            unknown_backlog: 3,
            effects: 790,
            duplicates: 0,
            incident: true,
            next_change: Some(Duration::from_secs(200)),
        };
        assert_eq!(
            line.to_string(),
            "[1:15] requests 812 | replay ratio (1m) 22.3% | UNKNOWN backlog 3 | effects 790 | duplicates 0 | INCIDENT: provider p99 over the deadline, 3:20 left"
        );
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
