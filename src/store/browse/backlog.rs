//! `/backlog`: the keys that need a decision now (UNKNOWN, or IN_PROGRESS with a lease
//! that ran out), oldest first, and the per-tool summary the overview shows too. Both
//! read the partial index on undecided keys, small by design.

use super::summary::summary_columns;
use super::{Cursor, KeySummary, far_past, page_of};
use crate::store::sql::{lease_expired, past_retention};
use crate::store::{Store, StoreError, on_pool};
use chrono::{DateTime, Utc};

/// Per tool, the keys that need attention now.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BacklogSummary {
    pub tool: String,
    pub unknown: i64,
    pub expired_leases: i64,
    /// UNKNOWN keys past retention (`resend_safe_until` passed): only a person can
    /// resolve them.
    pub past_retention: i64,
    pub oldest_unknown: Option<DateTime<Utc>>,
    pub oldest: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BacklogPage {
    pub keys: Vec<KeySummary>,
    pub next: Option<Cursor>,
}

/// The condition of an undecided key: UNKNOWN, or IN_PROGRESS with a lease that ran out
/// at `$1`. The IN list is the partial index idempotency_records_backlog's predicate.
macro_rules! undecided {
    () => {
        concat!(
            "status IN ('UNKNOWN', 'IN_PROGRESS') AND (status = 'UNKNOWN' OR ",
            lease_expired!(),
            ")"
        )
    };
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

/// Per tool: the undecided keys at `$1`.
pub(super) const BACKLOG_SUMMARY: &str = concat!(
    "SELECT tool, \
     sum(CASE WHEN status = 'UNKNOWN' THEN 1 ELSE 0 END) AS unknown, \
     sum(CASE WHEN status = 'IN_PROGRESS' THEN 1 ELSE 0 END) AS expired_leases, \
     sum(CASE WHEN ",
    past_retention!(),
    " THEN 1 ELSE 0 END) AS past_retention, \
     min(CASE WHEN status = 'UNKNOWN' THEN created_at END) AS oldest_unknown, \
     min(created_at) AS oldest \
     FROM idempotency_records WHERE ",
    undecided!(),
    " GROUP BY tool ORDER BY tool"
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

    /// Per tool: UNKNOWN keys, expired leases, past-retention keys and the oldest, now.
    pub async fn backlog_summary(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<BacklogSummary>, StoreError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(BACKLOG_SUMMARY).bind(now).fetch_all(pool).await
        })?)
    }
}
