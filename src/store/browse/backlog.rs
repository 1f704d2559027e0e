//! `/backlog`: the keys that need a decision now (UNKNOWN, or IN_PROGRESS with a lease
//! that ran out), oldest first, on the partial index on undecided keys, small by design.
//! The per-tool counts are the gauges' read (`metrics::port::BacklogSource`).

use super::summary::summary_columns;
use super::{Cursor, KeySummary, far_past, page_of};
use crate::store::sql::undecided;
use crate::store::{Store, StoreError, on_pool};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq)]
pub struct BacklogPage {
    pub keys: Vec<KeySummary>,
    pub next: Option<Cursor>,
}

/// The backlog, oldest first, keyset on (created_at, key). `$1` now, `$2` tool, `$3`/`$4`
/// the keyset position, `$5` the row limit, `$6` status.
pub(super) const BACKLOG: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM idempotency_records WHERE ",
    undecided!(),
    " AND ($2 IS NULL OR tool = $2) AND ($6 IS NULL OR status = $6) \
     AND (created_at, key) > ($3, $4) ORDER BY created_at, key LIMIT $5"
);

impl Store {
    /// UNKNOWN keys and IN_PROGRESS keys whose lease ran out by `now`, oldest first;
    /// of one `status` if given (`IN_PROGRESS`: exactly the expired leases).
    pub async fn backlog(
        &self,
        tool: Option<&str>,
        status: Option<&str>,
        after: Option<&Cursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<BacklogPage, StoreError> {
        let (at, key) = match after {
            Some(c) => (c.at, c.key.as_str()),
            None => (far_past(), ""),
        };
        let fetch = i64::from(limit) + 1;
        let rows: Vec<KeySummary> = on_pool!(self, pool => {
            sqlx::query_as(BACKLOG)
                .bind(now)
                .bind(tool)
                .bind(at)
                .bind(key)
                .bind(fetch)
                .bind(status)
                .fetch_all(pool)
                .await
        })?;
        let (keys, next) = page_of(rows, limit, |k| k.created_at);
        Ok(BacklogPage { keys, next })
    }
}
