//! The writer's connection, and the transaction a batch of calls shares on it.
//!
//! A batch sends its `BEGIN IMMEDIATE`, `COMMIT` and `ROLLBACK` itself instead of
//! using sqlx's transactions, for two reasons, each a hand-off to the connection's
//! thread saved per batch (~50–110 µs on a small VM, with every queued writer
//! waiting; docs/PERFORMANCE.md):
//! - a call that opens a batch may send the `BEGIN` in one batch of statements with
//!   its own first ([`super::Opening::execute`]);
//! - the connection stays with the writers' queue between batches ([`Idle`]).
//!   Returned to sqlx's pool after each batch, it was pinged on its way back, and the
//!   next batch waited for that ping and for the task that ran it.
//!
//! What sqlx's transactions did for safety is done here: a batch that ends without
//! a successful `COMMIT` or `ROLLBACK` (a failure, a dropped future) is rolled back
//! before anyone else gets the connection, and a connection that failed is not kept
//! but handed back to the pool, which tests it and opens another if it is broken.

use sqlx::Error;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{Sqlite, SqliteConnection, SqlitePool};

/// What opens a batch: the write lock from the transaction's first statement, so the
/// reads in it are locked reads and a `COMMIT` never meets SQLITE_BUSY.
macro_rules! begin_batch {
    () => {
        "BEGIN IMMEDIATE"
    };
}
pub(crate) use begin_batch;

/// The writer's connection between batches: taken by the batch that opens, given back
/// by the one that ends well.
#[derive(Debug, Default)]
pub(super) struct Idle(Option<PoolConnection<Sqlite>>);

impl Idle {
    /// The connection, from here or (the first time, or after a failure) from `pool`.
    pub(super) async fn take(
        &mut self,
        pool: &SqlitePool,
    ) -> Result<PoolConnection<Sqlite>, Error> {
        match self.0.take() {
            Some(conn) => Ok(conn),
            None => pool.acquire().await,
        }
    }

    /// The connection kept, if it is here: for work that needs the writer outside a
    /// batch.
    pub(super) fn get(&mut self) -> Option<&mut SqliteConnection> {
        self.0.as_deref_mut()
    }

    pub(super) fn get_ref(&self) -> Option<&SqliteConnection> {
        self.0.as_deref()
    }

    /// Keeps the connection of a batch that ended well.
    pub(super) fn put(&mut self, conn: PoolConnection<Sqlite>) {
        self.0 = Some(conn);
    }

    /// Puts the connection back, or takes it from the pool first.
    pub(super) async fn fill(&mut self, pool: &SqlitePool) -> Result<(), Error> {
        let conn = self.take(pool).await?;
        self.0 = Some(conn);
        Ok(())
    }

    /// Gives the connection back to the pool (the store closing).
    pub(super) fn release(&mut self) {
        if let Some(conn) = self.0.take() {
            release(conn);
        }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.release();
    }
}

/// A batch: the connection and whether it may be inside the batch's transaction.
#[derive(Debug)]
pub(super) struct Batch {
    /// Taken by a batch that ended well, to be kept; otherwise dropped with the batch.
    conn: Option<PoolConnection<Sqlite>>,
    /// The connection may be inside the transaction: from the statement that sends
    /// `BEGIN IMMEDIATE` until a `COMMIT` or `ROLLBACK` succeeds.
    open: bool,
}

impl Batch {
    /// A batch on `conn`, not begun.
    pub(super) fn new(conn: PoolConnection<Sqlite>) -> Self {
        Self {
            conn: Some(conn),
            open: false,
        }
    }

    pub(super) fn connection(&mut self) -> &mut SqliteConnection {
        self.conn
            .as_deref_mut()
            .expect("a batch holds its connection")
    }

    pub(super) fn connection_ref(&self) -> &SqliteConnection {
        self.conn.as_deref().expect("a batch holds its connection")
    }

    /// `BEGIN IMMEDIATE` on its own, for a call that runs statements at once. One
    /// that fails began nothing (SQLite leaves the connection in autocommit).
    pub(super) async fn begin(&mut self) -> Result<(), Error> {
        sqlx::raw_sql(begin_batch!())
            .execute(self.connection())
            .await?;
        self.open = true;
        Ok(())
    }

    /// A statement that begins the transaction is about to be sent with a call's
    /// first: from here the connection may be inside it.
    pub(super) fn beginning(&mut self) {
        self.open = true;
    }

    /// That statement's `BEGIN` failed: nothing began.
    pub(super) fn not_begun(&mut self) {
        self.open = false;
    }

    /// `COMMIT`; the connection, to keep, if it succeeded.
    pub(super) async fn commit(mut self) -> Result<PoolConnection<Sqlite>, Error> {
        match sqlx::raw_sql("COMMIT").execute(self.connection()).await {
            Ok(_) => Ok(self.ended()),
            Err(error) => {
                // As sqlx's transactions do: a `COMMIT` that failed may have left the
                // transaction open (SQLITE_BUSY from another process's reader), so it
                // is rolled back; the connection goes back to the pool either way.
                let _ = self.roll_back_in_place().await;
                Err(error)
            }
        }
    }

    /// `ROLLBACK`; the connection, to keep, if it succeeded.
    pub(super) async fn roll_back(mut self) -> Result<PoolConnection<Sqlite>, Error> {
        self.roll_back_in_place().await?;
        Ok(self.ended())
    }

    /// The connection of a batch that did not begin (its `BEGIN` failed, or its
    /// first statement was never sent), to keep.
    pub(super) fn unbegun(mut self) -> PoolConnection<Sqlite> {
        debug_assert!(!self.open, "a batch that may have begun is rolled back");
        self.ended()
    }

    async fn roll_back_in_place(&mut self) -> Result<(), Error> {
        sqlx::raw_sql("ROLLBACK").execute(self.connection()).await?;
        self.open = false;
        Ok(())
    }

    fn ended(&mut self) -> PoolConnection<Sqlite> {
        self.open = false;
        self.conn.take().expect("a batch holds its connection")
    }
}

impl Drop for Batch {
    /// A batch dropped before it ended well (its `COMMIT` or `ROLLBACK` failed, or the
    /// future ending it was dropped): its connection goes back to the pool, which
    /// tests it, after a `ROLLBACK` if it may still be inside the transaction, run in
    /// a task that holds the connection until then, so whoever takes it next from the
    /// pool finds no transaction open. A `ROLLBACK` with nothing to roll back only
    /// fails.
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !self.open {
            release(conn);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to run the rollback on: closing the connection rolls back.
            drop(conn.detach());
            return;
        };
        runtime.spawn(async move {
            let mut conn = conn;
            if let Err(error) = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await {
                tracing::debug!(%error, "SQLite writer: rollback of a batch that did not end");
            }
        });
    }
}

/// Hands a connection back to its pool, which needs a runtime to test it on; without
/// one (a store dropped after its runtime) the connection is closed instead.
fn release(conn: PoolConnection<Sqlite>) {
    if tokio::runtime::Handle::try_current().is_ok() {
        drop(conn);
    } else {
        drop(conn.detach());
    }
}
