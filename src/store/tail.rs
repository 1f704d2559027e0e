//! The reads behind /metrics: following the attempt log in commit order, and the
//! backlog gauges. Every statement here is indexed; none scans a whole table.
//!
//! Commit order. SQLite has one writer at a time, so ids become visible in id order.
//! PostgreSQL hands out ids before commit, so a reader that follows ids can pass an
//! id whose transaction commits later and miss it for ever. The PostgreSQL tail reads
//! only rows whose writing transaction (`txid`) is older than every transaction still
//! running (`pg_snapshot_xmin`): no row with such a txid can appear later. It orders by
//! (txid, id), which the `idempotency_attempts_txid` index serves. The price: any open
//! write transaction in the cluster holds the tail back until it ends (docs/METRICS.md).

use super::sql::{past_retention, undecided};
use super::{Store, StoreError, on_pool};
use crate::metrics::port::{BacklogGroup, BacklogSource};
use crate::tail::port::{TailEvent, TailHead, TailPending, TailPosition, TailSource};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// PostgreSQL's head: the oldest running transaction, and the rows already visible
/// beyond it. `pg_current_snapshot()` is the statement's own snapshot, so both come
/// from one consistent view.
pub(crate) const TAIL_HEAD_POSTGRES: &str = "SELECT s.xmin::text::bigint AS xmin, \
    a.txid::text::bigint AS txid, a.id AS id \
    FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) s \
    LEFT JOIN idempotency_attempts a ON a.txid >= s.xmin";
pub(crate) const TAIL_HEAD_SQLITE: &str = "SELECT COALESCE(max(id), 0) FROM idempotency_attempts";

/// The next batch in commit order. PostgreSQL: only transactions older than every
/// running one (see the module comment); an index range scan on (txid, id). The
/// ORDER BY names the table's columns: a bare `txid` would be the bigint output
/// column, which no index serves.
pub(crate) const TAIL_BATCH_POSTGRES: &str = "SELECT id, txid::text::bigint AS txid, tool, tenant, kind, \
    detail->>'resolution' AS resolution, detail->>'previous_status' AS previous_status, \
    detail->>'suspected_duplicate_of' AS suspected_duplicate_of, duration_ms, occurred_at \
    FROM idempotency_attempts a \
    WHERE (a.txid, a.id) > ($1::bigint::text::xid8, $2) \
      AND a.txid < pg_snapshot_xmin(pg_current_snapshot()) \
    ORDER BY a.txid, a.id LIMIT $3";
/// SQLite: one writer at a time, so id order is commit order; a primary-key range.
/// The same parameters as PostgreSQL's; `$1`, the txid, is always 0 here and unused.
pub(crate) const TAIL_BATCH_SQLITE: &str = "SELECT id, 0 AS txid, tool, tenant, kind, \
    detail->>'resolution' AS resolution, detail->>'previous_status' AS previous_status, \
    detail->>'suspected_duplicate_of' AS suspected_duplicate_of, duration_ms, occurred_at \
    FROM idempotency_attempts WHERE id > $2 ORDER BY id LIMIT $3";

/// How many of the rows the tail may not read yet [`TAIL_PENDING_POSTGRES`] looks at
/// (its `$1`).
pub(crate) const TAIL_PENDING_WINDOW: i64 = 1000;

/// PostgreSQL: the oldest of the committed rows the tail may not read yet, and the
/// age of the oldest open write transaction, prepared ones included.
///
/// The rows are read in tail order from the `idempotency_attempts_txid` index, at
/// most [`TAIL_PENDING_WINDOW`] of them, inside a subquery with a LIMIT. Both are
/// needed. A bare `min(occurred_at) … WHERE txid >= xmin` lets the planner answer
/// the min from the `occurred_at` index, walking the whole log from its oldest row
/// and filtering on txid, because it assumes the pending rows are spread evenly in
/// time when they are all at the end: a 2026-12-04 soak caught it at 60–120 ms a
/// poll, two polls a second, growing with the log (docs/PERFORMANCE.md, "The tail's
/// pending rows"). And the pending rows can be many (a transaction left open for an
/// hour holds back an hour of rows); the window bounds each poll's work. Past the
/// window the figure is the oldest of the next rows in tail order, which are the
/// rows of the oldest transactions: the same within the milliseconds between a
/// transaction's first write and its attempt row.
pub(crate) const TAIL_PENDING_POSTGRES: &str = "SELECT \
    (SELECT min(occurred_at) FROM (SELECT a.occurred_at FROM idempotency_attempts a \
       WHERE a.txid >= pg_snapshot_xmin(pg_current_snapshot()) \
       ORDER BY a.txid, a.id LIMIT $1) pending) AS oldest_pending, \
    (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(started)), 0)::float8 FROM ( \
       SELECT xact_start AS started FROM pg_stat_activity WHERE backend_xid IS NOT NULL \
       UNION ALL SELECT prepared FROM pg_prepared_xacts) open_writes) AS held_back_seconds";

/// Distinct tools without reading every row: a loose index scan (one index probe per
/// tool) on `idempotency_records_tool_updated_at`, the same text on both backends.
pub(crate) const DISTINCT_TOOLS: &str = "WITH RECURSIVE tools(tool) AS ( \
    SELECT (SELECT tool FROM idempotency_records ORDER BY tool LIMIT 1) \
    UNION ALL \
    SELECT (SELECT r.tool FROM idempotency_records r WHERE r.tool > tools.tool ORDER BY r.tool LIMIT 1) \
    FROM tools WHERE tools.tool IS NOT NULL) \
    SELECT tool FROM tools WHERE tool IS NOT NULL";

/// The first `$1` tenants by name, the same way on `idempotency_records_tenant_business_ref`.
pub(crate) const FIRST_TENANTS: &str = "WITH RECURSIVE tenants(tenant, n) AS ( \
    SELECT (SELECT tenant FROM idempotency_records ORDER BY tenant LIMIT 1), 1 \
    UNION ALL \
    SELECT (SELECT r.tenant FROM idempotency_records r WHERE r.tenant > tenants.tenant ORDER BY r.tenant LIMIT 1), n + 1 \
    FROM tenants WHERE tenants.tenant IS NOT NULL AND n < $1) \
    SELECT tenant FROM tenants WHERE tenant IS NOT NULL";

/// The keys that need a decision at `$1` (UNKNOWN, or IN_PROGRESS with a lease that ran
/// out) per (tool, tenant), for the gauges and the pages. On the partial index
/// `idempotency_records_backlog` (UNKNOWN and IN_PROGRESS keys only: small by design);
/// the WHERE clause repeats the index's predicate word for word so that both planners
/// use it.
pub(crate) const BACKLOG_BY_TOOL: &str = concat!(
    "SELECT tool, tenant, \
    count(*) FILTER (WHERE status = 'UNKNOWN') AS unknown, \
    count(*) FILTER (WHERE status = 'IN_PROGRESS') AS expired_leases, \
    min(created_at) AS oldest_created_at, \
    min(created_at) FILTER (WHERE status = 'UNKNOWN') AS oldest_unknown_created_at, \
    min(resend_safe_until) FILTER (WHERE status = 'UNKNOWN' AND NOT ",
    past_retention!(),
    ") AS earliest_retention_deadline, \
    count(*) FILTER (WHERE ",
    past_retention!(),
    ") AS past_retention FROM idempotency_records WHERE ",
    undecided!(),
    " GROUP BY tool, tenant"
);

/// A hot standby's replay lag in seconds; NULL on a primary. A standby that has
/// replayed everything it received reads 0 (the timestamp of the last replayed commit
/// alone would grow while the primary is idle).
pub(crate) const REPLICA_LAG_POSTGRES: &str = "SELECT CASE \
    WHEN NOT pg_is_in_recovery() THEN NULL \
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0::float8 \
    ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)::float8 END";

#[derive(sqlx::FromRow)]
struct HeadRow {
    xmin: i64,
    txid: Option<i64>,
    id: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct PendingRow {
    oldest_pending: Option<DateTime<Utc>>,
    held_back_seconds: f64,
}

impl TailSource for Store {
    #[tracing::instrument(skip_all)]
    async fn tail_head(&self) -> Result<TailHead, StoreError> {
        match self {
            Store::Postgres(pool) => {
                let rows: Vec<HeadRow> = sqlx::query_as(TAIL_HEAD_POSTGRES).fetch_all(pool).await?;
                let xmin = rows.first().map_or(1, |r| r.xmin);
                let already_committed = rows
                    .iter()
                    .filter_map(|r| {
                        Some(TailPosition {
                            txid: r.txid?,
                            id: r.id?,
                        })
                    })
                    .collect();
                // Every transaction below xmin has ended: all of its rows are read.
                let position = TailPosition {
                    txid: xmin - 1,
                    id: i64::MAX,
                };
                Ok(TailHead {
                    position,
                    already_committed,
                })
            }
            Store::Sqlite(pool) => {
                let id: i64 = sqlx::query_scalar(TAIL_HEAD_SQLITE).fetch_one(pool).await?;
                Ok(TailHead {
                    position: TailPosition { txid: 0, id },
                    already_committed: Vec::new(),
                })
            }
        }
    }

    #[tracing::instrument(skip_all, fields(txid = after.txid, id = after.id))]
    async fn tail_batch(
        &self,
        after: TailPosition,
        limit: u32,
    ) -> Result<Vec<TailEvent>, StoreError> {
        let sql = self.backend().pick(TAIL_BATCH_POSTGRES, TAIL_BATCH_SQLITE);
        let rows = on_pool!(self, pool => sqlx::query_as(sql)
            .bind(after.txid)
            .bind(after.id)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await)?;
        Ok(rows)
    }

    async fn tail_pending(&self) -> Result<TailPending, StoreError> {
        match self {
            Store::Postgres(pool) => {
                let row: PendingRow = sqlx::query_as(TAIL_PENDING_POSTGRES)
                    .bind(TAIL_PENDING_WINDOW)
                    .fetch_one(pool)
                    .await?;
                Ok(TailPending {
                    oldest_pending: row.oldest_pending,
                    held_back: Duration::try_from_secs_f64(row.held_back_seconds.max(0.0))
                        .unwrap_or_default(),
                })
            }
            Store::Sqlite(_) => Ok(TailPending::default()),
        }
    }

    async fn distinct_tools(&self) -> Result<Vec<String>, StoreError> {
        let tools =
            on_pool!(self, pool => sqlx::query_scalar(DISTINCT_TOOLS).fetch_all(pool).await)?;
        Ok(tools)
    }

    async fn first_tenants(&self, limit: u32) -> Result<Vec<String>, StoreError> {
        let limit = i64::from(limit);
        let tenants = on_pool!(self, pool => sqlx::query_scalar(FIRST_TENANTS).bind(limit).fetch_all(pool).await)?;
        Ok(tenants)
    }
}

impl BacklogSource for Store {
    #[tracing::instrument(skip_all)]
    async fn backlog_by_tool(&self, now: DateTime<Utc>) -> Result<Vec<BacklogGroup>, StoreError> {
        let groups = on_pool!(self, pool => sqlx::query_as(BACKLOG_BY_TOOL).bind(now).fetch_all(pool).await)?;
        Ok(groups)
    }

    async fn replica_lag(&self) -> Result<Option<Duration>, StoreError> {
        match self {
            Store::Postgres(pool) => {
                let lag: Option<f64> = sqlx::query_scalar(REPLICA_LAG_POSTGRES)
                    .fetch_one(pool)
                    .await?;
                Ok(lag.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()))
            }
            Store::Sqlite(_) => Ok(None),
        }
    }
}

impl Store {
    /// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of what [`TailSource::tail_pending`] runs,
    /// run now: for the test that checks a poll's work does not grow with the log.
    /// `None` on SQLite, which has no such statement.
    #[doc(hidden)]
    pub async fn explain_tail_pending(&self) -> Result<Option<serde_json::Value>, StoreError> {
        match self {
            Store::Postgres(pool) => {
                let explain =
                    format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {TAIL_PENDING_POSTGRES}");
                let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
                    .bind(TAIL_PENDING_WINDOW)
                    .fetch_one(pool)
                    .await?;
                Ok(Some(plan))
            }
            Store::Sqlite(_) => Ok(None),
        }
    }
}
