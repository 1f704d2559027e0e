//! Group commit on SQLite's one writer.
//!
//! Every write transaction of a SQLite store runs on one connection (pools.rs), one
//! after another. Committing each of them on its own writes every page it changed into
//! the WAL: ~40 pages (160 KiB) per guard call with the records' indexes, most of them
//! the same few index and table pages again and again, so the WAL passes 16 MiB every
//! ~100–200 ms under load and each restart stalls the writer for its syncs. That was
//! the 8-worker p99 (docs/PERFORMANCE.md, "SQLite's tail is the WAL restart's syncs").
//!
//! So the writes that queue for the writer share a commit: the first opens the
//! transaction (`BEGIN IMMEDIATE`), each one after it runs inside its own
//! `SAVEPOINT`, and one `COMMIT` ends the batch; a page changed by eight calls goes
//! into the WAL once.
//!
//! - **Each call is still all or nothing.** A call that ends with an error or rolls
//!   back is rolled back to its savepoint (the batch's first: the batch is rolled
//!   back, it holds nothing else), and the others in the batch keep their writes.
//!   Calls run one at a time on the one connection, so each sees the writes of those
//!   before it in the batch, exactly as if they had committed.
//! - **Nobody returns before the commit.** [`WriteTx::commit`] and
//!   [`WriteTx::rollback`] return once the batch's `COMMIT` has succeeded (or with its
//!   error, when it failed): a caller never reports a write, or a decision made from
//!   what it read, that could still be lost. A call that ends by being dropped (an
//!   early `?`) does not wait.
//! - **No waiting for a batch to fill.** A call that finishes while another is queued
//!   for the writer leaves the transaction open for it; the call that finds nobody
//!   queued behind it (or the [`MAX_BATCH`]th) commits. At one caller every batch is
//!   one call, as before; under load the batch is the queue.
//! - The open transaction holds the write connection, so anything else that takes the
//!   writer's pool directly (the WAL checkpointer's step, migrations) waits for the
//!   batch's commit, as it used to wait for a transaction's.
//!
//! A commit that fails (disk full, I/O error) fails every call of the batch, each
//! with that error; none of their writes is in the database.

use super::StoreError;
use super::error::classify;
use sqlx::sqlite::{Sqlite, SqliteConnection, SqlitePool};
use sqlx::{Error, Transaction};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

/// The most calls one commit takes: a bound on how long the first of them waits for
/// it.
pub const MAX_BATCH: usize = 64;

/// The savepoint each call after the batch's first runs in. Savepoints are never
/// released: each call's nests in the one before, `ROLLBACK TO` undoes the innermost
/// of that name (the call's own), and `COMMIT` ends them all. That saves a statement,
/// a round trip to the connection's thread, per call.
const BEGIN_CALL: &str = "SAVEPOINT idemwatch_call";
const UNDO_CALL: &str = "ROLLBACK TO idemwatch_call";

/// The writer's queue and its open batch. Cloning shares them.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    pool: SqlitePool,
    slot: Arc<Mutex<Slot>>,
    /// Calls waiting for the slot: while there is one, a finished call leaves the
    /// batch open for it.
    queued: AtomicUsize,
}

/// What the holder of the writer may use.
#[derive(Debug, Default)]
struct Slot {
    batch: Option<Batch>,
    /// A call was dropped before it ended: the next holder rolls it back before
    /// anything else.
    abandoned: Scope,
}

#[derive(Debug)]
struct Batch {
    tx: Transaction<'static, Sqlite>,
    /// The calls that finished in this batch, each waiting for its outcome.
    members: Vec<oneshot::Sender<Outcome>>,
}

type Outcome = Result<(), Arc<Error>>;

impl GroupCommit {
    /// `pool` is the one write connection's pool.
    pub fn new(pool: SqlitePool) -> Self {
        Self {
            shared: Arc::new(Shared {
                pool,
                slot: Arc::new(Mutex::new(Slot::default())),
                queued: AtomicUsize::new(0),
            }),
        }
    }

    /// Waits for the writer and begins a call: the batch's transaction, or a
    /// savepoint in the open batch.
    pub async fn begin(&self) -> Result<WriteTx, StoreError> {
        let slot = Queued::enter(&self.shared).await;
        // From here a caller that gives up (a dropped request) drops the call, which
        // rolls back what it began like any other dropped call.
        let mut tx = WriteTx {
            shared: self.shared.clone(),
            slot: Some(slot),
            scope: Scope::None,
        };
        tx.open().await.map_err(|error| classify(&error))?;
        Ok(tx)
    }
}

/// One call's write transaction: the writer's batch, or a savepoint in it. Derefs to
/// the connection, as sqlx's `Transaction` does. Dropping it rolls the call back.
#[derive(Debug)]
pub struct WriteTx {
    shared: Arc<Shared>,
    /// Taken when the call ends: by `commit`, `rollback` or `drop`.
    slot: Option<OwnedMutexGuard<Slot>>,
    /// What holds the call's writes, and so what undoes them.
    scope: Scope,
}

/// What holds a call's writes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
enum Scope {
    /// Not begun: nothing to undo.
    #[default]
    None,
    /// The call opened the batch: the batch holds its writes and nothing else, so
    /// the call needs no savepoint (at one caller, every call), and undoing it is
    /// rolling the batch back.
    Batch,
    /// The call joined an open batch in a savepoint of its own.
    Savepoint,
}

impl WriteTx {
    /// Keeps the call's writes and returns once they are committed.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.end(None).await
    }

    /// Undoes the call's writes and returns once what it read is committed: a
    /// decision made from it (the key exists, the head moved) then stands.
    pub async fn rollback(mut self) -> Result<(), StoreError> {
        if self.scope == Scope::Batch {
            // The batch holds this call's writes only, and everything it read was
            // committed before it: nothing to wait for.
            let mut slot = self.slot.take().expect("a call in progress");
            return slot.roll_back().await.map_err(|error| classify(&error));
        }
        self.end(Some(UNDO_CALL)).await
    }

    /// Opens the batch if none is open, and the call's savepoint in it.
    async fn open(&mut self) -> Result<(), Arc<Error>> {
        let slot = self.slot.as_mut().expect("a call in progress");
        slot.tidy().await?;
        if slot.batch.is_none() {
            let tx = self.shared.pool.begin_with("BEGIN IMMEDIATE").await?;
            slot.batch = Some(Batch {
                tx,
                members: Vec::new(),
            });
            self.scope = Scope::Batch;
        } else {
            slot.execute(BEGIN_CALL).await?;
            self.scope = Scope::Savepoint;
        }
        Ok(())
    }

    async fn end(mut self, undo: Option<&'static str>) -> Result<(), StoreError> {
        let mut slot = self.slot.take().expect("a call in progress");
        let (member, outcome) = oneshot::channel();
        let batch = slot.batch.as_mut().expect("a call runs in an open batch");
        let last =
            self.shared.queued.load(Ordering::SeqCst) == 0 || batch.members.len() + 1 >= MAX_BATCH;
        if undo.is_none() && !last {
            // Someone is queued: the batch stays open for them, and the last call of
            // the batch commits it.
            batch.members.push(member);
            drop(slot);
        } else {
            // Statements to run: in a task of their own, so that a caller that gives
            // up cannot stop the batch's commit half way.
            tokio::spawn(async move {
                if let Some(statement) = undo
                    && let Err(error) = slot.execute(statement).await
                {
                    let _ = member.send(Err(error));
                    return;
                }
                let batch = slot.batch.as_mut().expect("a call runs in an open batch");
                batch.members.push(member);
                if last {
                    slot.commit().await;
                }
            });
        }
        match outcome.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(classify(&error)),
            Err(_) => Err(StoreError::Other(
                "the write transaction ended without a commit".into(),
            )),
        }
    }
}

impl std::ops::Deref for WriteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        let slot = self.slot.as_ref().expect("a call in progress");
        &slot
            .batch
            .as_ref()
            .expect("a call runs in an open batch")
            .tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        let slot = self.slot.as_mut().expect("a call in progress");
        &mut slot
            .batch
            .as_mut()
            .expect("a call runs in an open batch")
            .tx
    }
}

impl Drop for WriteTx {
    /// Dropped before it ended (an early return, a cancelled future): mark the call for
    /// rollback, then make sure the batch it leaves ends even if nobody else comes.
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        slot.abandoned = self.scope;
        drop(slot);
        sweep(&self.shared);
    }
}

/// A caller counted in [`Shared::queued`] until it holds the writer.
struct Queued<'a> {
    shared: &'a Arc<Shared>,
    holds: bool,
}

impl Queued<'_> {
    async fn enter(shared: &Arc<Shared>) -> OwnedMutexGuard<Slot> {
        shared.queued.fetch_add(1, Ordering::SeqCst);
        let mut queued = Queued {
            shared,
            holds: false,
        };
        let slot = shared.slot.clone().lock_owned().await;
        queued.holds = true;
        slot
    }
}

impl Drop for Queued<'_> {
    /// A caller that gave up while queued may have been the one a finished call left
    /// the batch open for.
    fn drop(&mut self) {
        self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        if !self.holds {
            sweep(self.shared);
        }
    }
}

/// Ends what nobody is left to end, in a task of its own: rolls back a dropped call
/// and, with nobody queued, commits the open batch.
fn sweep(shared: &Arc<Shared>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime, nothing running: the next caller tidies up.
        return;
    };
    let shared = shared.clone();
    runtime.spawn(async move {
        let mut slot = shared.slot.clone().lock_owned().await;
        if slot.tidy().await.is_ok() && shared.queued.load(Ordering::SeqCst) == 0 {
            slot.commit().await;
        }
    });
}

impl Slot {
    /// Runs one of the statements around a call. If one fails, the batch cannot be
    /// trusted to hold what its calls think: it is rolled back, and every call in it
    /// fails with this error.
    async fn execute(&mut self, statement: &'static str) -> Result<(), Arc<Error>> {
        let batch = self
            .batch
            .as_mut()
            .expect("a statement runs in an open batch");
        match sqlx::raw_sql(statement).execute(&mut *batch.tx).await {
            Ok(_) => Ok(()),
            Err(error) => Err(self.fail(error).await),
        }
    }

    /// Rolls back a call that was dropped before it ended (nothing of it may be
    /// committed) before the slot is used for anything else.
    async fn tidy(&mut self) -> Result<(), Arc<Error>> {
        match std::mem::take(&mut self.abandoned) {
            Scope::None => Ok(()),
            Scope::Batch => self.roll_back().await,
            Scope::Savepoint => self.execute(UNDO_CALL).await,
        }
    }

    /// Rolls back a batch that holds one call's writes and no other call.
    async fn roll_back(&mut self) -> Result<(), Arc<Error>> {
        match self.batch.take() {
            Some(batch) => batch.tx.rollback().await.map_err(Arc::new),
            None => Ok(()),
        }
    }

    /// Commits the open batch and tells its calls.
    async fn commit(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let outcome = batch.tx.commit().await.map_err(Arc::new);
        if let Err(error) = &outcome {
            tracing::warn!(%error, calls = batch.members.len(), "SQLite group commit failed");
        }
        for member in batch.members {
            let _ = member.send(outcome.clone());
        }
    }

    /// Rolls the open batch back and gives every call in it `error`.
    async fn fail(&mut self, error: Error) -> Arc<Error> {
        let error = Arc::new(error);
        if let Some(batch) = self.batch.take() {
            tracing::warn!(%error, calls = batch.members.len(), "SQLite write batch rolled back");
            let _ = batch.tx.rollback().await;
            for member in batch.members {
                let _ = member.send(Err(error.clone()));
            }
        }
        error
    }
}
