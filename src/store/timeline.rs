//! A key's attempts a page at a time (the key page and `GET /api/v1/keys/{key}`): a
//! key retried thousands of times must not load them all into one response. Both
//! statements read the primary key's `(key, seq)` order.

use super::sql::select_attempts;
use super::{Store, StoreError, on_pool};
use crate::guard::{Attempt, AttemptKind, IdempotencyKey, Record, Status};

pub(super) const PAGE: &str = concat!(
    select_attempts!(),
    "WHERE key = $1 AND seq > $2 ORDER BY seq LIMIT $3"
);
pub(super) const NEWEST: &str = concat!(
    select_attempts!(),
    "WHERE key = $1 ORDER BY seq DESC LIMIT $2"
);

/// Up to `limit` attempts of a key after its attempt `after_seq`, and whether more
/// follow.
#[derive(Debug, Clone)]
pub struct AttemptPage {
    pub attempts: Vec<Attempt>,
    pub more: bool,
}

impl Store {
    pub(crate) async fn attempts_page(
        &self,
        key: &IdempotencyKey,
        after_seq: i64,
        limit: u32,
    ) -> Result<AttemptPage, StoreError> {
        let mut attempts: Vec<Attempt> = on_pool!(self, pool => sqlx::query_as(PAGE)
            .bind(key.as_str())
            .bind(after_seq)
            .bind(i64::from(limit) + 1)
            .fetch_all(pool)
            .await)?;
        let more = attempts.len() > limit as usize;
        attempts.truncate(limit as usize);
        Ok(AttemptPage { attempts, more })
    }

    /// The newest `limit` attempts of a key, oldest first.
    pub(crate) async fn attempts_newest(
        &self,
        key: &IdempotencyKey,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        let mut attempts: Vec<Attempt> = on_pool!(self, pool => sqlx::query_as(NEWEST)
            .bind(key.as_str())
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await)?;
        attempts.reverse();
        Ok(attempts)
    }

    /// Whether a person must decide about `record`: UNKNOWN, escalated, and nobody
    /// has released it. A refused write after the escalation (a resolve refused with
    /// 422, a stale worker) changed nothing, so it does not end the wait: the last
    /// attempt that wrote is what counts. The one definition the guard API's key state
    /// and the MCP proxy's status tool read.
    pub async fn awaiting_person(&self, record: &Record) -> Result<bool, StoreError> {
        if record.status != Status::Unknown || record.release_approved {
            return Ok(false);
        }
        // A few newest rows: a stale worker's rejected writes (bounded, and counted on
        // one row when repeated) may sit above the escalation.
        let newest = self.attempts_newest(&record.key, 16).await?;
        Ok(newest
            .iter()
            .rev()
            .find(|a| a.kind != AttemptKind::StaleWriteRejected)
            .is_some_and(|a| a.kind == AttemptKind::Escalated))
    }
}
