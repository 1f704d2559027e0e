//! SQLite's one writer, made explicit.
//!
//! SQLite lets one connection write at a time. With every connection of one pool
//! free to `BEGIN IMMEDIATE`, the losers of the write lock wait in SQLite's busy
//! handler, which *sleeps* (backing off up to 100 ms a try): at 8 concurrent guard
//! calls the p99 was 100–130 ms and at 32 up to 1 s of sleeping
//! (docs/PERFORMANCE.md). So a store on a SQLite file holds two pools:
//!
//! - `write`: **one** connection. Every write transaction of this crate is opened by
//!   [`WritePool::begin_write`] and goes here: writers queue for it (a FIFO of async
//!   waiters) instead of sleeping in the busy handler, the write lock is never
//!   contended from inside this process, and the writes queued together share one
//!   commit, each after the first in a savepoint of its own (group_commit.rs).
//! - `read`: the configured number of connections for everything else. In WAL mode
//!   readers never wait for the writer.
//!
//! Another process on the same file (two `serve`, a CLI command next to `serve`) is
//! still arbitrated by SQLite: the busy timeout stays the cross-process fallback,
//! and the writer's queue waits as long as the busy handler would have.
//!
//! A `&SqlitePools` is an [`Executor`] over the read pool (so a plain query runs on a
//! reader) and derefs to the read pool. An autocommit write through it is still
//! correct — it takes the write lock like any connection — but may wait in the busy
//! handler; the crate's own writes all use transactions.

use super::StoreError;
use super::group_commit::{GroupCommit, Loan, Opening, WriteTx};
use super::wal::Checkpointer;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqlitePool, SqliteQueryResult, SqliteRow, SqliteStatement,
    SqliteTypeInfo,
};
use sqlx::{Describe, Either, Error, Execute, Executor, SqlStr, Transaction};
use std::future::Future;
use std::sync::Arc;

/// Opens a write transaction: the one place that says how each backend starts one.
/// Every write transaction of the crate begins here, inside an `on_pool!` body that
/// is written once for both backends; the body ends it with the transaction's own
/// `commit` or `rollback`, or drops it to roll back.
pub trait WritePool {
    type Tx: std::ops::DerefMut + Send;
    fn begin_write(&self) -> impl Future<Output = Result<Self::Tx, StoreError>> + Send;
}

/// PostgreSQL: a plain READ COMMITTED transaction. A statement that must hold what it
/// read takes its own row lock (`FOR UPDATE`, `FOR UPDATE SKIP LOCKED`).
impl WritePool for PgPool {
    type Tx = Transaction<'static, Postgres>;
    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        Ok(self.begin().await?)
    }
}

/// SQLite: the one writer's batch or a savepoint in it. The batch began with
/// `BEGIN IMMEDIATE`, so the write lock is held from the first statement. A deferred
/// transaction that reads and then writes would take the lock at its first write, and
/// fail with SQLITE_BUSY (no busy-handler wait) if another connection wrote since its
/// read; holding the lock from the start also makes the locked read of the guard (no
/// `FOR UPDATE` in SQLite) a real lock.
impl WritePool for SqlitePools {
    type Tx = WriteTx;
    async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        self.group.begin().await
    }
}

#[derive(Debug, Clone)]
pub struct SqlitePools {
    read: SqlitePool,
    write: SqlitePool,
    /// The write transactions' queue for `write`, and their shared commits.
    group: GroupCommit,
    /// The WAL checkpointer of a database file (wal.rs); none in memory, where there
    /// is no WAL.
    wal: Option<Arc<Checkpointer>>,
}

impl SqlitePools {
    /// `write` should have exactly one connection; an in-memory database, which each
    /// pool would otherwise see its own copy of, passes the same pool twice. A
    /// database file has WAL checkpoints, run on a connection of their own opened
    /// with `checkpoints` (wal.rs); one in memory has no WAL.
    pub(super) async fn new(
        read: SqlitePool,
        write: SqlitePool,
        checkpoints: Option<&SqliteConnectOptions>,
    ) -> Result<Self, Error> {
        let group = GroupCommit::new(write.clone());
        let wal = match checkpoints {
            Some(options) => Some(Arc::new(Checkpointer::start(options, group.clone()).await?)),
            None => None,
        };
        Ok(Self {
            read,
            write,
            group,
            wal,
        })
    }

    /// A write call that sends its savepoint, when it joins the writer's batch, with
    /// its first statement (group_commit.rs, [`Opening`]).
    pub(super) async fn begin_deferred(&self) -> Result<Opening, StoreError> {
        self.group.begin_deferred().await
    }

    /// [`SqlitePools::begin_deferred`] for a call whose first statement carries
    /// nothing read before the write lock: a call that opens the writer's batch sends
    /// its `BEGIN IMMEDIATE` with that statement too (group_commit.rs).
    pub(super) async fn begin_on_first_statement(&self) -> Result<Opening, StoreError> {
        self.group.begin_on_first_statement().await
    }

    /// The one writer outside any batch, in its turn (migrations; the benchmarks'
    /// measurements of the connection itself). Writes wait until it is dropped.
    pub async fn lend_writer(&self) -> Result<Loan, StoreError> {
        Ok(self.group.lend().await?)
    }

    pub fn reader(&self) -> &SqlitePool {
        &self.read
    }

    /// Whether a read transaction on [`SqlitePools::reader`] is a snapshot beside the
    /// writer: a database file, in WAL mode. In memory (shared cache), a reader and
    /// the writer lock each other's tables instead.
    pub fn reads_beside_writer(&self) -> bool {
        self.wal.is_some()
    }

    /// How many connections the writer's pool holds: one, kept by the writers' queue
    /// (group_commit.rs). Statements on the writer go through
    /// [`SqlitePools::lend_writer`] or a write transaction, never the pool directly,
    /// where they would wait for a connection the queue does not give back.
    pub fn write_connections(&self) -> u32 {
        self.write.size()
    }

    pub async fn close(&self) {
        // First the checkpointer, which may be waiting for the writer.
        if let Some(wal) = &self.wal {
            wal.stop().await;
        }
        // The writer's queue keeps the connection between batches.
        self.group.release().await;
        self.write.close().await;
        self.read.close().await;
    }
}

impl std::ops::Deref for SqlitePools {
    type Target = SqlitePool;
    fn deref(&self) -> &SqlitePool {
        &self.read
    }
}

impl<'p> Executor<'p> for &'p SqlitePools {
    type Database = Sqlite;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<SqliteQueryResult, SqliteRow>, Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Sqlite>,
    {
        self.read.fetch_many(query)
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<SqliteRow>, Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Sqlite>,
    {
        self.read.fetch_optional(query)
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [SqliteTypeInfo],
    ) -> BoxFuture<'e, Result<SqliteStatement, Error>>
    where
        'p: 'e,
    {
        self.read.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<Sqlite>, Error>>
    where
        'p: 'e,
    {
        self.read.describe(sql)
    }
}
