//! The two deadlines of a key, each defined once, which every guard decision, page,
//! count and gauge reads: its lease (held, expired, released) and the instant after
//! which a resend with the same key is no longer safe. SQL states the same two
//! conditions once each, in the store's SQL (`store/sql.rs`).

use super::status::Status;
use crate::base::clock::truncate;
use chrono::{DateTime, TimeDelta, Utc};

/// How much earlier than the provider's own deadline the guard stops resending.
pub const RETENTION_MARGIN: TimeDelta = TimeDelta::minutes(1);

/// The instant after which a resend with the same key is no longer safe, computed once
/// at the claim and stored with the record (`resend_safe_until`). The deadline is the
/// provider's, measured on our clock, so a margin keeps clock skew and the provider's
/// own rounding from turning a resend into a second effect: a minute, or a tenth of
/// the retention when that is shorter (providers that forget keys after minutes).
/// docs/GUARD.md gives the same formula in SQL for guards in other languages.
pub fn resend_safe_until(
    created_at: DateTime<Utc>,
    provider_retention_until: DateTime<Utc>,
) -> DateTime<Utc> {
    let margin = RETENTION_MARGIN.min((provider_retention_until - created_at) / 10);
    truncate(provider_retention_until - margin)
}

/// Whether a resend with the same key is still safe at `now`. Its negation is what
/// every page, count and gauge calls "past retention".
pub fn resend_safe(resend_safe_until: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now < resend_safe_until
}

/// Where a key's lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// IN_PROGRESS, and a worker holds the lease: retries are told to wait.
    Held,
    /// IN_PROGRESS with a lease that ran out: the worker died or hung mid-call.
    Expired,
    /// Not IN_PROGRESS: no worker holds the key.
    Released,
}

impl LeaseState {
    pub fn of(status: Status, lease_until: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        match status {
            Status::InProgress if lease_until <= now => LeaseState::Expired,
            Status::InProgress => LeaseState::Held,
            _ => LeaseState::Released,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn resending_stops_a_minute_or_a_tenth_of_the_retention_before_the_providers_deadline() {
        let created = at("2026-11-29T14:02:11.402Z");
        let day = created + TimeDelta::hours(24);
        assert_eq!(resend_safe_until(created, day), day - TimeDelta::minutes(1));
        // A provider that remembers keys for 5 minutes: the margin is 30 s.
        let five = created + TimeDelta::minutes(5);
        assert_eq!(
            resend_safe_until(created, five),
            five - TimeDelta::seconds(30)
        );
        // Kept to the microsecond, like every stored time.
        let odd = created + TimeDelta::microseconds(7);
        assert_eq!(
            resend_safe_until(created, odd),
            created + TimeDelta::microseconds(6)
        );
    }

    #[test]
    fn a_resend_is_safe_only_before_the_instant() {
        let until = at("2026-11-30T14:01:11.402Z");
        assert!(resend_safe(until, until - TimeDelta::microseconds(1)));
        assert!(!resend_safe(until, until));
    }

    #[test]
    fn a_lease_is_held_until_its_instant_and_only_in_progress_keys_hold_one() {
        let until = at("2026-11-29T14:02:41.402Z");
        let before = until - TimeDelta::seconds(1);
        assert_eq!(
            LeaseState::of(Status::InProgress, until, before),
            LeaseState::Held
        );
        assert_eq!(
            LeaseState::of(Status::InProgress, until, until),
            LeaseState::Expired
        );
        for s in [Status::Unknown, Status::Done, Status::Failed] {
            assert_eq!(LeaseState::of(s, until, before), LeaseState::Released);
        }
    }
}
