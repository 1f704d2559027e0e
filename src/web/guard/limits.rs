//! What one caller of the guard may hold of the server (docs/AUTH.md, "What a worker
//! token can and cannot do"): a body of at most `max_body_bytes`, at most
//! `concurrency` requests in progress and `rate` requests a second per identity (a
//! token's name; `local` without an auth file). One token must not take the service
//! down: a request past either bound is answered 429 with `Retry-After` before its
//! body is read, so it costs neither memory nor a database write.

use crate::web::Error;
use crate::web::problem::Problem;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds, from `serve`'s flags (`--guard-max-body-bytes`,
/// `--guard-concurrency-per-token`, `--guard-rate-per-token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardLimits {
    /// The largest request body, in bytes: a larger one is 413 `too_large`.
    pub max_body_bytes: u32,
    /// Requests of one identity in progress at once.
    pub concurrency: u32,
    /// Requests of one identity a second, with a burst of as many.
    pub rate: u32,
}

impl Default for GuardLimits {
    /// A body of 256 KiB holds any tool's arguments or a provider's record many times
    /// over; 32 requests at once and 1,000 a second are far above what one worker pool
    /// sends through one token (a guarded call is two requests), and bound what a
    /// token can hold: 32 bodies, each read into memory at most a few times.
    fn default() -> Self {
        Self {
            max_body_bytes: 256 * 1024,
            concurrency: 32,
            rate: 1000,
        }
    }
}

/// The bounds and each identity's use of them. Identities are the auth file's tokens
/// and `local` (sessions and proxy users cannot call the guard), so the map stays as
/// small as the auth file.
#[derive(Debug)]
pub struct Limiter {
    limits: GuardLimits,
    callers: Mutex<HashMap<String, Arc<Bucket>>>,
}

#[derive(Debug)]
struct Bucket {
    in_progress: Arc<Semaphore>,
    tokens: Mutex<Tokens>,
}

/// A token bucket: `available` requests, refilled at the rate since `at`.
#[derive(Debug)]
struct Tokens {
    available: f64,
    at: Instant,
}

/// A request in progress: its slot is given back when this is dropped.
#[derive(Debug)]
pub struct Permit(#[expect(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

impl Default for Limiter {
    fn default() -> Self {
        Self::new(GuardLimits::default())
    }
}

impl Limiter {
    pub fn new(limits: GuardLimits) -> Self {
        Self {
            limits,
            callers: Mutex::default(),
        }
    }

    pub fn limits(&self) -> GuardLimits {
        self.limits
    }

    /// A slot for one request of `who`, or 429 naming the bound it is past.
    pub fn admit(&self, who: &str) -> Result<Permit, Error> {
        let bucket = {
            let mut callers = self.callers.lock().unwrap_or_else(|e| e.into_inner());
            callers
                .entry(who.to_string())
                .or_insert_with(|| {
                    Arc::new(Bucket {
                        in_progress: Arc::new(Semaphore::new(self.limits.concurrency as usize)),
                        tokens: Mutex::new(Tokens {
                            available: f64::from(self.limits.rate),
                            at: Instant::now(),
                        }),
                    })
                })
                .clone()
        };
        let permit = bucket
            .in_progress
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                too_many(
                    format!(
                        "{who} has {} guard requests in progress, the most one caller may have \
                     (--guard-concurrency-per-token); retry after the others finish",
                        self.limits.concurrency
                    ),
                    Duration::from_secs(1),
                )
            })?;
        bucket.take(self.limits.rate).map_err(|wait| {
            too_many(
                format!(
                    "{who} sent more than {} guard requests a second \
                     (--guard-rate-per-token); retry later",
                    self.limits.rate
                ),
                wait,
            )
        })?;
        Ok(Permit(permit))
    }
}

impl Bucket {
    /// One request's token, or how long until the next one.
    fn take(&self, rate: u32) -> Result<(), Duration> {
        let rate = f64::from(rate);
        let mut t = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        t.available = (t.available + now.duration_since(t.at).as_secs_f64() * rate).min(rate);
        t.at = now;
        if t.available >= 1.0 {
            t.available -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - t.available) / rate))
        }
    }
}

/// 429 `too_many_requests` with `Retry-After` in whole seconds (at least 1).
fn too_many(detail: String, wait: Duration) -> Error {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Error::refused(
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "Too many requests",
            detail,
        )
        .member("retry_after", seconds.max(1)),
    )
}

/// 413 `too_large` naming the limit.
pub fn too_large(limit: u32) -> Error {
    Error::refused(
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "Request body too large",
            format!(
                "a guard request body may hold at most {limit} bytes (--guard-max-body-bytes); \
                 nothing was read past it and nothing was written"
            ),
        )
        .member("limit_bytes", limit),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: Result<Permit, Error>) -> Option<(u16, Option<u64>)> {
        r.err().map(|e| {
            let p = e.problem();
            (p.status.as_u16(), p.retry_after())
        })
    }

    #[test]
    fn a_caller_past_its_concurrency_is_refused_until_a_request_ends() {
        let l = Limiter::new(GuardLimits {
            concurrency: 2,
            ..GuardLimits::default()
        });
        let a = l.admit("token:w").unwrap();
        let _b = l.admit("token:w").unwrap();
        assert_eq!(status(l.admit("token:w")), Some((429, Some(1))));
        assert!(l.admit("token:other").is_ok(), "each identity has its own");
        drop(a);
        assert!(l.admit("token:w").is_ok());
    }

    #[test]
    fn a_caller_past_its_rate_is_told_when_to_come_back() {
        let l = Limiter::new(GuardLimits {
            rate: 3,
            ..GuardLimits::default()
        });
        for _ in 0..3 {
            drop(l.admit("w").unwrap());
        }
        assert_eq!(status(l.admit("w")), Some((429, Some(1))));
    }
}
