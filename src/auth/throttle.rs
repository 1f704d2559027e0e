//! Bounds on password checking (docs/AUTH.md, "Security"): argon2 costs ~19 MiB and
//! tens of milliseconds of CPU per check, so a flood of logins must neither exhaust
//! memory nor guess passwords quickly.
//!
//! - At most [`hashing_permits`] checks run at once, on threads of their own
//!   ([`PasswordChecks`]); a login that finds them all busy is refused at once
//!   ([`LoginRefusal::Busy`]) without hashing.
//! - Failures are counted per (client address, user name) and per user name. From the
//!   `threshold`-th failure (forgotten [`WINDOW_SECONDS`] after the last), that pair
//!   (or that name, from anywhere) is refused for 30 s, doubling with each further
//!   failure up to 15 minutes. A refused attempt does not hash and does not count as a
//!   failure.
//! - Nothing is counted per address alone: behind a reverse proxy every sign-in has
//!   the proxy's address, so a lock on an address locked out every user (issue 47:
//!   ~20 bad logins from anyone did). The rightful user's correct password is accepted
//!   unless their own name is locked; guesses at one name from one address pause
//!   after a few, and guesses at one name from everywhere after more. Guessing one
//!   password against many names is bounded by the per-name counts of each name.
//!
//! Why not `governor`: it limits the rate of *all* calls with a fixed quota, while
//! this counts *failures* only (a person who signs in correctly is never slowed) and
//! backs off exponentially; and its keyed maps are not capped. The maps here are: at
//! most [`MAX_TRACKED`] names and addresses each; stale entries (no failure for
//! [`WINDOW_SECONDS`]) go first, then the one whose last failure is oldest.

use super::password_checks::{CheckSlot, PasswordChecks};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};

/// Failures are forgotten this long after the last one (and its refusal) ended.
pub(crate) const WINDOW_SECONDS: i64 = 15 * 60;
/// The first refusal lasts this long, doubling with every further failure.
pub(crate) const FIRST_BACKOFF_SECONDS: i64 = 30;
/// The longest refusal.
pub(crate) const MAX_BACKOFF_SECONDS: i64 = 15 * 60;
/// Names (and addresses) tracked at most; each entry is well under 200 bytes.
pub(crate) const MAX_TRACKED: usize = 10_000;
/// Longest user name kept as a key (longer ones are cut: no user has such a name).
const MAX_NAME_BYTES: usize = 64;

/// Concurrent password checks: half the machine's cores (the rest serve the guard and
/// the pages), at least 2 and at most 3, so argon2 holds at most 3 × 19 MiB.
pub(crate) fn hashing_permits() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().div_ceil(2).clamp(2, 3))
}

/// Why a login was not checked (or failed), as the `reason` label of
/// `idemwatch_login_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginRefusal {
    /// Every password check slot is busy.
    Busy,
    /// Too many recent failures for this user name; retry after this many seconds.
    ThrottledUser(i64),
    /// Too many recent failures for this user name from this client address.
    ThrottledAddress(i64),
    /// The password was checked and is wrong (or the user does not exist).
    BadCredentials,
}

impl LoginRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            LoginRefusal::Busy => "busy",
            LoginRefusal::ThrottledUser(_) => "throttled_user",
            LoginRefusal::ThrottledAddress(_) => "throttled_address",
            LoginRefusal::BadCredentials => "bad_credentials",
        }
    }

    /// Seconds for `Retry-After`, for the refusals that are about time.
    pub fn retry_after(self) -> Option<i64> {
        match self {
            LoginRefusal::Busy => Some(1),
            LoginRefusal::ThrottledUser(s) | LoginRefusal::ThrottledAddress(s) => Some(s.max(1)),
            LoginRefusal::BadCredentials => None,
        }
    }
}

/// How many failures before refusing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Failures for one name from one address: a guesser is paused quickly, and the
    /// same person at another address is not.
    pub per_address_and_user: u32,
    /// Failures for one name from every address together: bounds guessing spread over
    /// many addresses. Higher, because reaching it locks the name for everyone.
    pub per_user: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            per_address_and_user: 5,
            per_user: 20,
        }
    }
}

/// The login limiter of one process (shared by all requests).
#[derive(Debug)]
pub struct LoginLimiter {
    checks: PasswordChecks,
    thresholds: Thresholds,
    users: Mutex<Failures<String>>,
    /// Keyed by ([`address_key`], [`user_key`]); no address gives the unspecified one.
    pairs: Mutex<Failures<(IpAddr, String)>>,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        Self::new(hashing_permits(), Thresholds::default())
    }
}

impl LoginLimiter {
    pub fn new(permits: usize, thresholds: Thresholds) -> Self {
        Self {
            checks: PasswordChecks::new(permits),
            thresholds,
            users: Mutex::new(Failures::new(MAX_TRACKED)),
            pairs: Mutex::new(Failures::new(MAX_TRACKED)),
        }
    }

    /// May `user` from `address` have a password checked now? The slot is for
    /// [`check`](Self::check).
    pub fn admit(
        &self,
        user: &str,
        address: Option<IpAddr>,
        now: i64,
    ) -> Result<CheckSlot, LoginRefusal> {
        if let Some(wait) = lock(&self.users).refused_for(&user_key(user), now) {
            return Err(LoginRefusal::ThrottledUser(wait));
        }
        if let Some(wait) = lock(&self.pairs).refused_for(&pair_key(address, user), now) {
            return Err(LoginRefusal::ThrottledAddress(wait));
        }
        self.checks.try_slot().ok_or(LoginRefusal::Busy)
    }

    /// Runs the password check `check` in `slot`, off the async workers. `None` if
    /// it panicked.
    pub async fn check<T: Send + 'static>(
        &self,
        slot: CheckSlot,
        check: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        self.checks.run(slot, check).await
    }

    /// The outcome of a password check that [`admit`](Self::admit) let through.
    pub fn record(&self, user: &str, address: Option<IpAddr>, now: i64, signed_in: bool) {
        let pair = pair_key(address, user);
        if signed_in {
            // Only this name's counts: no other name's failures are cleared by it.
            lock(&self.users).forget(&user_key(user));
            lock(&self.pairs).forget(&pair);
            return;
        }
        lock(&self.users).fail(user_key(user), now, self.thresholds.per_user);
        lock(&self.pairs).fail(pair, now, self.thresholds.per_address_and_user);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn user_key(user: &str) -> String {
    let mut end = user.len().min(MAX_NAME_BYTES);
    while !user.is_char_boundary(end) {
        end -= 1;
    }
    user[..end].to_string()
}

fn pair_key(address: Option<IpAddr>, user: &str) -> (IpAddr, String) {
    let address = address.map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), address_key);
    (address, user_key(user))
}

/// IPv6 clients usually own a whole /64: count the /64, not each address in it.
fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(s.into())
            }
        },
    }
}

#[derive(Debug, Clone, Copy)]
struct Tally {
    failures: u32,
    last_failure: i64,
    /// Never before `last_failure`.
    refused_until: i64,
}

impl Tally {
    /// No failure, and no refusal, for a whole window: start counting afresh. Counted
    /// from the end of the refusal, so that the longest refusal is followed by another.
    fn is_stale(&self, now: i64) -> bool {
        now - self.refused_until >= WINDOW_SECONDS
    }
}

/// Recent failures per key, at most `cap` keys.
#[derive(Debug)]
struct Failures<K> {
    entries: HashMap<K, Tally>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone> Failures<K> {
    fn new(cap: usize) -> Self {
        Self {
            entries: HashMap::new(),
            cap,
        }
    }

    /// Seconds left of the refusal of `key`, if it is refused now.
    fn refused_for(&self, key: &K, now: i64) -> Option<i64> {
        let e = self.entries.get(key)?;
        (e.refused_until > now).then(|| e.refused_until - now)
    }

    fn fail(&mut self, key: K, now: i64, threshold: u32) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            self.make_room(now);
        }
        let e = self.entries.entry(key).or_insert(Tally {
            failures: 0,
            last_failure: now,
            refused_until: now,
        });
        if e.is_stale(now) {
            e.failures = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.last_failure = now;
        if e.failures >= threshold {
            let doublings = (e.failures - threshold).min(16);
            let backoff = (FIRST_BACKOFF_SECONDS << doublings).min(MAX_BACKOFF_SECONDS);
            e.refused_until = now + backoff;
        }
    }

    fn forget(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Drops stale entries; if none is stale, the one whose last failure is oldest.
    fn make_room(&mut self, now: i64) {
        self.entries.retain(|_, e| !e.is_stale(now));
        if self.entries.len() >= self.cap {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_failure)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)));
    const AWAY: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));

    fn limiter() -> LoginLimiter {
        LoginLimiter::new(
            2,
            Thresholds {
                per_address_and_user: 3,
                per_user: 5,
            },
        )
    }

    fn fail(l: &LoginLimiter, user: &str, from: Option<IpAddr>, now: i64) {
        drop(l.admit(user, from, now).unwrap());
        l.record(user, from, now, false);
    }

    #[test]
    fn one_address_guessing_one_name_is_paused_and_the_name_elsewhere_only_later() {
        let l = limiter();
        fail(&l, "sam", HOME, 0);
        fail(&l, "sam", HOME, 1);
        fail(&l, "sam", HOME, 2);
        assert_eq!(
            l.admit("sam", HOME, 2).unwrap_err(),
            LoginRefusal::ThrottledAddress(30)
        );
        assert!(l.admit("sam", AWAY, 2).is_ok(), "the same name elsewhere");
        assert!(l.admit("ada", HOME, 2).is_ok(), "another name here");
        fail(&l, "sam", AWAY, 3);
        fail(&l, "sam", AWAY, 4);
        assert_eq!(
            l.admit("sam", AWAY, 4).unwrap_err(),
            LoginRefusal::ThrottledUser(30),
            "5 failures for the name from anywhere"
        );
        assert_eq!(
            l.admit("sam", HOME, 31).unwrap_err(),
            LoginRefusal::ThrottledUser(3),
            "the name's pause is checked first"
        );
        assert!(l.admit("sam", AWAY, 34).is_ok(), "both pauses over");
        fail(&l, "sam", AWAY, 34);
        assert_eq!(
            l.admit("sam", AWAY, 34).unwrap_err(),
            LoginRefusal::ThrottledUser(60),
            "doubled"
        );
    }

    #[test]
    fn the_backoff_stops_growing_at_fifteen_minutes_and_is_forgotten_after_the_window() {
        let l = limiter();
        // Every attempt as soon as the last pause ends.
        let mut now = 0;
        let mut failures = 0;
        while failures < 20 {
            match l.admit("sam", None, now) {
                Ok(_) => {
                    l.record("sam", None, now, false);
                    failures += 1;
                }
                Err(LoginRefusal::ThrottledUser(wait) | LoginRefusal::ThrottledAddress(wait)) => {
                    now += wait
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(
            l.admit("sam", None, now).unwrap_err(),
            LoginRefusal::ThrottledUser(MAX_BACKOFF_SECONDS)
        );
        let later = now + MAX_BACKOFF_SECONDS + WINDOW_SECONDS;
        fail(&l, "sam", None, later);
        assert!(
            l.admit("sam", None, later).is_ok(),
            "one failure after the window"
        );
    }

    #[test]
    fn failures_from_a_shared_address_lock_out_no_other_name() {
        // Behind a reverse proxy every sign-in comes from its address.
        let l = limiter();
        for i in 0..100 {
            fail(&l, &format!("guess{i}"), HOME, 0);
        }
        fail(&l, "vic", HOME, 0);
        fail(&l, "vic", HOME, 0);
        assert!(
            l.admit("vic", HOME, 0).is_ok(),
            "vic's own 2 failures: below 3"
        );
        assert!(l.admit("ada", HOME, 0).is_ok());
        // Signing in clears that name's counts, here and everywhere.
        l.record("vic", HOME, 0, true);
        fail(&l, "vic", HOME, 0);
        fail(&l, "vic", HOME, 0);
        assert!(l.admit("vic", HOME, 0).is_ok());
    }

    #[test]
    fn busy_hashing_slots_refuse_at_once() {
        let l = limiter();
        let a = l.admit("a", None, 0).unwrap();
        let _b = l.admit("b", None, 0).unwrap();
        assert_eq!(l.admit("c", None, 0).unwrap_err(), LoginRefusal::Busy);
        drop(a);
        assert!(l.admit("c", None, 0).is_ok());
    }

    #[test]
    fn the_tracked_names_are_capped() {
        let mut f: Failures<String> = Failures::new(3);
        for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
            f.fail(name.to_string(), i as i64, 1);
        }
        assert_eq!(f.entries.len(), 3);
        assert!(
            f.refused_for(&"a".to_string(), 3).is_none(),
            "the oldest went"
        );
        assert!(f.refused_for(&"d".to_string(), 3).is_some());
        f.fail("e".to_string(), 10 * WINDOW_SECONDS, 1);
        assert_eq!(f.entries.len(), 1, "stale entries go first");
    }

    #[test]
    fn every_refusal_has_an_exported_reason() {
        for r in [
            LoginRefusal::Busy,
            LoginRefusal::ThrottledUser(1),
            LoginRefusal::ThrottledAddress(1),
            LoginRefusal::BadCredentials,
        ] {
            assert!(
                crate::metrics::LOGIN_REFUSALS.contains(&r.reason()),
                "{r:?}"
            );
        }
    }

    #[test]
    fn ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(address_key(mapped), HOME.unwrap());
        assert_eq!(user_key(&"é".repeat(40)).len(), 64);
    }
}
