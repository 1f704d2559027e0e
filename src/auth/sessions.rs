//! Server-side sign-in sessions (docs/AUTH.md, "Sessions"). The cookie holds 32 random
//! bytes; the database holds their SHA-256 and the session's user, times and CSRF
//! binding (`store::SessionRow`). So a session ends for every replica at once when
//! its row goes: at sign-out, when its user leaves the auth file or changes password
//! (checked on each use, `Authenticator::session_principal`), after
//! `--session-idle-timeout` without a request, and `--session-lifetime` after
//! sign-in whatever the activity. Signing in always makes a new id (no fixation).
//!
//! Why not `tower-sessions`: it keeps a serialised map per session behind its own
//! store trait (one crate per backend, each with its own schema and migrations), and
//! has no notion of "end every session of this user" or of a password change. What is
//! needed here is one small table on the two backends we already run, read once per
//! request; that is less code than the adapter would be.

use super::secrets;
use crate::guard::{Clock, SystemClock};
use crate::store::{SessionRow, Store, StoreError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::TimeDelta;
use std::sync::Arc;

/// How long sessions last (`serve --session-idle-timeout`, `--session-lifetime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSettings {
    /// A session not used for this long has ended.
    pub idle: TimeDelta,
    /// A session this old has ended, however busy.
    pub lifetime: TimeDelta,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            idle: TimeDelta::hours(1),
            lifetime: TimeDelta::hours(12),
        }
    }
}

/// A session's last use is written at most this often: one write per minute per
/// session, not one per request. The idle timeout is therefore exact to a minute.
pub(crate) const TOUCH_SECONDS: i64 = 60;

#[derive(Debug, Clone)]
pub struct Sessions {
    store: Store,
    clock: Arc<dyn Clock>,
    settings: SessionSettings,
}

/// What a cookie value must look like before the database is asked about it.
fn well_formed(cookie: &str) -> bool {
    cookie.len() == 43
        && cookie
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A new random cookie value (32 bytes, URL-safe base64: 43 characters).
pub fn random_cookie() -> String {
    URL_SAFE_NO_PAD.encode(secrets::random_bytes())
}

/// What the database stores of a session cookie.
pub fn id_hash(cookie: &str) -> String {
    crate::base::hash::sha256_hex(cookie.as_bytes())
}

impl Sessions {
    /// Sessions in `store` on the system clock. Sessions always use real time, not the
    /// pages' clock: tests move that one by days.
    pub fn new(store: Store, settings: SessionSettings) -> Self {
        Self {
            store,
            clock: Arc::new(SystemClock),
            settings,
        }
    }

    /// The same sessions on another clock (tests of the timeouts).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn settings(&self) -> SessionSettings {
        self.settings
    }

    /// Now, in Unix seconds, on the sessions' clock (CSRF tokens use it too).
    pub fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    /// Starts a session for `user`; returns the cookie value. `csrf_binding` is what
    /// the session's CSRF tokens are bound to. Ended sessions are swept first, so the
    /// table holds live sessions and recent leftovers only.
    pub async fn start(
        &self,
        user: &str,
        password_tag: &str,
        csrf_binding: &str,
    ) -> Result<String, StoreError> {
        let now = self.now();
        self.store
            .delete_ended_sessions(now, now - self.settings.idle.num_seconds())
            .await?;
        let cookie = random_cookie();
        self.store
            .insert_session(&SessionRow {
                id_sha256: id_hash(&cookie),
                user_name: user.to_string(),
                password_tag: password_tag.to_string(),
                csrf_sha256: csrf_binding.to_string(),
                created_at: now,
                last_seen_at: now,
                expires_at: now + self.settings.lifetime.num_seconds(),
            })
            .await?;
        Ok(cookie)
    }

    /// The live session a cookie names, its last use recorded. An ended one (idle
    /// too long, past its lifetime) is deleted and `None`.
    pub async fn find(&self, cookie: &str) -> Result<Option<SessionRow>, StoreError> {
        if !well_formed(cookie) {
            return Ok(None);
        }
        let id = id_hash(cookie);
        let Some(mut row) = self.store.session(&id).await? else {
            return Ok(None);
        };
        let now = self.now();
        let idle_for = now - row.last_seen_at;
        if now >= row.expires_at || idle_for >= self.settings.idle.num_seconds() {
            self.store.delete_session(&id).await?;
            tracing::info!(user = ?row.user_name, "session timed out");
            return Ok(None);
        }
        if idle_for >= TOUCH_SECONDS {
            // A read-only standby cannot record the use: the session still reads (it
            // then idles out on the primary's clock of uses), rather than every page 503.
            match self.store.touch_session(&id, now).await {
                Ok(()) => row.last_seen_at = now,
                Err(e) => tracing::warn!(error = %e, "cannot record a session's use"),
            }
        }
        Ok(Some(row))
    }

    /// Ends the session a cookie names; whether there was one.
    pub async fn end(&self, cookie: &str) -> Result<bool, StoreError> {
        if !well_formed(cookie) {
            return Ok(false);
        }
        self.store.delete_session(&id_hash(cookie)).await
    }

    /// Ends every session of `user` (a stolen cookie, a departure); how many.
    pub async fn end_user(&self, user: &str) -> Result<u64, StoreError> {
        self.store.delete_user_sessions(user).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_shaped_like_ours_reach_the_database() {
        let c = random_cookie();
        assert!(well_formed(&c), "{c}");
        assert!(!well_formed("short"));
        assert!(!well_formed(&format!("{}'", &c[..42])));
        assert_ne!(id_hash(&c), c);
        assert_ne!(random_cookie(), c);
    }
}
