//! The export's port ([`ExportStore`], `export/port.rs`) for [`Store`]: attempts
//! joined with their record, sorted by (key, seq), as a stream of [`RawExportRow`]s
//! (`fetch`, never `fetch_all`): memory stays flat however many rows. The export,
//! the database verification and the pruner's archive all read it.
//!
//! One statement, so one snapshot on both backends: each row's record context and
//! chain head are consistent with the attempts beside it.

mod reuse;
mod row;

use row::Checked;
pub(crate) use row::RawExportRow;

use super::{Store, StoreError, on_pool};
use crate::export::port::RawRow;
use crate::export::port::{ExportFilter, ExportStore, KeyRange, VerifyRow, VerifyRows};
use futures::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use reuse::decode_into;

/// The columns of the port's `ExportRow`, in its order (a test checks the names
/// against its `COLUMNS`); the export and the pruner's archive read them.
macro_rules! export_select {
    () => {
        concat!(
            $crate::store::export::export_columns!(
                "r.fingerprint, r.business_args, r.result, r.error, "
            ),
            $crate::store::export::export_from!()
        )
    };
}

/// Each attempt beside its record.
macro_rules! export_from {
    () => {
        "FROM idempotency_attempts a JOIN idempotency_records r ON r.key = a.key "
    };
}

/// The columns with the record's state (`fingerprint` … `error`) given in the middle.
macro_rules! export_columns {
    ($state:expr) => {
        concat!(
            "SELECT a.id AS attempt_id, a.key, a.seq, a.occurred_at, a.tenant, a.tool, \
             r.workflow_id, r.step_id, r.intent_id, r.business_ref, r.status AS current_status, \
             a.kind, a.actor, a.fencing_token, a.duration_ms, a.detail, a.prev_hash, a.hash, ",
            $state,
            "r.log_seq, r.log_hash "
        )
    };
}
pub(crate) use {export_columns, export_from, export_select};

/// Optional filters as `($n IS NULL OR …)`, one text for both backends. PostgreSQL
/// needs no casts: sqlx declares every parameter's type in the statement's Parse
/// message (an absent `since` is still a `timestamptz`), so `$1 IS NULL` is never of
/// unknown type (`every_filter_selects_exactly_its_rows`, tests/it/export/files.rs, runs
/// each filter given and absent on both). SQLite compares the RFC 3339 text it
/// stores; the bound times use the same form. `since` inclusive, `until` exclusive.
/// The (key, seq) unique index gives the order.
pub const EXPORT: &str = concat!(
    export_select!(),
    "WHERE ($1 IS NULL OR a.occurred_at >= $1) \
     AND ($2 IS NULL OR a.occurred_at < $2) \
     AND ($3 IS NULL OR a.tenant = $3) \
     AND ($4 IS NULL OR a.tool = $4) \
     AND ($5 IS NULL OR a.key = $5) \
     AND ($6 IS NULL OR r.business_ref = $6) \
     ORDER BY a.key, a.seq"
);

/// The log for `verify`, one [`KeyRange`] of it: the export's rows, except that the
/// record's state is sent only with the row at the record's `log_seq`, the one row
/// the check compares it with (a head row has `seq = log_seq`, `ExportRow::is_head`);
/// other rows carry `''` and JSON `null`. The state is the bulk of a row (two JSON
/// documents turned into text by the server and parsed again by us, ten times a key),
/// so this is most of what the database and the verifier do per row, for nothing.
///
/// The range is given on both tables: PostgreSQL carries equalities, not ranges,
/// across a join, and without `r.key` bounds the records' side of the merge join
/// would scan from the first key. A range without an upper end has its own text
/// ([`VERIFY_TO_END`]) rather than `($2 IS NULL OR …)`: a generic plan cannot use such
/// an `OR` as an index bound and would read every row after `$1`.
macro_rules! verify_select {
    ($range:expr) => {
        concat!(
            export_columns!(
                "CASE WHEN a.seq = r.log_seq THEN r.fingerprint ELSE '' END AS fingerprint, \
                 CASE WHEN a.seq = r.log_seq THEN r.business_args ELSE 'null' END AS business_args, \
                 CASE WHEN a.seq = r.log_seq THEN r.result END AS result, \
                 CASE WHEN a.seq = r.log_seq THEN r.error END AS error, "
            ),
            export_from!(),
            $range,
            " ORDER BY a.key, a.seq"
        )
    };
}

/// [`verify_select!`] for keys in `$1 <= key < $2`.
pub(crate) const VERIFY: &str =
    verify_select!("WHERE a.key >= $1 AND a.key < $2 AND r.key >= $1 AND r.key < $2");

/// [`verify_select!`] for keys from `$1` on.
pub(crate) const VERIFY_TO_END: &str = verify_select!("WHERE a.key >= $1 AND r.key >= $1");

/// Rows a batch of [`ExportStore::verify_rows`] holds.
pub(crate) const VERIFY_BATCH: usize = 512;

/// For [`VERIFY`] and an unfiltered [`EXPORT`], in its own transaction: the plan that streams both primary-key
/// indexes side by side (a merge join, already in (key, seq) order, no sort) with no
/// parallel workers. PostgreSQL otherwise picks a parallel nested loop with an
/// incremental sort, which took about 1.7 times the server CPU for the same rows
/// (docs/PERFORMANCE.md, checkpoint); on a small machine its workers also compete
/// with the verifier for the same cores. For a key range it underestimates the rows
/// (the range is given on both tables and it multiplies the two selectivities) and
/// picks a hash join or a bitmap scan, each followed by a sort of the whole range:
/// those are turned off too, so the rows stream in index order. `set_config(…, true)`
/// ends with the transaction.
pub(crate) const SERIAL_PLAN_POSTGRES: &str = "SELECT \
    set_config('max_parallel_workers_per_gather', '0', true), \
    set_config('enable_nestloop', 'off', true), \
    set_config('enable_hashjoin', 'off', true), \
    set_config('enable_bitmapscan', 'off', true), \
    set_config('enable_sort', 'off', true)";

/// For a filtered [`EXPORT`] on PostgreSQL, in its own transaction: the server's own
/// plan, parallel workers included as far as the server allows them, the plan psql
/// gets for the same query. Unlike [`SERIAL_PLAN_POSTGRES`], a selective filter (one
/// key, a recent window, a small tenant) gets its index and a sort of the few rows it
/// selects.
///
/// Parallel workers were turned off here until 2026-12-02 (they cost about three
/// processes' CPU for a window's rows, measured on a busy machine). On a quiet one the
/// parallel plan exported a window of 100 k attempts 1.22× as fast end to end (1.48× in
/// a 5 M-attempt log), and the serial plan was the whole gap to psql's COPY (docs/PERFORMANCE.md,
/// "A window in the server's own plan"). How many workers an export may take is the
/// server's setting (`max_parallel_workers_per_gather`), as for any other client.
///
/// A server that runs queries serially (`max_parallel_workers_per_gather` 0) gets
/// `work_mem` raised to 16 MB for this one statement (never lowered: a server set
/// higher keeps its own). With PostgreSQL's default 4 MB the serial planner joins a
/// window of 100 k attempts by hashing *every* record (500 k wide rows spilled in 32
/// batches to temporary files) instead of the window's attempts: 1.7–2.0 s of server
/// time against 0.9–1.4 s with 16 MB, where the attempts fit one in-memory batch
/// (`hash_mem_multiplier` 2) (docs/PERFORMANCE.md, "A window of a large log"); the
/// parallel plan does not make that choice. The cost is bounded: one hash and one
/// sort node, at most ~48 MB of the server's memory per export, released with the
/// transaction.
///
/// An export without a filter gets [`SERIAL_PLAN_POSTGRES`] instead
/// ([`export_plan`]): it wants every row in the primary key's order, which the
/// merge join of the two primary-key indexes gives without a sort. Left to itself
/// the serial planner chooses that join at 1 M attempts but, from a few million on,
/// a sequential scan and an external sort of the whole log (7 GB of temporary files
/// at 10 M attempts, and no row sent until the sort is done): 101 s of server time
/// against the index join's 63 s there (docs/PERFORMANCE.md, "The whole log in index
/// order").
pub(crate) const FILTERED_EXPORT_POSTGRES: &str = "SELECT \
    set_config('work_mem', CASE WHEN current_setting('max_parallel_workers_per_gather')::int = 0 \
        AND pg_size_bytes(current_setting('work_mem')) < 16777216 \
        THEN '16MB' ELSE current_setting('work_mem') END, true)";

/// The plan settings of an export that `filter` selects: see
/// [`FILTERED_EXPORT_POSTGRES`].
fn export_plan(filter: &ExportFilter) -> &'static str {
    if *filter == ExportFilter::default() {
        SERIAL_PLAN_POSTGRES
    } else {
        FILTERED_EXPORT_POSTGRES
    }
}

/// Binds `filter` (an owned [`ExportFilter`]) to [`EXPORT`]'s `$1`–`$6`.
macro_rules! bind_filter {
    ($q:expr, $f:expr) => {{
        let f: ExportFilter = $f;
        $q.bind(f.since)
            .bind(f.until)
            .bind(f.tenant)
            .bind(f.tool)
            .bind(f.key.map(String::from))
            .bind(f.business_ref)
    }};
}

/// Rows a batch of [`ExportStore::export_rows`] holds on PostgreSQL.
pub(crate) const EXPORT_BATCH: usize = 64;

/// Records whose attempt rows are all gone (the verifier reports them).
pub(crate) const RECORDS_WITHOUT_ATTEMPTS: &str = "SELECT r.key FROM idempotency_records r \
    WHERE NOT EXISTS (SELECT 1 FROM idempotency_attempts a WHERE a.key = r.key) \
    ORDER BY r.key LIMIT 100";

impl ExportStore for Store {
    type Row = RawExportRow;

    /// On PostgreSQL the rows are read in a transaction of their own with
    /// [`export_plan`]'s settings, and handed over in batches of [`EXPORT_BATCH`].
    fn export_rows(
        &self,
        filter: &ExportFilter,
    ) -> BoxStream<'_, Result<RawExportRow, StoreError>> {
        match self {
            Store::Postgres(pool) => {
                // Few rows in flight: each holds its text until the consumer is done.
                let (tx, batches) = tokio::sync::mpsc::channel(2);
                let (pool, f, plan) = (pool.clone(), filter.clone(), export_plan(filter));
                // The reader owns its transaction; it runs on the consumer's task
                // (polled beside the rows it sends), not a spawned one: rows freed on
                // another thread than the one that decoded them cost the allocator
                // more than the overlap gained on a busy machine (docs/PERFORMANCE.md).
                let read = async move {
                    let read = async {
                        let mut t = crate::store::pools::begin(&pool, None).await?;
                        sqlx::query(plan).execute(&mut *t).await?;
                        let mut rows = bind_filter!(sqlx::query(EXPORT), f).fetch(&mut *t);
                        let mut batch = Vec::with_capacity(EXPORT_BATCH);
                        let mut checked = Checked::Yes;
                        while let Some(row) = rows.next().await {
                            batch.push(RawExportRow::postgres(row?, checked));
                            checked = Checked::AsTheFirstRow;
                            if batch.len() == EXPORT_BATCH {
                                let full =
                                    std::mem::replace(&mut batch, Vec::with_capacity(EXPORT_BATCH));
                                if tx.send(Ok(full)).await.is_err() {
                                    return Ok(()); // the export stopped
                                }
                            }
                        }
                        if !batch.is_empty() {
                            let _ = tx.send(Ok(batch)).await;
                        }
                        Ok::<_, StoreError>(())
                    };
                    if let Err(e) = read.await {
                        let _ = tx.send(Err(e)).await;
                    }
                };
                let rows = futures::stream::unfold(batches, |mut rx| async move {
                    rx.recv().await.map(|batch| (batch, rx))
                })
                .flat_map(|batch| match batch {
                    Ok(rows) => futures::stream::iter(rows.into_iter().map(Ok)).left_stream(),
                    Err(e) => futures::stream::once(futures::future::ready(Err(e))).right_stream(),
                });
                futures::stream::select(rows.map(Some), read.into_stream().map(|()| None))
                    .filter_map(futures::future::ready)
                    .boxed()
            }
            Store::Sqlite(pools) => bind_filter!(sqlx::query(EXPORT), filter.clone())
                .fetch(pools)
                .map(|r| r.map(RawExportRow::from).map_err(StoreError::from))
                .boxed(),
        }
    }

    /// [`VERIFY`], in batches of [`VERIFY_BATCH`] rows. A task of its own reads and
    /// decodes them on one connection, so the caller checks one batch while the next
    /// is decoded, and decodes into the batches the caller gives back.
    fn verify_rows(&self, range: KeyRange) -> VerifyRows {
        let (tx, batches) = tokio::sync::mpsc::channel(4);
        let (spent, mut spent_rx) = tokio::sync::mpsc::unbounded_channel();
        let store = self.clone();
        tokio::spawn(async move {
            if let Err(e) = store.send_verify_rows(&range, &tx, &mut spent_rx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        VerifyRows { batches, spent }
    }

    /// One waiting for a connection longer than the pool's acquire timeout would fail.
    fn read_connections(&self) -> usize {
        let max = match self {
            Store::Postgres(pool) => pool.options().get_max_connections(),
            Store::Sqlite(pools) => pools.reader().options().get_max_connections(),
        };
        max as usize
    }

    async fn records_without_attempts(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_scalar(RECORDS_WITHOUT_ATTEMPTS).fetch_all(pool).await)?,
        )
    }
}

impl Store {
    /// PostgreSQL's plan for the export `filter` selects, under [`export_plan`]'s
    /// settings, as `EXPLAIN (SETTINGS)` prints it (the last line names the settings
    /// that differ from the server's defaults); `None` on SQLite. For tests that pin
    /// the plan.
    pub async fn explain_export(
        &self,
        filter: &ExportFilter,
    ) -> Result<Option<String>, StoreError> {
        let Store::Postgres(pool) = self else {
            return Ok(None);
        };
        let mut t = crate::store::pools::begin(pool, None).await?;
        sqlx::query(export_plan(filter)).execute(&mut *t).await?;
        let explain = sqlx::AssertSqlSafe(format!("EXPLAIN (SETTINGS) {EXPORT}"));
        let lines: Vec<String> = bind_filter!(sqlx::query_scalar(explain), filter.clone())
            .fetch_all(&mut *t)
            .await?;
        t.rollback().await?;
        Ok(Some(lines.join("\n")))
    }

    async fn send_verify_rows(
        &self,
        range: &KeyRange,
        tx: &tokio::sync::mpsc::Sender<Result<Vec<VerifyRow>, StoreError>>,
        spent: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<VerifyRow>>,
    ) -> Result<(), StoreError> {
        // A batch checked and given back, or a new one while none has come back yet
        // (at most the channel's 4, the one being checked and the one being filled).
        let mut next_batch = || {
            spent
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(VERIFY_BATCH))
        };
        macro_rules! send_batches {
            ($rows:expr) => {{
                let mut rows = $rows;
                let mut batch = next_batch();
                let mut filled = 0;
                while let Some(row) = rows.next().await {
                    let row = row?;
                    let cells = row.cells()?;
                    if filled == batch.len() {
                        // None has come back yet: a row of its own, overwritten as any.
                        let row = cells.to_row()?;
                        let detail = String::new();
                        batch.push(VerifyRow { row, detail });
                    }
                    decode_into(&cells, &mut batch[filled])?;
                    filled += 1;
                    if filled == VERIFY_BATCH {
                        batch.truncate(filled);
                        let full = std::mem::replace(&mut batch, next_batch());
                        filled = 0;
                        if tx.send(Ok(full)).await.is_err() {
                            return Ok(()); // the verifier stopped
                        }
                    }
                }
                if filled > 0 {
                    batch.truncate(filled);
                    let _ = tx.send(Ok(batch)).await;
                }
                Ok(())
            }};
        }
        // One text per kind of range, bound once; the backends differ in type only.
        macro_rules! query {
            () => {
                match &range.to {
                    Some(to) => sqlx::query(VERIFY)
                        .bind(range.from.as_str())
                        .bind(to.as_str()),
                    None => sqlx::query(VERIFY_TO_END).bind(range.from.as_str()),
                }
            };
        }
        match self {
            Store::Postgres(pool) => {
                let mut t = crate::store::pools::begin(pool, None).await?;
                sqlx::query(SERIAL_PLAN_POSTGRES).execute(&mut *t).await?;
                let mut checked = Checked::Yes;
                send_batches!(query!().fetch(&mut *t).map(|r| {
                    let row = RawExportRow::postgres(r?, checked);
                    checked = Checked::AsTheFirstRow;
                    Ok::<_, StoreError>(row)
                }))
            }
            Store::Sqlite(pools) => {
                send_batches!(query!().fetch(pools).map(|r| r.map(RawExportRow::from)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_row_is_decoded_in_the_order_the_selects_name_their_columns() {
        for select in [export_select!(), VERIFY, VERIFY_TO_END] {
            let list = select
                .strip_prefix("SELECT ")
                .and_then(|s| s.split(" FROM ").next())
                .unwrap();
            let names: Vec<&str> = list
                .split(", ")
                .map(|c| {
                    let name = c.split_whitespace().last().unwrap();
                    name.rsplit('.').next().unwrap()
                })
                .collect();
            assert_eq!(names, crate::export::COLUMNS, "{select}");
        }
    }

    #[test]
    fn only_a_whole_export_pins_the_index_join() {
        assert_eq!(export_plan(&ExportFilter::default()), SERIAL_PLAN_POSTGRES);
        let filtered = [
            ExportFilter {
                since: Some(chrono::Utc::now()),
                ..ExportFilter::default()
            },
            ExportFilter {
                tenant: Some("acme".into()),
                ..ExportFilter::default()
            },
            ExportFilter {
                business_ref: Some("order:A-88214".into()),
                ..ExportFilter::default()
            },
        ];
        for f in filtered {
            assert_eq!(export_plan(&f), FILTERED_EXPORT_POSTGRES, "{f:?}");
        }
    }
}
