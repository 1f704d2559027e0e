//! Sign-in sessions (migration 0006): one row per session, keyed by the SHA-256 of the
//! cookie's random id. The rules (idle timeout, lifetime, who may hold one) live in
//! `auth::sessions`; this file only reads and writes rows, with the same SQL text on
//! both backends.

use super::{Store, StoreError, on_pool};

const INSERT: &str = "INSERT INTO idemwatch_sessions \
    (id_sha256, user_name, password_tag, csrf_sha256, created_at, last_seen_at, expires_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7)";
const SELECT: &str = "SELECT id_sha256, user_name, password_tag, csrf_sha256, created_at, \
    last_seen_at, expires_at FROM idemwatch_sessions WHERE id_sha256 = $1";
/// Only ever moves `last_seen_at` forward (two replicas touching at once).
const TOUCH: &str = "UPDATE idemwatch_sessions SET last_seen_at = $2 \
    WHERE id_sha256 = $1 AND last_seen_at < $2";
const DELETE: &str = "DELETE FROM idemwatch_sessions WHERE id_sha256 = $1";
const DELETE_USER: &str = "DELETE FROM idemwatch_sessions WHERE user_name = $1";
/// Past their lifetime ($1 = now) or idle since before $2.
const DELETE_ENDED: &str =
    "DELETE FROM idemwatch_sessions WHERE expires_at <= $1 OR last_seen_at <= $2";

/// A stored session. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionRow {
    pub id_sha256: String,
    pub user_name: String,
    pub password_tag: String,
    pub csrf_sha256: String,
    pub created_at: i64,
    pub last_seen_at: i64,
    pub expires_at: i64,
}

impl Store {
    pub async fn insert_session(&self, row: &SessionRow) -> Result<(), StoreError> {
        on_pool!(self, pool => sqlx::query(INSERT)
            .bind(&row.id_sha256)
            .bind(&row.user_name)
            .bind(&row.password_tag)
            .bind(&row.csrf_sha256)
            .bind(row.created_at)
            .bind(row.last_seen_at)
            .bind(row.expires_at)
            .execute(pool)
            .await
            .map(|_| ()))?;
        Ok(())
    }

    pub async fn session(&self, id_sha256: &str) -> Result<Option<SessionRow>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as::<_, SessionRow>(SELECT)
            .bind(id_sha256)
            .fetch_optional(pool)
            .await)?,
        )
    }

    pub(crate) async fn touch_session(&self, id_sha256: &str, now: i64) -> Result<(), StoreError> {
        on_pool!(self, pool => sqlx::query(TOUCH)
            .bind(id_sha256)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ()))?;
        Ok(())
    }

    /// Ends one session; whether it existed.
    pub(crate) async fn delete_session(&self, id_sha256: &str) -> Result<bool, StoreError> {
        let done = on_pool!(self, pool => sqlx::query(DELETE)
            .bind(id_sha256)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(done > 0)
    }

    /// Ends every session of `user`; how many there were.
    pub(crate) async fn delete_user_sessions(&self, user: &str) -> Result<u64, StoreError> {
        let done = on_pool!(self, pool => sqlx::query(DELETE_USER)
            .bind(user)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(done)
    }

    /// Deletes sessions past `now` or idle since `idle_before`; how many.
    pub(crate) async fn delete_ended_sessions(
        &self,
        now: i64,
        idle_before: i64,
    ) -> Result<u64, StoreError> {
        let done = on_pool!(self, pool => sqlx::query(DELETE_ENDED)
            .bind(now)
            .bind(idle_before)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(done)
    }
}
