//! The provider's response times, and the incident schedule that degrades them.
//!
//! Times here are "story time": what the demo pretends, with a 10 s client deadline
//! as in the incident of background/002. The demo runs story time `speed` times
//! faster than the wall clock.

use rand::RngExt;
use std::time::Duration;

/// The client's deadline for a tool call (the agent's HTTP timeout), story time.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(10);
/// The guard's own deadline for a provider call (`Operation::call_timeout`).
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(30);
/// Added to the provider timeout to make the lease (`GuardSettings::lease_margin`).
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);
/// How long the provider remembers a key, story time. Real providers keep keys for
/// 24 hours or more; the demo compresses that much further than the rest, or nobody
/// would see a key outlive it: 5 minutes, so that the opening's forgotten key reaches a
/// person within the first real minute at the default 10x (issue 15).
pub const PROVIDER_RETENTION: Duration = Duration::from_secs(300);

/// A log-normal latency: `median * e^(sigma * Z)`, Z standard normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyModel {
    pub median: Duration,
    pub sigma: f64,
}

/// z of the 99th percentile of a standard normal.
const Z99: f64 = 2.326_348;

impl LatencyModel {
    /// A healthy provider: median 0.9 s, p99 6.4 s; about 0.2% of calls take longer
    /// than the 10 s deadline. Those, and the demo's redeliveries and re-issued calls,
    /// make the ~0.4% replay ratio of a normal day.
    pub const NORMAL: LatencyModel = LatencyModel {
        median: Duration::from_millis(900),
        sigma: 0.84,
    };

    /// The incident: a database migration at the provider. Median 10 s, p99 23 s:
    /// half the calls cross the 10 s deadline, about one in a thousand the guard's own
    /// 30 s timeout. With the agents' retry policy this takes the replay ratio to ~22%.
    pub(crate) const INCIDENT: LatencyModel = LatencyModel {
        median: Duration::from_secs(10),
        sigma: 0.35,
    };

    pub fn p99(&self) -> Duration {
        self.median.mul_f64((self.sigma * Z99).exp())
    }

    /// The share of calls slower than `deadline` (what the tests hold the model to).
    #[cfg(test)]
    fn share_slower_than(&self, deadline: Duration) -> f64 {
        let z = (deadline.as_secs_f64() / self.median.as_secs_f64()).ln() / self.sigma;
        0.5 * erfc(z / std::f64::consts::SQRT_2)
    }

    pub fn sample(&self) -> Duration {
        let mut rng = rand::rng();
        // Box-Muller; 1 - u keeps the logarithm finite.
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.median.mul_f64((self.sigma * z).exp().min(1e4))
    }
}

/// Complementary error function (Numerical Recipes' erfcc, |error| < 1.2e-7).
#[cfg(test)]
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// When the provider is degraded, in real time since the demo started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentSchedule {
    /// An incident from the first second (`--incident`).
    pub start_now: bool,
    /// When the first scheduled incident begins.
    pub first_at: Duration,
    /// Scheduled incidents repeat this often (`--incident-every`); `None`: no schedule.
    pub every: Option<Duration>,
    /// How long each incident lasts (`--incident-length`).
    pub length: Duration,
}

impl IncidentSchedule {
    pub const OFF: IncidentSchedule = IncidentSchedule {
        start_now: false,
        first_at: Duration::ZERO,
        every: None,
        length: Duration::ZERO,
    };

    pub(crate) fn active_at(&self, elapsed: Duration) -> bool {
        if self.start_now && elapsed < self.length {
            return true;
        }
        match self.every {
            Some(every) if !every.is_zero() && elapsed >= self.first_at => {
                let into = (elapsed - self.first_at).as_nanos() % every.as_nanos();
                into < self.length.as_nanos()
            }
            _ => false,
        }
    }

    /// When the provider's state next changes, if ever: (new state, time until then).
    /// Exact to the 100 ms the demo checks the schedule at.
    pub(crate) fn next_change(&self, elapsed: Duration) -> Option<(bool, Duration)> {
        let now = self.active_at(elapsed);
        let step = Duration::from_millis(100);
        let horizon = self.every.unwrap_or(Duration::ZERO).max(self.length) + self.first_at;
        let mut t = elapsed;
        while t <= elapsed + horizon + step {
            t += step;
            if self.active_at(t) != now {
                return Some((!now, t - elapsed));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_normal_day_rarely_crosses_the_deadline_and_an_incident_often_does() {
        let normal = LatencyModel::NORMAL.share_slower_than(CLIENT_DEADLINE);
        assert!((0.001..0.003).contains(&normal), "{normal}");
        let incident = LatencyModel::INCIDENT.share_slower_than(CLIENT_DEADLINE);
        assert!((0.4..0.6).contains(&incident), "{incident}");
        assert!(LatencyModel::NORMAL.p99() < CLIENT_DEADLINE);
        assert!(LatencyModel::INCIDENT.p99() > CLIENT_DEADLINE);
        let past_guard = LatencyModel::INCIDENT.share_slower_than(PROVIDER_TIMEOUT);
        assert!((0.0002..0.01).contains(&past_guard), "{past_guard}");
    }

    #[test]
    fn samples_follow_the_model() {
        let m = LatencyModel::INCIDENT;
        let n = 20_000;
        let slow = (0..n).filter(|_| m.sample() > CLIENT_DEADLINE).count();
        let share = slow as f64 / n as f64;
        let expected = m.share_slower_than(CLIENT_DEADLINE);
        assert!((share - expected).abs() < 0.02, "{share} vs {expected}");
    }

    #[test]
    fn the_schedule_repeats_incidents_of_the_given_length() {
        let s = IncidentSchedule {
            start_now: false,
            first_at: S(120),
            every: Some(S(900)),
            length: S(300),
        };
        assert!(!s.active_at(S(119)));
        assert!(s.active_at(S(120)));
        assert!(s.active_at(S(419)));
        assert!(!s.active_at(S(420)));
        assert!(s.active_at(S(1020)));
        assert_eq!(s.next_change(S(0)), Some((true, S(120))));
        assert_eq!(s.next_change(S(120)), Some((false, S(300))));
    }

    #[test]
    fn incident_now_without_a_schedule_happens_once() {
        let s = IncidentSchedule {
            start_now: true,
            first_at: S(0),
            every: None,
            length: S(60),
        };
        assert!(s.active_at(S(0)));
        assert!(!s.active_at(S(60)));
        assert!(!s.active_at(S(6000)));
        assert_eq!(s.next_change(S(61)), None);
        assert!(!IncidentSchedule::OFF.active_at(S(0)));
    }
}
