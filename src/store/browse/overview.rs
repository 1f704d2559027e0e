//! The overview's traffic chart: attempts per tool, kind and 5-minute bucket.

use super::Sql;
use crate::store::{Store, StoreError, on_pool};
use chrono::{DateTime, Utc};

/// Width of an overview bucket.
pub const BUCKET_SECONDS: i64 = 300;

/// Attempts of one tool and kind in one 5-minute bucket.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AttemptBucket {
    pub tool: String,
    pub kind: String,
    /// Start of the bucket in seconds since the epoch, divided by [`BUCKET_SECONDS`].
    pub bucket: i64,
    pub n: i64,
    /// Of those, the attempts at or after the "recent" bound (the last hour).
    pub n_recent: i64,
}

/// Attempts per tool, kind and 5-minute bucket since `$1`, with the count since `$2`
/// (the last hour) alongside; one range scan of idempotency_attempts_occurred_at_tool_kind.
/// The bucket arithmetic is the one part the two backends spell differently.
macro_rules! attempt_buckets {
    ($bucket:literal) => {
        concat!(
            "SELECT tool, kind, ",
            $bucket,
            " AS bucket, count(*) AS n, \
             sum(CASE WHEN occurred_at >= $2 THEN 1 ELSE 0 END) AS n_recent \
             FROM idempotency_attempts WHERE occurred_at >= $1 \
             GROUP BY tool, kind, bucket"
        )
    };
}
pub(super) const ATTEMPT_BUCKETS: Sql = Sql {
    postgres: attempt_buckets!("CAST(floor(extract(epoch FROM occurred_at) / 300) AS bigint)"),
    sqlite: attempt_buckets!("CAST(strftime('%s', occurred_at) AS INTEGER) / 300"),
};

impl Store {
    /// Attempt counts per tool, kind and 5-minute bucket since `since`, each with the
    /// part at or after `recent`.
    pub(crate) async fn attempt_buckets(
        &self,
        since: DateTime<Utc>,
        recent: DateTime<Utc>,
    ) -> Result<Vec<AttemptBucket>, StoreError> {
        let sql = ATTEMPT_BUCKETS.on(self);
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sql).bind(since).bind(recent).fetch_all(pool).await
        })?)
    }
}
