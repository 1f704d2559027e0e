//! Refused requests, logged without flooding the log and counted (docs/AUTH.md,
//! "Refusals in the log"). A stream of bad bearer tokens once wrote 206,103 lines
//! (42 MB) in about 10 s: one line per refusal lets any client fill the disk and bury
//! everything else. Here each reason logs at most [`BURST`] lines per [`INTERVAL`];
//! the refusals left out are counted and reported in one line when the next interval
//! starts (with the next refusal of that reason), and every refusal is counted in
//! `idemwatch_auth_refusals_total{reason}` (the labels are [`AUTH_REFUSALS`]).

use crate::metrics::Metrics;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The `reason` label values of `idemwatch_auth_refusals_total`, all exported at 0.
pub(crate) const AUTH_REFUSALS: [&str; 7] = [
    // A bearer token that is not in the auth file (401).
    "bad_token",
    // A bearer token past its `expires` (401).
    "expired_token",
    // Proxy mode: the identity header came more than once (401).
    "duplicate_identity",
    // Signed in, but without the role or outside the token's limits (403).
    "forbidden",
    // A form or cookie-authenticated JSON request without a valid CSRF token (403).
    "csrf",
    // No auth file, and a `Host` this server does not answer to (421).
    "foreign_host",
    // A state-changing request a browser says came from another site (403).
    "cross_site",
];

/// Lines logged per reason per interval; more are counted and summed up.
pub const BURST: u32 = 5;
/// How long a reason's burst lasts.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// One per process, in `AppState`.
#[derive(Debug)]
pub struct AuthLog {
    metrics: Arc<Metrics>,
    windows: Mutex<HashMap<&'static str, Burst>>,
}

#[derive(Debug, Clone, Copy)]
struct Burst {
    start: Instant,
    logged: u32,
    left_out: u64,
}

impl AuthLog {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        for reason in AUTH_REFUSALS {
            metrics
                .families()
                .idemwatch_auth_refusals_total
                .with_label_values(&[reason]);
        }
        Self {
            metrics,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one refusal (`reason`: one of [`AUTH_REFUSALS`]) and logs it with `log`
    /// unless its burst is spent.
    pub fn refused(&self, reason: &'static str, log: impl FnOnce()) {
        debug_assert!(AUTH_REFUSALS.contains(&reason), "{reason}");
        self.metrics
            .families()
            .idemwatch_auth_refusals_total
            .with_label_values(&[reason])
            .inc();
        self.limited(reason, log);
    }

    /// Logs with `log` unless the burst of `reason` is spent, counting nothing in the
    /// metric (sign-in refusals have their own: `idemwatch_login_refusals_total`).
    pub fn limited(&self, reason: &'static str, log: impl FnOnce()) {
        if self.admit(reason, Instant::now()) {
            log();
        }
    }

    /// Whether a line for `reason` may be logged at `now`; when a new interval starts,
    /// first one line for the refusals the last one left out.
    fn admit(&self, reason: &'static str, now: Instant) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let w = windows.entry(reason).or_insert(Burst {
            start: now,
            logged: 0,
            left_out: 0,
        });
        if now.duration_since(w.start) >= INTERVAL {
            if w.left_out > 0 {
                tracing::warn!(
                    reason,
                    left_out = w.left_out,
                    seconds = now.duration_since(w.start).as_secs(),
                    "refusals not logged one by one (see idemwatch_auth_refusals_total)"
                );
            }
            *w = Burst {
                start: now,
                logged: 0,
                left_out: 0,
            };
        }
        if w.logged < BURST {
            w.logged += 1;
            true
        } else {
            w.left_out += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_logs_a_burst_per_interval_and_counts_everything() {
        let metrics = Arc::new(Metrics::default());
        let log = AuthLog::new(metrics.clone());
        let t0 = Instant::now();
        let admitted = (0..1000).filter(|_| log.admit("bad_token", t0)).count();
        assert_eq!(admitted, BURST as usize);
        assert!(log.admit("csrf", t0), "another reason has its own burst");
        assert!(!log.admit("bad_token", t0 + INTERVAL / 2));
        assert!(log.admit("bad_token", t0 + INTERVAL), "a new interval");
        let mut lines = 0;
        for _ in 0..100 {
            log.refused("expired_token", || lines += 1);
        }
        assert_eq!(lines, BURST);
        let text = metrics.render().unwrap();
        assert!(text.contains("idemwatch_auth_refusals_total{reason=\"expired_token\"} 100"));
        assert!(text.contains("idemwatch_auth_refusals_total{reason=\"cross_site\"} 0"));
    }
}
