//! Injectable time. The guard never calls `Utc::now()` directly, so tests can move
//! the clock past a lease or a provider's key retention.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use std::sync::{Arc, Mutex};

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// Microsecond precision: what PostgreSQL's timestamptz stores, so a time written and
/// read back is the same value (the attempt hash chain depends on it).
pub(crate) fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(t)
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        truncate(Utc::now())
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(truncate(start))))
    }
    pub fn advance(&self, by: TimeDelta) {
        let mut t = self.0.lock().expect("clock poisoned");
        *t += by;
    }
    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().expect("clock poisoned") = truncate(to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let start = DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402Z")
            .unwrap()
            .to_utc();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(TimeDelta::seconds(10));
        assert_eq!(clock.now(), start + TimeDelta::seconds(10));
    }

    #[test]
    fn times_are_kept_to_the_microsecond() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T14:02:11.123456789Z")
            .unwrap()
            .to_utc();
        assert_eq!(truncate(t).to_rfc3339(), "2026-11-29T14:02:11.123456+00:00");
    }
}
