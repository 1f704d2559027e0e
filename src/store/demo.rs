//! The few read-only counts `idemwatch demo` shows on its status line and at
//! `/demo/stats`. Each statement is the same text on both backends.

use super::{Store, StoreError, on_pool};
use crate::guard::AttemptKind;
use chrono::{DateTime, Utc};

/// Attempt rows by kind, over the whole log. A full scan: for the demo's
/// `/demo/stats`, never for a scrape.
pub(crate) const ATTEMPT_KINDS: &str =
    "SELECT kind, count(*) FROM idempotency_attempts GROUP BY kind ORDER BY kind";

/// Attempt rows by kind since a time, through `idempotency_attempts_occurred_at`.
pub(crate) const ATTEMPT_KINDS_SINCE: &str = "SELECT kind, count(*) FROM idempotency_attempts \
    WHERE occurred_at >= $1 GROUP BY kind ORDER BY kind";

/// The UNKNOWN backlog. The status is a literal so that PostgreSQL can use the
/// partial index `idempotency_records_backlog` even with a generic plan.
pub(crate) const UNKNOWN_BACKLOG: &str =
    "SELECT count(*) FROM idempotency_records WHERE status = 'UNKNOWN'";

impl Store {
    /// How many attempt rows of each kind were written (since `since`, when given).
    pub async fn attempt_kind_counts(
        &self,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<(AttemptKind, i64)>, StoreError> {
        let rows: Vec<(String, i64)> = match since {
            None => on_pool!(self, pool => sqlx::query_as(ATTEMPT_KINDS).fetch_all(pool).await)?,
            Some(t) => on_pool!(self, pool => {
                sqlx::query_as(ATTEMPT_KINDS_SINCE).bind(t).fetch_all(pool).await
            })?,
        };
        rows.into_iter()
            .map(|(kind, n)| {
                let kind = kind
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("attempt kind: {e}")))?;
                Ok((kind, n))
            })
            .collect()
    }

    /// How many keys are UNKNOWN now.
    pub(crate) async fn unknown_backlog(&self) -> Result<i64, StoreError> {
        Ok(on_pool!(self, pool => sqlx::query_scalar(UNKNOWN_BACKLOG).fetch_one(pool).await)?)
    }
}
