//! SQLite's one writer, made explicit.
//!
//! SQLite lets one connection write at a time. With every connection of one pool
//! free to `BEGIN IMMEDIATE`, the losers of the write lock wait in SQLite's busy
//! handler, which *sleeps* (backing off up to 100 ms a try), so a few concurrent
//! guard calls had a p99 of 100 ms and more. So a store on a SQLite file holds two
//! pools:
//!
//! - `write`: **one** connection. Every write transaction of this crate is opened by
//!   [`WritePool::begin_write`] on it, with `BEGIN IMMEDIATE`: writers queue for the
//!   connection in sqlx's pool (first come, first served) instead of sleeping in the
//!   busy handler, and the write lock is never contended from inside this process.
//! - `read`: the configured number of connections for everything else. In WAL mode
//!   readers never wait for the writer.
//!
//! Another process on the same file (two `serve`, a CLI command next to `serve`) is
//! still arbitrated by SQLite: the busy timeout stays the cross-process fallback, and
//! a writer waits in the queue as long as the busy handler would have.
//!
//! A `&SqlitePools` is an [`Executor`] over the read pool (so a plain query runs on a
//! reader) and derefs to the read pool. An autocommit write through it is still
//! correct — it takes the write lock like any connection — but may wait in the busy
//! handler; the crate's own writes all use transactions.

use super::StoreError;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::sqlite::{
    Sqlite, SqlitePool, SqliteQueryResult, SqliteRow, SqliteStatement, SqliteTypeInfo,
};
use sqlx::{Describe, Either, Error, Execute, Executor, SqlStr, Transaction};
use std::future::Future;

/// Opens a write transaction: the one place that says how each backend starts one.
/// Every write transaction of the crate begins here, inside an `on_pool!` body that
/// is written once for both backends; the body ends it with the transaction's own
/// `commit` or `rollback`, or drops it to roll back.
pub trait WritePool {
    type Tx: std::ops::DerefMut + Send;
    fn begin_write(&self) -> impl Future<Output = Result<Self::Tx, StoreError>> + Send;
}

/// Begins a transaction on `pool` with `statement` (`None`: the backend's plain
/// `BEGIN`): every transaction of the store begins here.
///
/// The BEGIN runs on a task of its own, which finishes it even if the caller is
/// dropped meanwhile (an aborted worker, an HTTP client that went away, a timeout, a
/// cancelled export): sqlx 0.9's PostgreSQL `begin` is not cancellation-safe. Dropped
/// after sending BEGIN and before reading the answer, it counts no transaction, so
/// nothing rolls it back, and the connection goes back to the pool *inside* an open
/// transaction. Every "autocommit" statement its next users send (the claim and the
/// settle, records.rs) then reports success without committing: a claim or a DONE that
/// other connections never see, held row locks, and all of it rolled back by the first
/// ROLLBACK on that connection (found by `guard_random`;
/// tests/it/guard_cancelled_begin.rs). Finished on its own task, the transaction
/// exists as sqlx counts it, and dropping it rolls it back. SQLite's driver finishes
/// its BEGIN on its own worker thread already; it goes the same way for one rule.
pub(crate) async fn begin<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, DB>, StoreError> {
    let pool = pool.clone();
    let begun = tokio::spawn(async move {
        match statement {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
    });
    match begun.await {
        Ok(begun) => Ok(begun?),
        Err(e) => Err(StoreError::Other(format!("BEGIN task failed: {e}"))),
    }
}

/// PostgreSQL: a plain READ COMMITTED transaction. A statement that must hold what it
/// read takes its own row lock (`FOR UPDATE`, `FOR UPDATE SKIP LOCKED`).
impl WritePool for PgPool {
    type Tx = Transaction<'static, Postgres>;
    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        begin(self, None).await
    }
}

/// SQLite: `BEGIN IMMEDIATE` on the one writer, so the write lock is held from the
/// first statement. A deferred transaction that reads and then writes would take the
/// lock at its first write, and fail with SQLITE_BUSY (no busy-handler wait) if
/// another connection wrote since its read; holding the lock from the start also
/// makes the guard's locked read (no `FOR UPDATE` in SQLite) a real lock, and the
/// clock read after `begin_write` returns is read under it.
impl WritePool for SqlitePools {
    type Tx = Transaction<'static, Sqlite>;
    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        begin(&self.write, Some("BEGIN IMMEDIATE")).await
    }
}

/// The one writer's connection lent outside a transaction
/// ([`SqlitePools::lend_writer`]): derefs to the connection.
pub type Loan = PoolConnection<Sqlite>;

#[derive(Debug, Clone)]
pub struct SqlitePools {
    read: SqlitePool,
    write: SqlitePool,
    /// A database file in WAL mode; not an in-memory one (one pool for both).
    in_wal: bool,
}

impl SqlitePools {
    /// `write` should have exactly one connection. An in-memory database, which each
    /// pool would otherwise see its own copy of, passes the same pool twice and
    /// `in_wal = false`.
    pub(super) fn new(read: SqlitePool, write: SqlitePool, in_wal: bool) -> Self {
        Self {
            read,
            write,
            in_wal,
        }
    }

    /// The one writer outside any transaction, in its turn (migrations, tests). Writes
    /// wait until it is dropped.
    pub async fn lend_writer(&self) -> Result<Loan, StoreError> {
        Ok(self.write.acquire().await?)
    }

    pub fn reader(&self) -> &SqlitePool {
        &self.read
    }

    /// Whether a read transaction on [`SqlitePools::reader`] is a snapshot beside the
    /// writer: a database file, in WAL mode. In memory (shared cache), a reader and
    /// the writer lock each other's tables instead.
    pub(crate) fn reads_beside_writer(&self) -> bool {
        self.in_wal
    }

    /// How many connections the writer's pool holds: one.
    pub fn write_connections(&self) -> u32 {
        self.write.size()
    }

    pub async fn close(&self) {
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
