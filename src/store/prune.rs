//! Retention: one batch of expired DONE / FAILED keys, locked, optionally read for
//! the archive, then deleted with their attempts in the same transaction.
//!
//! Safe on several replicas at once. PostgreSQL: the batch is picked with
//! `FOR UPDATE SKIP LOCKED`, so two pruners never pick the same key and a pruner never
//! waits for a key the guard holds (and the guard, finding the record gone after
//! waiting for ours, claims afresh). SQLite: `BEGIN IMMEDIATE` takes the one write
//! lock, so batches of different processes run one after the other. Either way the
//! locks last one small batch.

use super::export::{RawExportRow, export_select};
use super::{Backend, SqlitePools, Store, StoreError, WritePool, on_pool};
use crate::export::port::{ExportRow, RawRow};
use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use sqlx::postgres::PgPool;
use sqlx::types::Json;

/// Never UNKNOWN or IN_PROGRESS: only the two terminal statuses, each with its own
/// cut-off on `updated_at` (the last thing that happened to the key, replays
/// included), and never while the provider may still remember the key.
///
/// `updated_at < greatest($1, $2)` says nothing the OR does not, but it is what the
/// planner needs: with two different cut-offs (DONE 30 days and FAILED 90 by
/// default) it finds no index condition in the OR, and reads the `updated_at` index
/// from the oldest key with everything as a filter. A batch that finds fewer keys than
/// its limit, as the last batch of every run does, then reads every record in the
/// table. With the bound, it stops at the later cut-off.
pub(crate) const PICK_POSTGRES: &str = "SELECT key FROM idempotency_records \
    WHERE updated_at < greatest($1, $2) \
    AND ((status = 'DONE' AND updated_at < $1) OR (status = 'FAILED' AND updated_at < $2)) \
    AND provider_retention_until <= $3 \
    ORDER BY updated_at, key LIMIT $4 \
    FOR UPDATE SKIP LOCKED";
/// The same, with SQLite's two-argument `max` for `greatest`.
pub(crate) const PICK_SQLITE: &str = "SELECT key FROM idempotency_records \
    WHERE updated_at < max($1, $2) \
    AND ((status = 'DONE' AND updated_at < $1) OR (status = 'FAILED' AND updated_at < $2)) \
    AND provider_retention_until <= $3 \
    ORDER BY updated_at, key LIMIT $4";

/// A pruner waits at most this long for a lock (a migration, say) before giving up
/// the batch; the next run tries again.
pub(crate) const LOCK_TIMEOUT_POSTGRES: &str = "SET LOCAL lock_timeout = '5s'";

pub(crate) const ROWS_POSTGRES: &str = concat!(
    export_select!(),
    "WHERE a.key = ANY($1) ORDER BY a.key, a.seq"
);
pub(crate) const ROWS_SQLITE: &str = concat!(
    export_select!(),
    "WHERE a.key IN (SELECT value FROM json_each($1)) ORDER BY a.key, a.seq"
);

/// Attempts first: they reference the record.
pub(crate) const DELETE_ATTEMPTS_POSTGRES: &str =
    "DELETE FROM idempotency_attempts WHERE key = ANY($1)";
pub(crate) const DELETE_ATTEMPTS_SQLITE: &str =
    "DELETE FROM idempotency_attempts WHERE key IN (SELECT value FROM json_each($1))";
pub(crate) const DELETE_RECORDS_POSTGRES: &str = "DELETE FROM idempotency_records \
    WHERE key = ANY($1) AND status IN ('DONE', 'FAILED') RETURNING status";
pub(crate) const DELETE_RECORDS_SQLITE: &str = "DELETE FROM idempotency_records \
    WHERE key IN (SELECT value FROM json_each($1)) AND status IN ('DONE', 'FAILED') \
    RETURNING status";

/// What is old enough to go.
#[derive(Debug, Clone, Copy)]
pub struct PruneCutoffs {
    /// DONE keys last touched before this go.
    pub done_before: DateTime<Utc>,
    /// FAILED keys last touched before this go.
    pub failed_before: DateTime<Utc>,
    /// Now: keys the provider still remembers stay.
    pub now: DateTime<Utc>,
}

/// What one batch deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrunedCounts {
    pub done: u64,
    pub failed: u64,
    pub attempts: u64,
}

impl PrunedCounts {
    pub fn keys(&self) -> u64 {
        self.done + self.failed
    }
}

enum PruneTx {
    Postgres(<PgPool as WritePool>::Tx),
    Sqlite(<SqlitePools as WritePool>::Tx),
}

/// Runs `$body` once per backend with `$tx` bound to the batch's transaction and
/// `$keys` to its keys as that backend reads a list: an array on PostgreSQL
/// (`= ANY($1)`), JSON text on SQLite (`IN (SELECT value FROM json_each($1))`).
macro_rules! on_batch {
    ($batch:expr, $keys:expr, |$tx:ident, $k:ident| $body:expr) => {
        match $batch {
            PruneTx::Postgres($tx) => {
                let $k = $keys;
                $body
            }
            PruneTx::Sqlite($tx) => {
                let $k = Json($keys);
                $body
            }
        }
    };
}

/// An open transaction holding a batch of keys. Dropping it rolls back: nothing is
/// deleted unless [`PruneBatch::delete_and_commit`] is reached.
pub struct PruneBatch {
    tx: PruneTx,
    backend: Backend,
    keys: Vec<String>,
}

impl Store {
    /// Opens a transaction and locks up to `limit` expired keys.
    pub async fn prune_begin(
        &self,
        cutoffs: &PruneCutoffs,
        limit: u32,
    ) -> Result<PruneBatch, StoreError> {
        let backend = self.backend();
        let pick = backend.pick(PICK_POSTGRES, PICK_SQLITE);
        let (tx, keys) = on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            if backend == Backend::Postgres {
                sqlx::query(LOCK_TIMEOUT_POSTGRES).execute(&mut *tx).await?;
            }
            let keys: Vec<String> = sqlx::query_scalar(pick)
                .bind(cutoffs.done_before)
                .bind(cutoffs.failed_before)
                .bind(cutoffs.now)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?;
            (PruneTx::from(tx), keys)
        });
        Ok(PruneBatch { tx, backend, keys })
    }

    /// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the pruner's pick as
    /// [`Store::prune_begin`] runs it, rolled back (it locks rows): for the test that
    /// checks a pick's work does not grow with the table. `None` on SQLite.
    #[doc(hidden)]
    pub async fn explain_prune_pick(
        &self,
        cutoffs: &PruneCutoffs,
        limit: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let Store::Postgres(pool) = self else {
            return Ok(None);
        };
        let mut tx = crate::store::pools::begin(pool, None).await?;
        let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {PICK_POSTGRES}");
        let plan = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .bind(cutoffs.done_before)
            .bind(cutoffs.failed_before)
            .bind(cutoffs.now)
            .bind(i64::from(limit))
            .fetch_one(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(Some(plan))
    }
}

impl From<<PgPool as WritePool>::Tx> for PruneTx {
    fn from(tx: <PgPool as WritePool>::Tx) -> Self {
        PruneTx::Postgres(tx)
    }
}

impl From<<SqlitePools as WritePool>::Tx> for PruneTx {
    fn from(tx: <SqlitePools as WritePool>::Tx) -> Self {
        PruneTx::Sqlite(tx)
    }
}

impl PruneBatch {
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The batch's attempt rows with their context, in (key, seq) order: what the
    /// archive receives.
    pub fn rows(&mut self) -> BoxStream<'_, Result<ExportRow, StoreError>> {
        let sql = self.backend.pick(ROWS_POSTGRES, ROWS_SQLITE);
        // Decoded as the export's cells, every row's types checked.
        on_batch!(&mut self.tx, self.keys.clone(), |tx, keys| {
            let rows = sqlx::query(sql).bind(keys).fetch(&mut **tx);
            rows.map(|r| RawExportRow::from(r?).cells()?.to_row())
                .boxed()
        })
    }

    /// Deletes the batch's attempts and records and commits. If any record is not
    /// deleted (it is no longer DONE or FAILED, which the locks rule out), nothing is.
    pub async fn delete_and_commit(self) -> Result<PrunedCounts, StoreError> {
        let wanted = self.keys.len();
        let pick = |postgres, sqlite| self.backend.pick(postgres, sqlite);
        let receipts = pick(
            super::evidence::PRUNE_RECEIPTS_POSTGRES,
            super::evidence::PRUNE_RECEIPTS_SQLITE,
        );
        let delete_attempts = pick(DELETE_ATTEMPTS_POSTGRES, DELETE_ATTEMPTS_SQLITE);
        let delete_records = pick(DELETE_RECORDS_POSTGRES, DELETE_RECORDS_SQLITE);
        let postgres = self.backend == Backend::Postgres;
        let (attempts, statuses) = on_batch!(self.tx, &self.keys, |tx, keys| {
            let mut tx = tx;
            if postgres {
                sqlx::query(super::evidence::RECEIPTS_LOCK_POSTGRES)
                    .execute(&mut *tx)
                    .await?;
            }
            // The receipt first, in the same transaction: a pruned key is never
            // taken for a deleted one (docs/EXPORT.md, retention).
            sqlx::query(receipts)
                .bind(keys)
                .bind(Utc::now())
                .execute(&mut *tx)
                .await?;
            let attempts = sqlx::query(delete_attempts)
                .bind(keys)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let statuses: Vec<String> = sqlx::query_scalar(delete_records)
                .bind(keys)
                .fetch_all(&mut *tx)
                .await?;
            check_all_deleted(wanted, statuses.len())?;
            tx.commit().await?;
            (attempts, statuses)
        });
        let done = statuses.iter().filter(|s| *s == "DONE").count() as u64;
        Ok(PrunedCounts {
            done,
            failed: statuses.len() as u64 - done,
            attempts,
        })
    }
}

/// Returning an error drops the transaction, which rolls the attempts back too.
fn check_all_deleted(wanted: usize, deleted: usize) -> Result<(), StoreError> {
    if wanted == deleted {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "pruning deleted {deleted} of {wanted} locked records; the batch was rolled back"
        )))
    }
}
