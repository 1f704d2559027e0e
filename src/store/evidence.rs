//! The evidence tables: signed checkpoints, the head log's leaves, pruning receipts.
//!
//! A checkpoint reads what changed since the one before by position, never by a
//! table scan: pruning receipts by id, attempt rows in commit order from the tail
//! position the previous checkpoint stored (the tailer's rule, see [`super::tail`]:
//! on PostgreSQL only transactions older than every running one).

use super::{Store, StoreError, WritePool, on_pool};
use crate::evidence::port::{
    Checkpoint, CheckpointBody, EvidenceStore, Leaf, Leaves, NewCheckpoint, StoredCheckpoint,
};
use crate::tail::port::TailPosition;
use chrono::{DateTime, Utc};
use futures::stream::StreamExt;
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments};
use sqlx::types::Json;
use std::collections::BTreeMap;

#[cfg(test)]
const CHECKPOINT_COLUMNS: &str = "seq, version, created_at, tree_size, root_hash, prev_hash, \
    leaves_added, key_id, signature, hash, frontier, tail_txid, tail_id, pruned_id";

pub const LATEST_CHECKPOINT: &str = "SELECT seq, version, created_at, tree_size, root_hash, \
    prev_hash, leaves_added, key_id, signature, hash, frontier, tail_txid, tail_id, pruned_id \
    FROM evidence_checkpoints ORDER BY seq DESC LIMIT 1";
pub const ALL_CHECKPOINTS: &str = "SELECT seq, version, created_at, tree_size, root_hash, \
    prev_hash, leaves_added, key_id, signature, hash, frontier, tail_txid, tail_id, pruned_id \
    FROM evidence_checkpoints ORDER BY seq";
pub const CHECKPOINTS_BETWEEN: &str = "SELECT seq, version, created_at, tree_size, root_hash, \
    prev_hash, leaves_added, key_id, signature, hash, frontier, tail_txid, tail_id, pruned_id \
    FROM evidence_checkpoints WHERE seq > $1 AND seq < $2 ORDER BY seq";
pub const INSERT_CHECKPOINT: &str = "INSERT INTO evidence_checkpoints (seq, version, created_at, \
    tree_size, root_hash, prev_hash, leaves_added, key_id, signature, hash, frontier, tail_txid, \
    tail_id, pruned_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// The newest checkpoint's seq: whether the one a SQLite checkpoint read beside the
/// writer is still the newest ([`EvidenceStore::write_checkpoint`]).
pub const NEWEST_SEQ: &str = "SELECT seq FROM evidence_checkpoints ORDER BY seq DESC LIMIT 1";
/// Receipts written since the last checkpoint, by id.
pub const NEW_RECEIPTS: &str =
    "SELECT id, key, log_seq, log_hash FROM evidence_pruned WHERE id > $1 ORDER BY id";
/// Attempt rows after the stored position, in commit order (see the module comment).
pub const NEW_HEADS_POSTGRES: &str = "SELECT a.key, a.seq, a.hash, a.txid::text::bigint AS txid, \
    a.id FROM idempotency_attempts a \
    WHERE (a.txid, a.id) > ($1::bigint::text::xid8, $2) \
      AND a.txid < pg_snapshot_xmin(pg_current_snapshot()) \
    ORDER BY a.txid, a.id";
pub const NEW_HEADS_SQLITE: &str = "SELECT key, seq, hash, 0 AS txid, id \
    FROM idempotency_attempts WHERE id > $2 ORDER BY id";
/// Checkpoint writers on several replicas take turns (SQLite: BEGIN IMMEDIATE).
pub const LOCK_POSTGRES: &str = "SELECT pg_advisory_xact_lock(7310291844)";
/// A pruner holds the same lock, shared, from its receipts to its commit. Receipts
/// are read by id ([`NEW_RECEIPTS`]), and PostgreSQL numbers a row when it is
/// inserted, not when it commits: without the lock, a checkpoint could read a later
/// pruner's committed receipts, store the position past them, and never read an
/// earlier-numbered receipt that commits after it, whose key then never got its
/// tombstone leaf. With it, a checkpoint waits for every receipt already numbered to
/// commit, and a pruner's receipts wait for a checkpoint in progress (about a second
/// at 1,000 keys/s). SQLite numbers rows on its one writer, in commit order.
pub const RECEIPTS_LOCK_POSTGRES: &str = "SELECT pg_advisory_xact_lock_shared(7310291844)";

/// PostgreSQL: up to [`LEAVES_PER_STATEMENT`] of a checkpoint's leaves, from a JSON array.
pub const INSERT_LEAVES_POSTGRES: &str = "INSERT INTO evidence_leaves \
    (idx, checkpoint_seq, key, log_seq, log_hash, pruned) \
    SELECT idx, checkpoint_seq, key, log_seq, log_hash, pruned FROM jsonb_to_recordset($1::jsonb) AS \
    x(idx bigint, checkpoint_seq bigint, key text, log_seq bigint, log_hash text, pruned boolean)";
/// SQLite: [`SQLITE_LEAVES_PER_STATEMENT`] rows of six parameters, as one multi-row
/// `VALUES` ([`insert_leaves_sqlite`]). Twice as fast as extracting the columns from a
/// JSON array with `json_each` (~110 against ~250 ms for 48,000 leaves), and on SQLite
/// that time holds the writer that every guard call needs.
const INSERT_LEAVES_SQLITE: &str =
    "INSERT INTO evidence_leaves (idx, checkpoint_seq, key, log_seq, log_hash, pruned) VALUES ";

pub const LEAVES: &str = "SELECT idx, key, log_seq, log_hash, pruned FROM evidence_leaves \
    ORDER BY idx";
/// The leaves from $1 up to $2 (a checkpoint's size), for the hashes of its tree.
pub const LEAVES_BETWEEN: &str = "SELECT idx, key, log_seq, log_hash, pruned FROM evidence_leaves \
    WHERE idx >= $1 AND idx < $2 ORDER BY idx";
/// Block roots (`evidence_blocks`), from a JSON array of `{idx, hash}`. A block's root
/// never changes once its leaves are written, so a row already there is the same row.
pub const INSERT_BLOCKS_POSTGRES: &str = "INSERT INTO evidence_blocks (idx, hash) \
    SELECT idx, hash FROM jsonb_to_recordset($1::jsonb) AS x(idx bigint, hash text) \
    ON CONFLICT (idx) DO NOTHING";
/// `WHERE true`: SQLite's parser needs it between `SELECT … FROM` and an upsert clause.
pub const INSERT_BLOCKS_SQLITE: &str = "INSERT INTO evidence_blocks (idx, hash) \
    SELECT value->>'idx', value->>'hash' FROM json_each($1) WHERE true \
    ON CONFLICT (idx) DO NOTHING";
pub const BLOCKS_BELOW: &str = "SELECT idx, hash FROM evidence_blocks WHERE idx < $1 ORDER BY idx";
pub const BLOCK_COUNT_BELOW: &str = "SELECT count(*) FROM evidence_blocks WHERE idx < $1";
/// Each of some keys' newest leaf below a checkpoint's size (index `evidence_leaves_key`).
pub const NEWEST_LEAVES_POSTGRES: &str = "SELECT DISTINCT ON (key) idx, key, log_seq, log_hash, \
    pruned FROM evidence_leaves WHERE key = ANY($1) AND idx < $2 ORDER BY key, idx DESC";
/// SQLite takes the other columns of an aggregate query from the row that holds the max.
pub const NEWEST_LEAVES_SQLITE: &str = "SELECT max(idx) AS idx, key, log_seq, log_hash, pruned \
    FROM evidence_leaves WHERE key IN (SELECT value FROM json_each($1)) AND idx < $2 \
    GROUP BY key";
pub const RECEIPT_OF_KEY: &str = "SELECT log_seq, log_hash FROM evidence_pruned \
    WHERE key = $1 ORDER BY log_seq DESC LIMIT 1";
pub const PRUNE_RECEIPTS_POSTGRES: &str = "INSERT INTO evidence_pruned \
    (key, log_seq, log_hash, status, pruned_at) \
    SELECT key, log_seq, log_hash, status, $2 FROM idempotency_records WHERE key = ANY($1)";
pub const PRUNE_RECEIPTS_SQLITE: &str = "INSERT INTO evidence_pruned \
    (key, log_seq, log_hash, status, pruned_at) \
    SELECT key, log_seq, log_hash, status, $2 FROM idempotency_records \
    WHERE key IN (SELECT value FROM json_each($1))";

#[derive(sqlx::FromRow)]
struct CheckpointDb {
    seq: i64,
    version: i32,
    created_at: DateTime<Utc>,
    tree_size: i64,
    root_hash: String,
    prev_hash: String,
    leaves_added: i64,
    key_id: String,
    signature: String,
    hash: String,
    frontier: Json<Vec<String>>,
    tail_txid: i64,
    tail_id: i64,
    pruned_id: i64,
}

impl From<CheckpointDb> for StoredCheckpoint {
    fn from(r: CheckpointDb) -> Self {
        StoredCheckpoint {
            checkpoint: Checkpoint {
                body: CheckpointBody {
                    version: r.version as u32,
                    seq: r.seq as u64,
                    created_at: r.created_at,
                    tree_size: r.tree_size as u64,
                    root_hash: r.root_hash,
                    prev_hash: r.prev_hash,
                    leaves_added: r.leaves_added as u64,
                    key_id: r.key_id,
                },
                signature: r.signature,
                hash: r.hash,
            },
            frontier: r.frontier.0,
            tail: TailPosition {
                txid: r.tail_txid,
                id: r.tail_id,
            },
            pruned_id: r.pruned_id,
        }
    }
}

#[derive(sqlx::FromRow)]
struct HeadDb {
    key: String,
    seq: i64,
    hash: String,
    txid: i64,
    id: i64,
}

#[derive(sqlx::FromRow)]
struct ReceiptDb {
    id: i64,
    key: String,
    log_seq: i64,
    log_hash: String,
}

#[derive(sqlx::FromRow)]
struct LeafDb {
    idx: i64,
    key: String,
    log_seq: i64,
    log_hash: String,
    pruned: bool,
}

impl LeafDb {
    fn into_pair(self) -> (u64, Leaf) {
        (
            self.idx as u64,
            Leaf {
                key: self.key,
                log_seq: self.log_seq,
                log_hash: self.log_hash,
                pruned: self.pruned,
            },
        )
    }
}

/// What changed since the last checkpoint: the leaves to append, tombstones first
/// (a key pruned and claimed again in one interval ends live), each group by key.
fn leaves_of(receipts: Vec<ReceiptDb>, live: BTreeMap<String, Leaf>) -> Vec<Leaf> {
    let mut pruned: BTreeMap<String, Leaf> = BTreeMap::new();
    for r in receipts {
        pruned.insert(
            r.key.clone(),
            Leaf {
                key: r.key,
                log_seq: r.log_seq,
                log_hash: r.log_hash,
                pruned: true,
            },
        );
    }
    pruned.into_values().chain(live.into_values()).collect()
}

/// Leaves a statement of [`Store::write_checkpoint`] inserts. A minute at 1,000 keys/s
/// is ~100,000 leaves: in one statement, its ~15 MB of JSON were built and encoded
/// in one go on a worker of the runtime, and the guard's calls queued behind it
/// (docs/PERFORMANCE.md, "A checkpoint that stalled the guard"). The JSON is now made
/// off the runtime's workers, before the writer is taken ([`Changes::sign`]); the
/// statements stay 5,000 leaves each, so that neither database parses a document of
/// every leaf at once.
const LEAVES_PER_STATEMENT: usize = 5_000;

/// Leaves a SQLite insert statement takes: 6,000 parameters, under SQLite's 32,766.
const SQLITE_LEAVES_PER_STATEMENT: usize = 1_000;

/// One SQLite insert of `rows` leaves ([`INSERT_LEAVES_SQLITE`]), bound.
fn insert_leaves_sqlite(rows: &[LeafRow<'_>]) -> Query<'static, Sqlite, SqliteArguments> {
    let mut sql = String::from(INSERT_LEAVES_SQLITE);
    for n in 0..rows.len() {
        sql.push_str(if n == 0 {
            "(?, ?, ?, ?, ?, ?)"
        } else {
            ", (?, ?, ?, ?, ?, ?)"
        });
    }
    // Only placeholders are added to the text; every value is a parameter.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for r in rows {
        query = query
            .bind(r.idx)
            .bind(r.checkpoint_seq as i64)
            .bind(r.key.to_owned())
            .bind(r.log_seq)
            .bind(r.log_hash.to_owned())
            .bind(r.pruned);
    }
    query
}

/// One leaf as the insert statements take it (PostgreSQL's `jsonb_to_recordset`, SQLite's
/// bound `VALUES`).
#[derive(serde::Serialize)]
struct LeafRow<'a> {
    idx: i64,
    checkpoint_seq: u64,
    key: &'a str,
    log_seq: i64,
    log_hash: &'a str,
    pruned: bool,
}

fn block_rows(blocks: &[(u64, String)]) -> Vec<serde_json::Value> {
    blocks
        .iter()
        .map(|(idx, hash)| serde_json::json!({ "idx": idx, "hash": hash }))
        .collect()
}

/// Inserts a stored checkpoint on an open transaction.
macro_rules! insert_checkpoint {
    ($tx:expr, $s:expr) => {{
        let s: &StoredCheckpoint = $s;
        let b = &s.checkpoint.body;
        sqlx::query(INSERT_CHECKPOINT)
            .bind(b.seq as i64)
            .bind(b.version as i32)
            .bind(b.created_at)
            .bind(b.tree_size as i64)
            .bind(&b.root_hash)
            .bind(&b.prev_hash)
            .bind(b.leaves_added as i64)
            .bind(&b.key_id)
            .bind(&s.checkpoint.signature)
            .bind(&s.checkpoint.hash)
            .bind(Json(&s.frontier))
            .bind(s.tail.txid)
            .bind(s.tail.id)
            .bind(s.pruned_id)
            .execute($tx)
            .await?;
    }};
}

/// What changed since the last checkpoint, read in one snapshot ([`read_changes!`]).
struct Changes {
    last: Option<StoredCheckpoint>,
    /// Tombstones first, then live heads, each group by key ([`leaves_of`]).
    leaves: Vec<Leaf>,
    /// Where the next checkpoint continues.
    tail: TailPosition,
    pruned_id: i64,
}

/// Reads [`Changes`] on an open transaction (one snapshot): the last checkpoint, the
/// receipts and the attempt rows after its positions.
macro_rules! read_changes {
    ($tx:ident, $heads_sql:expr) => {{
        let last: Option<StoredCheckpoint> = sqlx::query_as::<_, CheckpointDb>(LATEST_CHECKPOINT)
            .fetch_optional(&mut *$tx)
            .await?
            .map(Into::into);
        let (tail, pruned_id) = last
            .as_ref()
            .map_or((TailPosition { txid: 0, id: 0 }, 0), |l| {
                (l.tail, l.pruned_id)
            });
        let receipts: Vec<ReceiptDb> = sqlx::query_as(NEW_RECEIPTS)
            .bind(pruned_id)
            .fetch_all(&mut *$tx)
            .await?;
        // Streamed and folded to one head per key: memory follows the keys changed,
        // not the rows (the first checkpoint reads the whole log once).
        let mut live: BTreeMap<String, Leaf> = BTreeMap::new();
        let mut next_tail = tail;
        {
            let mut rows = sqlx::query_as::<_, HeadDb>($heads_sql)
                .bind(tail.txid)
                .bind(tail.id)
                .fetch(&mut *$tx);
            while let Some(h) = rows.next().await {
                let h = h?;
                next_tail = next_tail.max(TailPosition {
                    txid: h.txid,
                    id: h.id,
                });
                let newer = live.get(&h.key).is_none_or(|l| h.seq > l.log_seq);
                if newer {
                    live.insert(
                        h.key.clone(),
                        Leaf {
                            key: h.key,
                            log_seq: h.seq,
                            log_hash: h.hash,
                            pruned: false,
                        },
                    );
                }
            }
        }
        Changes {
            last,
            tail: next_tail,
            pruned_id: receipts.last().map_or(pruned_id, |r| r.id),
            leaves: leaves_of(receipts, live),
        }
    }};
}

/// The statements that append a signed checkpoint, made before the writer is taken
/// ([`Changes::sign`]).
struct Signed<L> {
    stored: StoredCheckpoint,
    /// The leaves' insert statements, in order, as the backend takes them.
    leaves: Vec<L>,
    /// The blocks completed, as `{idx, hash}` rows; `None` when there are none.
    blocks: Option<String>,
}

impl Changes {
    /// The signed checkpoint for these changes and its statements (`make` signs, see
    /// [`Store::write_checkpoint`]); `None` when nothing changed. The leaves go
    /// `per_statement` to a statement, each made by `encode`.
    fn sign<F, L>(
        self,
        make: &F,
        per_statement: usize,
        encode: impl Fn(&[LeafRow<'_>]) -> Result<L, StoreError>,
    ) -> Result<Option<Signed<L>>, StoreError>
    where
        F: Fn(Option<&StoredCheckpoint>, &[Leaf]) -> Result<NewCheckpoint, StoreError>,
    {
        if self.leaves.is_empty() {
            return Ok(None);
        }
        let NewCheckpoint {
            checkpoint,
            frontier,
            blocks,
        } = make(self.last.as_ref(), &self.leaves)?;
        let first_idx = self
            .last
            .as_ref()
            .map_or(0, |l| l.checkpoint.body.tree_size) as i64;
        // 100,000 leaves are ~15 MB of JSON (PostgreSQL) or 600,000 parameters
        // (SQLite): tens of milliseconds of one core.
        let leaves = crate::base::runtime::cpu_bound(|| {
            self.leaves
                .chunks(per_statement)
                .enumerate()
                .map(|(n, chunk)| {
                    let offset = first_idx + (n * per_statement) as i64;
                    let rows: Vec<LeafRow<'_>> = chunk
                        .iter()
                        .enumerate()
                        .map(|(i, l)| LeafRow {
                            idx: offset + i as i64,
                            checkpoint_seq: checkpoint.body.seq,
                            key: &l.key,
                            log_seq: l.log_seq,
                            log_hash: &l.log_hash,
                            pruned: l.pruned,
                        })
                        .collect();
                    encode(&rows)
                })
                .collect::<Result<_, _>>()
        })?;
        let blocks = (!blocks.is_empty())
            .then(|| to_json(&block_rows(&blocks)))
            .transpose()?;
        Ok(Some(Signed {
            stored: StoredCheckpoint {
                checkpoint,
                frontier,
                tail: self.tail,
                pruned_id: self.pruned_id,
            },
            leaves,
            blocks,
        }))
    }
}

fn checkpoints_of(rows: Vec<CheckpointDb>) -> Vec<Checkpoint> {
    rows.into_iter()
        .map(|r| StoredCheckpoint::from(r).checkpoint)
        .collect()
}

fn to_json<T: serde::Serialize + ?Sized>(rows: &T) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Other(format!("checkpoint rows: {e}")))
}

/// Appends a [`Signed`] checkpoint on an open write transaction and commits it.
macro_rules! append_signed {
    ($tx:ident, $signed:expr, |$rows:ident| $insert:expr, $blocks_sql:expr) => {{
        let Signed {
            stored,
            leaves,
            blocks,
        } = $signed;
        for $rows in leaves {
            $insert.execute(&mut *$tx).await?;
        }
        if let Some(rows) = blocks {
            sqlx::query($blocks_sql)
                .bind(rows)
                .execute(&mut *$tx)
                .await?;
        }
        insert_checkpoint!(&mut *$tx, &stored);
        $tx.commit().await?;
        stored
    }};
}

/// Times a SQLite checkpoint writer reads the changes again when another writer (another
/// process on the same file) appended a checkpoint between its read and its write.
const SQLITE_CHECKPOINT_TRIES: usize = 3;

impl EvidenceStore for Store {
    /// PostgreSQL reads and writes in one transaction under the checkpoint writers'
    /// lock. On a SQLite file the changes are read and signed on a reader, in one
    /// snapshot, and only the inserts take the one writer that every guard call needs
    /// (a minute at 1,000 keys/s held it ~1 s; docs/PERFORMANCE.md, "A SQLite
    /// checkpoint beside the writer"). That is the same as reading them under the
    /// writer, because SQLite numbers attempt rows and receipts (`AUTOINCREMENT`) on
    /// its one writer, in commit order: a snapshot holds every row up to some id and
    /// none after, so the positions it stores skip nothing, and a row committed after
    /// the snapshot is past them, for the next checkpoint. What is checked under the
    /// writer is that the checkpoint read is still the newest; if another writer
    /// appended one meanwhile, the changes are read again.
    async fn write_checkpoint<F>(&self, make: F) -> Result<Option<StoredCheckpoint>, StoreError>
    where
        F: Fn(Option<&StoredCheckpoint>, &[Leaf]) -> Result<NewCheckpoint, StoreError> + Send,
    {
        match self {
            Store::Postgres(pool) => {
                let mut tx = pool.begin_write().await?;
                sqlx::query(LOCK_POSTGRES).execute(&mut *tx).await?;
                let changes = read_changes!(tx, NEW_HEADS_POSTGRES);
                let Some(signed) =
                    changes.sign(&make, LEAVES_PER_STATEMENT, |rows| to_json(rows))?
                else {
                    return Ok(None);
                };
                Ok(Some(append_signed!(
                    tx,
                    signed,
                    |rows| sqlx::query(INSERT_LEAVES_POSTGRES).bind(rows),
                    INSERT_BLOCKS_POSTGRES
                )))
            }
            Store::Sqlite(pools) if pools.reads_beside_writer() => {
                for _ in 0..SQLITE_CHECKPOINT_TRIES {
                    let changes = {
                        let mut tx = crate::store::pools::begin(pools.reader(), None).await?;
                        let changes = read_changes!(tx, NEW_HEADS_SQLITE);
                        tx.rollback().await?;
                        changes
                    };
                    let read_seq = changes.last.as_ref().map(|l| l.checkpoint.body.seq as i64);
                    let Some(signed) =
                        changes.sign(&make, SQLITE_LEAVES_PER_STATEMENT, |rows| {
                            Ok(insert_leaves_sqlite(rows))
                        })?
                    else {
                        return Ok(None);
                    };
                    let mut tx = pools.begin_write().await?;
                    let newest: Option<i64> = sqlx::query_scalar(NEWEST_SEQ)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if newest != read_seq {
                        tx.rollback().await?;
                        continue;
                    }
                    return Ok(Some(append_signed!(
                        tx,
                        signed,
                        |insert| insert,
                        INSERT_BLOCKS_SQLITE
                    )));
                }
                Err(StoreError::Conflict(format!(
                    "another checkpoint writer appended a checkpoint during each of {SQLITE_CHECKPOINT_TRIES} tries"
                )))
            }
            // In memory: the reads under the writer, as on PostgreSQL.
            Store::Sqlite(pools) => {
                let mut tx = pools.begin_write().await?;
                let changes = read_changes!(tx, NEW_HEADS_SQLITE);
                let Some(signed) = changes.sign(&make, SQLITE_LEAVES_PER_STATEMENT, |rows| {
                    Ok(insert_leaves_sqlite(rows))
                })?
                else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                Ok(Some(append_signed!(
                    tx,
                    signed,
                    |insert| insert,
                    INSERT_BLOCKS_SQLITE
                )))
            }
        }
    }

    async fn latest_checkpoint(&self) -> Result<Option<StoredCheckpoint>, StoreError> {
        let row: Option<CheckpointDb> =
            on_pool!(self, pool => sqlx::query_as(LATEST_CHECKPOINT).fetch_optional(pool).await)?;
        Ok(row.map(Into::into))
    }

    async fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let rows: Vec<CheckpointDb> =
            on_pool!(self, pool => sqlx::query_as(ALL_CHECKPOINTS).fetch_all(pool).await)?;
        Ok(checkpoints_of(rows))
    }

    async fn checkpoints_between(
        &self,
        after: u64,
        before: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let rows: Vec<CheckpointDb> = on_pool!(self, pool => sqlx::query_as(CHECKPOINTS_BETWEEN)
            .bind(after as i64)
            .bind(before as i64)
            .fetch_all(pool)
            .await)?;
        Ok(checkpoints_of(rows))
    }

    fn checkpoint_leaves(&self) -> Leaves<'_> {
        on_pool!(self, pool => sqlx::query_as::<_, LeafDb>(LEAVES)
            .fetch(pool)
            .map(|r| r.map_err(StoreError::from).map(LeafDb::into_pair))
            .boxed())
    }

    fn checkpoint_leaves_between(&self, from: u64, to: u64) -> Leaves<'_> {
        on_pool!(self, pool => sqlx::query_as::<_, LeafDb>(LEAVES_BETWEEN)
            .bind(from as i64)
            .bind(to as i64)
            .fetch(pool)
            .map(|r| r.map_err(StoreError::from).map(LeafDb::into_pair))
            .boxed())
    }

    async fn checkpoint_blocks(&self, count: u64) -> Result<Vec<(u64, String)>, StoreError> {
        let rows: Vec<(i64, String)> = on_pool!(self, pool => sqlx::query_as(BLOCKS_BELOW)
            .bind(count as i64)
            .fetch_all(pool)
            .await)?;
        Ok(rows.into_iter().map(|(i, h)| (i as u64, h)).collect())
    }

    async fn checkpoint_block_count(&self, count: u64) -> Result<u64, StoreError> {
        let n: i64 = on_pool!(self, pool => sqlx::query_scalar(BLOCK_COUNT_BELOW)
            .bind(count as i64)
            .fetch_one(pool)
            .await)?;
        Ok(n as u64)
    }

    async fn insert_checkpoint_blocks(&self, blocks: &[(u64, String)]) -> Result<(), StoreError> {
        if blocks.is_empty() {
            return Ok(());
        }
        let sql = self
            .backend()
            .pick(INSERT_BLOCKS_POSTGRES, INSERT_BLOCKS_SQLITE);
        // As text, as a checkpoint binds it: sqlx prepares a statement once per
        // connection, with the parameter types of its first use, and a `jsonb` value
        // sent to a statement prepared for text fails on PostgreSQL.
        let rows = to_json(&block_rows(blocks))?;
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query(sql).bind(rows).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    async fn newest_leaves(
        &self,
        keys: &[String],
        size: u64,
    ) -> Result<Vec<(u64, Leaf)>, StoreError> {
        let rows: Vec<LeafDb> = match self {
            Store::Postgres(pool) => {
                sqlx::query_as(NEWEST_LEAVES_POSTGRES)
                    .bind(keys)
                    .bind(size as i64)
                    .fetch_all(pool)
                    .await?
            }
            Store::Sqlite(pool) => {
                sqlx::query_as(NEWEST_LEAVES_SQLITE)
                    .bind(Json(keys))
                    .bind(size as i64)
                    .fetch_all(pool)
                    .await?
            }
        };
        Ok(rows.into_iter().map(LeafDb::into_pair).collect())
    }

    async fn pruning_receipt(&self, key: &str) -> Result<Option<(i64, String)>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(RECEIPT_OF_KEY).bind(key).fetch_optional(pool).await)?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_name_every_checkpoint_column() {
        for sql in [LATEST_CHECKPOINT, ALL_CHECKPOINTS, CHECKPOINTS_BETWEEN] {
            assert!(sql.contains(CHECKPOINT_COLUMNS), "{sql}");
        }
    }
}
