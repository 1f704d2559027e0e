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
//! into the WAL once. The guard's calls send their savepoint with their first
//! statement ([`GroupCommit::begin_deferred`], [`Opening`]), so that joining a batch
//! costs them no round trip to the connection's thread; a call whose first statement
//! carries nothing read before the write lock sends the batch's `BEGIN IMMEDIATE`
//! with it too when it opens the batch ([`GroupCommit::begin_on_first_statement`]).
//!
//! - **Each call is still all or nothing.** A call that ends with an error or rolls
//!   back is rolled back to its savepoint (the batch's first: the batch is rolled
//!   back, it holds nothing else), and the others in the batch keep their writes.
//!   Calls run one at a time on the one connection, so each sees the writes of those
//!   before it in the batch, exactly as if they had committed.
//! - **A caller that gives up cannot stop a call's first statement half way.** A
//!   joined call's first statement carries its savepoint, and is finished in a task
//!   of its own if its caller leaves ([`Opening::execute`]): a client that
//!   disconnects, or a caller's timeout, leaves a call whose savepoint is known to
//!   exist, and rolling back to it undoes that call alone.
//! - **Nobody returns before the commit.** [`WriteTx::commit`] and
//!   [`WriteTx::rollback`] return once the batch's `COMMIT` has succeeded (or with its
//!   error, when it failed): a caller never reports a write, or a decision made from
//!   what it read, that could still be lost. A call that ends by being dropped (an
//!   early `?`) does not wait.
//! - **No waiting for a batch to fill.** A call that finishes while another is queued
//!   for the writer leaves the transaction open for it; the call that finds nobody
//!   queued behind it (or the [`MAX_BATCH`]th) commits. At one caller every batch is
//!   one call, as before; under load the batch is the queue.
//! - **The queue keeps the write connection**, between batches too ([`batch`]): anything
//!   else that needs the writer (the WAL checkpointer's step, migrations) borrows it in
//!   its turn ([`GroupCommit::lend`]), after the batch it finds open is committed.
//!
//! A commit that fails (disk full, I/O error) fails every call of the batch, each
//! with that error; none of their writes is in the database.

use super::StoreError;
use super::error::classify;
use super::finish_on_drop::FinishOnDrop;
use batch::{Batch, Idle};
use futures::TryStreamExt;
use sqlx::query::Query;
use sqlx::sqlite::{
    Sqlite, SqliteArguments, SqliteConnection, SqlitePool, SqliteQueryResult, SqliteRow,
};
use sqlx::{Either, Error, Executor};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

pub(crate) mod batch;

/// The most calls one commit takes: a bound on how long the first of them waits for
/// it.
pub const MAX_BATCH: usize = 64;

/// The savepoint each call after the batch's first runs in. Savepoints are never
/// released: each call's nests in the one before, `ROLLBACK TO` undoes the innermost
/// of that name (the call's own), and `COMMIT` ends them all. That saves a statement,
/// a round trip to the connection's thread, per call.
macro_rules! begin_call {
    () => {
        "SAVEPOINT idemwatch_call"
    };
}
pub(crate) use begin_call;
const BEGIN_CALL: &str = begin_call!();
const UNDO_CALL: &str = "ROLLBACK TO idemwatch_call";

/// A call's first statement, written three times: as it is, led by the call's
/// savepoint, and led by the batch's `BEGIN IMMEDIATE` ([`first_statement!`]). A call
/// that joins an open batch sends the second through [`Opening::execute`], and a call
/// that opens one from [`GroupCommit::begin_on_first_statement`] the third, so that
/// neither costs a round trip of its own: each statement is a hand-off to the
/// connection's thread and back (~80 µs on a small VM, docs/PERFORMANCE.md) while
/// every writer queued behind waits.
#[derive(Debug)]
pub struct FirstStatement {
    alone: &'static str,
    joined: &'static str,
    opening: &'static str,
}

impl FirstStatement {
    /// Use [`first_statement!`], which writes `joined` and `opening` from `alone`.
    pub const fn new(alone: &'static str, joined: &'static str, opening: &'static str) -> Self {
        Self {
            alone,
            joined,
            opening,
        }
    }

    /// The statement without the savepoint: for a call past its first statement.
    pub fn alone(&self) -> &'static str {
        self.alone
    }
}

/// A [`FirstStatement`] from literal SQL (a `concat!` of literals and macros).
macro_rules! first_statement {
    ($($sql:expr),+ $(,)?) => {
        $crate::store::group_commit::FirstStatement::new(
            concat!($($sql),+),
            concat!($crate::store::group_commit::begin_call!(), "; ", $($sql),+),
            concat!($crate::store::group_commit::batch::begin_batch!(), "; ", $($sql),+),
        )
    };
}
pub(crate) use first_statement;

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
    /// The open batch, on the writer's connection.
    batch: Option<Batch>,
    /// The calls that finished in the open batch, each waiting for its outcome.
    members: Vec<oneshot::Sender<Outcome>>,
    /// The writer's connection while no batch is open.
    idle: Idle,
    /// A call was dropped before it ended: the next holder rolls it back before
    /// anything else.
    abandoned: Scope,
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
        let mut tx = self.enter().await;
        tx.open(Join::Now).await.map_err(|error| classify(&error))?;
        Ok(tx)
    }

    /// [`GroupCommit::begin`] for a call that knows its first statement: the savepoint
    /// of a call that joins an open batch goes with that statement
    /// ([`Opening::execute`]). A call that opens the batch has sent `BEGIN IMMEDIATE`
    /// and holds the write lock on return, so what it reads now (the clock) is read
    /// under it.
    pub async fn begin_deferred(&self) -> Result<Opening, StoreError> {
        self.opening(Join::WithFirstStatement).await
    }

    /// [`GroupCommit::begin_deferred`] for a call whose first statement carries
    /// nothing read before the write lock (a read, or a write conditioned on the head
    /// it expects): a call that opens the batch sends `BEGIN IMMEDIATE` with that
    /// statement too, one round trip to the writer instead of two. Another process
    /// holding the file's lock is then waited for inside that statement.
    pub async fn begin_on_first_statement(&self) -> Result<Opening, StoreError> {
        self.opening(Join::AndBeginWithFirstStatement).await
    }

    async fn opening(&self, join: Join) -> Result<Opening, StoreError> {
        let mut tx = self.enter().await;
        tx.open(join).await.map_err(|error| classify(&error))?;
        Ok(Opening { tx })
    }

    /// The writer to itself, outside any batch, for work that needs the one writer
    /// (the WAL checkpointer's pass, migrations): waits its turn in the writers' queue
    /// and commits the batch it finds open. Writers wait until the loan is dropped.
    pub async fn lend(&self) -> Result<Loan, Error> {
        let mut slot = Queued::enter(&self.shared).await;
        // A call abandoned there fails its batch (its callers are told); the loan
        // goes on with the writer free.
        let _ = slot.tidy().await;
        slot.commit().await;
        slot.idle.fill(&self.shared.pool).await?;
        Ok(Loan { slot })
    }

    /// Ends the open batch and gives the connection back to its pool, so that the
    /// pool can close. A write after this takes the connection from the pool again.
    pub async fn release(&self) {
        let mut slot = self.shared.slot.clone().lock_owned().await;
        let _ = slot.tidy().await;
        slot.commit().await;
        slot.idle.release();
    }

    /// Waits for the writer. From here a caller that gives up (a dropped request)
    /// drops the call, which rolls back what it began like any other dropped call.
    async fn enter(&self) -> WriteTx {
        let slot = Queued::enter(&self.shared).await;
        WriteTx {
            shared: self.shared.clone(),
            slot: Some(slot),
            scope: Scope::None,
        }
    }
}

/// The writer lent outside any batch (`GroupCommit::lend`,
/// `SqlitePools::lend_writer`): derefs to its connection.
#[derive(Debug)]
pub struct Loan {
    slot: OwnedMutexGuard<Slot>,
}

impl std::ops::Deref for Loan {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        self.slot
            .idle
            .get_ref()
            .expect("a loan holds the connection")
    }
}

impl std::ops::DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.slot.idle.get().expect("a loan holds the connection")
    }
}

/// When a call makes its savepoint (joining an open batch) or begins the batch
/// (opening one).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Join {
    /// At once: the call is a [`WriteTx`] its body runs any statement on.
    Now,
    /// The savepoint with its first statement ([`Opening::execute`]); the batch at once.
    WithFirstStatement,
    /// Both with its first statement.
    AndBeginWithFirstStatement,
}

/// A call that holds the writer and has not sent its first statement
/// ([`GroupCommit::begin_deferred`]). It has no connection to run statements on:
/// until its savepoint is made, a statement would land in the call before it.
/// Dropping it ends the call, which has written nothing.
#[derive(Debug)]
pub struct Opening {
    tx: WriteTx,
}

impl Opening {
    /// Runs the call's first statement, `first` as `build` binds it (given the text
    /// to bind: led by the savepoint when the call joined a batch, by `BEGIN
    /// IMMEDIATE` when it opens one on its first statement), and returns the call with
    /// what the statement answered.
    ///
    /// A call that leads its statement with either runs it to its end even when its
    /// caller gives up (a client that disconnects, a timeout): the rest is finished in
    /// a task of its own ([`FinishOnDrop`]), which always learns whether the savepoint
    /// or the transaction was made, and a call whose caller left is then rolled back
    /// to it alone. Stopped half way, nobody could say, and the whole batch would have
    /// to fail for one caller's departure.
    pub async fn execute(
        self,
        first: &FirstStatement,
        build: impl FnOnce(&'static str) -> Query<'static, Sqlite, SqliteArguments>,
    ) -> Result<(WriteTx, Answer), StoreError> {
        let mut tx = self.tx;
        let lead = match tx.scope {
            Scope::Batch => {
                // The call opened the batch, which holds nothing else: a caller that
                // gives up here drops the call, and rolling the batch back undoes
                // exactly it. No task needed.
                let steps: Vec<_> = (&mut *tx)
                    .fetch_many(build(first.alone))
                    .try_collect()
                    .await
                    .map_err(|error| classify(&error))?;
                return Ok((tx, Answer::of(steps.into_iter())));
            }
            Scope::Opening => Lead::Begin,
            _ => Lead::Savepoint,
        };
        let query = build(match lead {
            Lead::Begin => first.opening,
            Lead::Savepoint => first.joined,
        });
        if lead == Lead::Begin {
            tx.batch_mut()
                .expect("an opening call holds its batch")
                .beginning();
        }
        tx.scope = Scope::Unsure;
        // Run in this task while the caller waits (a task per call cost replays 5–8 %,
        // docs/PERFORMANCE.md); a caller that leaves hands the rest to a task of its
        // own, and the call it returns to nobody is dropped there, its scope known.
        FinishOnDrop::new(tx.run_led(query, lead)).await
    }
}

/// What leads a call's first statement ([`Opening::execute`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lead {
    /// The call joined an open batch: its savepoint.
    Savepoint,
    /// The call opens the batch: its `BEGIN IMMEDIATE`.
    Begin,
}

impl WriteTx {
    /// A call's first statement led by its savepoint or by the batch's `BEGIN
    /// IMMEDIATE`: every step it answered, to the end. The leading statement's step
    /// answers before the statement after it is even prepared, so a statement that
    /// fails after one step failed inside the call's own savepoint (or the batch it
    /// opened, which holds nothing else), and rolling back to it undoes this call and
    /// nothing else.
    async fn run_led(
        mut self,
        query: Query<'static, Sqlite, SqliteArguments>,
        lead: Lead,
    ) -> Result<(WriteTx, Answer), StoreError> {
        let made = match lead {
            Lead::Savepoint => Scope::Savepoint,
            Lead::Begin => Scope::Batch,
        };
        let mut steps = Vec::new();
        let failed = {
            let mut stream = (&mut *self).fetch_many(query);
            loop {
                match stream.try_next().await {
                    Ok(Some(step)) => steps.push(step),
                    Ok(None) => break None,
                    Err(error) => break Some(error),
                }
            }
        };
        match failed {
            None => {
                self.scope = made;
                // The first step is the savepoint's or the `BEGIN`'s, whose count is
                // the connection's last INSERT, UPDATE or DELETE's, not a row of this
                // call.
                Ok((self, Answer::of(steps.into_iter().skip(1))))
            }
            Some(error) if !steps.is_empty() => {
                // Dropping the call rolls it back to its savepoint, or rolls back the
                // batch it opened (`Slot::tidy`), as for any call that ends with an
                // error; the batch's others keep theirs.
                self.scope = made;
                Err(classify(&error))
            }
            Some(error) if lead == Lead::Begin => {
                // `BEGIN IMMEDIATE` itself failed (the file's lock not given within
                // the busy timeout, I/O): nothing began, and the batch goes with its
                // connection back to the pool.
                self.scope = Scope::None;
                let slot = self.slot.as_mut().expect("a call in progress");
                if let Some(mut batch) = slot.batch.take() {
                    batch.not_begun();
                    slot.idle.put(batch.unbegun());
                }
                Err(classify(&error))
            }
            Some(error) => {
                // Nothing answered, not even the savepoint: whether it was made is not
                // known, so the batch is rolled back and every call in it fails. Only
                // the database fails a `SAVEPOINT` (I/O, a full disk), which would fail
                // the batch's commit all the same.
                self.scope = Scope::None;
                let slot = self.slot.as_mut().expect("a call in progress");
                let error = slot.fail(error).await;
                Err(classify(&error))
            }
        }
    }
}

/// What a call's first statement answered ([`Opening::execute`]), its savepoint's
/// result left out.
#[derive(Debug)]
pub struct Answer {
    /// The rows its statements wrote. Meaningful for a batch of writes only: a
    /// statement that does not write reports the count of the write before it
    /// (`sqlite3_changes`).
    pub written: u64,
    /// The rows its statements returned, in order.
    pub rows: Vec<SqliteRow>,
}

impl Answer {
    fn of(steps: impl Iterator<Item = Either<SqliteQueryResult, SqliteRow>>) -> Self {
        let mut answer = Answer {
            written: 0,
            rows: Vec::new(),
        };
        for step in steps {
            match step {
                Either::Left(done) => answer.written += done.rows_affected(),
                Either::Right(row) => answer.rows.push(row),
            }
        }
        answer
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
    /// The call holds a batch that has not begun: its first statement will send
    /// `BEGIN IMMEDIATE` ([`GroupCommit::begin_on_first_statement`]). Nothing to undo,
    /// but the batch must go.
    Opening,
    /// A call's first statement, its savepoint's or its batch's `BEGIN` with it, was
    /// sent and has not answered ([`Opening::execute`]): whether the savepoint was
    /// made is not known. It is finished even when its caller leaves, so only work
    /// that never finished (a runtime shutting down, a panic) drops a call here, and
    /// that fails the batch:
    /// rolling back to `idemwatch_call` could undo the call before it, and doing
    /// nothing could commit this one's writes.
    Unsure,
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

    /// Ends a call that wrote nothing (its statements met the key, or a moved head):
    /// as [`WriteTx::rollback`] would, it returns once what it read is committed, but
    /// it sends nothing to undo, as there is nothing. A call that did write must roll
    /// back instead: this keeps what it wrote.
    pub async fn end_unwritten(self) -> Result<(), StoreError> {
        self.end(None).await
    }

    /// Opens the batch if none is open (begun now, unless `join` says with the first
    /// statement), or else the call's savepoint in it when `join` says now.
    async fn open(&mut self, join: Join) -> Result<(), Arc<Error>> {
        let slot = self.slot.as_mut().expect("a call in progress");
        slot.tidy().await?;
        if slot.batch.is_none() {
            let mut batch = Batch::new(slot.idle.take(&self.shared.pool).await?);
            if join == Join::AndBeginWithFirstStatement {
                self.scope = Scope::Opening;
            } else if let Err(error) = batch.begin().await {
                slot.idle.put(batch.unbegun());
                return Err(Arc::new(error));
            } else {
                self.scope = Scope::Batch;
            }
            slot.batch = Some(batch);
        } else if join == Join::Now {
            slot.execute(BEGIN_CALL).await?;
            self.scope = Scope::Savepoint;
        }
        Ok(())
    }

    async fn end(mut self, undo: Option<&'static str>) -> Result<(), StoreError> {
        let mut slot = self.slot.take().expect("a call in progress");
        let (member, outcome) = oneshot::channel();
        let last =
            self.shared.queued.load(Ordering::SeqCst) == 0 || slot.members.len() + 1 >= MAX_BATCH;
        if undo.is_none() && !last {
            // Someone is queued: the batch stays open for them, and the last call of
            // the batch commits it.
            slot.members.push(member);
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
                slot.members.push(member);
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

impl WriteTx {
    fn batch_mut(&mut self) -> Option<&mut Batch> {
        self.slot.as_mut()?.batch.as_mut()
    }
}

impl std::ops::Deref for WriteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        let slot = self.slot.as_ref().expect("a call in progress");
        slot.batch
            .as_ref()
            .expect("a call runs in an open batch")
            .connection_ref()
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.batch_mut()
            .expect("a call runs in an open batch")
            .connection()
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
        match sqlx::raw_sql(statement).execute(batch.connection()).await {
            Ok(_) => Ok(()),
            Err(error) => Err(self.fail(error).await),
        }
    }

    /// Rolls back a call that was dropped before it ended (nothing of it may be
    /// committed) before the slot is used for anything else.
    async fn tidy(&mut self) -> Result<(), Arc<Error>> {
        match std::mem::take(&mut self.abandoned) {
            Scope::None => Ok(()),
            Scope::Opening => {
                // Its statement was never sent: nothing began.
                if let Some(batch) = self.batch.take() {
                    self.idle.put(batch.unbegun());
                }
                Ok(())
            }
            Scope::Batch => self.roll_back().await,
            Scope::Savepoint => self.execute(UNDO_CALL).await,
            Scope::Unsure => {
                // The calls waiting for the batch's commit fail; the slot is free for
                // the next batch.
                let gave_up = "a call joined to the batch stopped during its first \
                               statement; the batch was rolled back";
                self.fail(Error::Protocol(gave_up.into())).await;
                Ok(())
            }
        }
    }

    /// Rolls back a batch that holds one call's writes and no other call.
    async fn roll_back(&mut self) -> Result<(), Arc<Error>> {
        let Some(batch) = self.batch.take() else {
            return Ok(());
        };
        let conn = batch.roll_back().await.map_err(Arc::new)?;
        self.idle.put(conn);
        Ok(())
    }

    /// Commits the open batch and tells its calls.
    async fn commit(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let members = std::mem::take(&mut self.members);
        let outcome = match batch.commit().await {
            Ok(conn) => {
                self.idle.put(conn);
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, calls = members.len(), "SQLite group commit failed");
                Err(Arc::new(error))
            }
        };
        for member in members {
            let _ = member.send(outcome.clone());
        }
    }

    /// Rolls the open batch back and gives every call in it `error`.
    async fn fail(&mut self, error: Error) -> Arc<Error> {
        let error = Arc::new(error);
        if let Some(batch) = self.batch.take() {
            let members = std::mem::take(&mut self.members);
            tracing::warn!(%error, calls = members.len(), "SQLite write batch rolled back");
            // Not kept even if the rollback works: the connection that failed a
            // statement goes back to the pool, which tests it.
            let _ = batch.roll_back().await;
            for member in members {
                let _ = member.send(Err(error.clone()));
            }
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqlitePoolOptions;
    use std::time::Duration;

    /// One writer on an in-memory database with a table `written`.
    async fn writer() -> GroupCommit {
        writer_on("sqlite::memory:".parse().unwrap()).await
    }

    /// One writer on the database `options` opens, with a table `written`.
    async fn writer_on(options: sqlx::sqlite::SqliteConnectOptions) -> GroupCommit {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE written (name TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        GroupCommit::new(pool)
    }

    /// What is committed, read on the writer in its turn (the group keeps the pool's
    /// one connection).
    async fn committed(group: &GroupCommit) -> Vec<String> {
        let mut writer = group.lend().await.unwrap();
        sqlx::query_scalar("SELECT name FROM written ORDER BY name")
            .fetch_all(&mut *writer)
            .await
            .unwrap()
    }

    const INSERT: FirstStatement = first_statement!("INSERT INTO written (name) VALUES ($1)");

    /// A first statement that writes `$1` and takes long enough to be dropped in.
    const SLOW: FirstStatement = first_statement!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) \
         INSERT INTO written (name) SELECT $1 FROM n WHERE i = 3000000"
    );

    /// A call that opened the batch and wrote `name`: the writer is held until it ends.
    async fn holding(group: &GroupCommit, name: &str) -> WriteTx {
        let mut tx = group.begin().await.unwrap();
        sqlx::query(INSERT.alone())
            .bind(name)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx
    }

    /// A deferred call whose first statement writes `name`.
    async fn deferred_insert(
        group: &GroupCommit,
        name: Option<&str>,
    ) -> Result<(WriteTx, Answer), StoreError> {
        insert_first(group.begin_deferred().await?, name).await
    }

    /// A call through [`GroupCommit::begin_on_first_statement`] whose first statement
    /// writes `name`.
    async fn opening_insert(
        group: &GroupCommit,
        name: Option<&str>,
    ) -> Result<(WriteTx, Answer), StoreError> {
        insert_first(group.begin_on_first_statement().await?, name).await
    }

    async fn insert_first(
        opening: Opening,
        name: Option<&str>,
    ) -> Result<(WriteTx, Answer), StoreError> {
        opening
            .execute(&INSERT, |text| sqlx::query(text).bind(name))
            .await
    }

    /// Commits `name` in a call that must open a batch of its own: a call that joined
    /// would mean something was left behind as an open batch.
    async fn commit_in_a_new_batch(group: &GroupCommit, name: &str) {
        let (tx, _) = deferred_insert(group, Some(name)).await.unwrap();
        assert_eq!(
            tx.scope,
            Scope::Batch,
            "a batch was left open before {name}"
        );
        tx.commit().await.unwrap();
    }

    /// Lets a spawned call reach the writer's queue.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    #[test]
    fn the_joined_text_is_the_savepoint_then_the_statement() {
        assert_eq!(INSERT.alone(), "INSERT INTO written (name) VALUES ($1)");
        assert_eq!(
            INSERT.joined,
            "SAVEPOINT idemwatch_call; INSERT INTO written (name) VALUES ($1)"
        );
        assert_eq!(
            INSERT.opening,
            "BEGIN IMMEDIATE; INSERT INTO written (name) VALUES ($1)"
        );
        assert_eq!(UNDO_CALL, BEGIN_CALL.replace("SAVEPOINT", "ROLLBACK TO"));
    }

    /// A call that opens the batch on its first statement sends the `BEGIN` with it:
    /// the statement runs inside the batch (rolling back undoes it), and the rows it
    /// reports are its own, not the count the connection's last batch left.
    #[tokio::test]
    async fn a_call_that_opens_on_its_first_statement_begins_the_batch_with_it() {
        let group = writer().await;
        // Two rows: the count a stale step would report.
        let mut tx = group.begin().await.unwrap();
        sqlx::query("INSERT INTO written (name) VALUES ('a'), ('b')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let (tx, answer) = opening_insert(&group, Some("undone")).await.unwrap();
        assert_eq!(tx.scope, Scope::Batch, "the call opened the batch");
        assert_eq!(answer.written, 1, "the BEGIN's step counted as a row");
        tx.rollback().await.unwrap();
        assert_eq!(
            committed(&group).await,
            ["a", "b"],
            "the insert ran outside the batch"
        );

        let (tx, answer) = opening_insert(&group, Some("c")).await.unwrap();
        assert_eq!(answer.written, 1);
        tx.commit().await.unwrap();
        assert_eq!(committed(&group).await, ["a", "b", "c"]);
    }

    /// An opening call whose statement fails after its `BEGIN`, one dropped while
    /// its statement runs, and one dropped before it sent anything: none leaves a
    /// row or a transaction behind, and the writer takes the next call (a `BEGIN`
    /// inside a transaction left open would fail it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_opening_call_that_fails_or_is_dropped_leaves_nothing_begun() {
        let group = writer().await;

        // NOT NULL: the BEGIN is made, the insert fails.
        assert!(opening_insert(&group, None).await.is_err());
        commit_in_a_new_batch(&group, "a").await;

        let opening = group.begin_on_first_statement().await.unwrap();
        let run = opening.execute(&SLOW, |text| sqlx::query(text).bind("slow"));
        assert!(
            tokio::time::timeout(Duration::from_millis(30), run)
                .await
                .is_err(),
            "the slow statement ended before it was dropped"
        );
        commit_in_a_new_batch(&group, "b").await;

        drop(group.begin_on_first_statement().await.unwrap());
        commit_in_a_new_batch(&group, "c").await;

        assert_eq!(committed(&group).await, ["a", "b", "c"]);
    }

    /// A `BEGIN IMMEDIATE` that fails (another process holds the file's write lock
    /// past the busy timeout), sent alone or with a call's first statement, begins
    /// nothing: once the lock is free the writer's next calls commit.
    #[tokio::test]
    async fn a_begin_that_fails_begins_nothing() {
        use sqlx::ConnectOptions;
        use sqlx::sqlite::SqliteConnectOptions;
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("busy.db"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_millis(50));
        let group = writer_on(options.clone()).await;
        let mut other = options.connect().await.unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();

        let opened = opening_insert(&group, Some("x")).await;
        assert!(opened.is_err(), "the write lock was held elsewhere");
        assert!(
            group.begin().await.is_err(),
            "the write lock was held elsewhere"
        );

        sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
        let (tx, _) = opening_insert(&group, Some("a")).await.unwrap();
        assert_eq!(tx.scope, Scope::Batch, "a failed BEGIN left a batch behind");
        tx.commit().await.unwrap();
        holding(&group, "b").await.commit().await.unwrap();
        let names: Vec<String> = sqlx::query_scalar("SELECT name FROM written ORDER BY name")
            .fetch_all(&mut other)
            .await
            .unwrap();
        assert_eq!(names, ["a", "b"]);
    }

    /// The writer's connection stays with the group between batches, not in the pool
    /// (whose every return pings it); a loan of it waits its turn, finds the batch it
    /// waited behind committed, and `release` gives the connection back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_keeps_its_connection_and_lends_it_in_turn() {
        let group = writer().await;
        let (tx, _) = deferred_insert(&group, Some("a")).await.unwrap();
        tx.commit().await.unwrap();
        // Not `num_idle`, which sqlx counts without a lock and can read as -1 for a
        // moment (seen once under CI); the pool's one connection cannot be had.
        let pool = group.shared.pool.clone();
        assert!(
            pool.try_acquire().is_none(),
            "the connection went back to the pool after the batch"
        );

        let held = holding(&group, "b").await;
        let g = group.clone();
        let loan = tokio::spawn(async move {
            let mut writer = g.lend().await.unwrap();
            let names: Vec<String> = sqlx::query_scalar("SELECT name FROM written ORDER BY name")
                .fetch_all(&mut *writer)
                .await
                .unwrap();
            names
        });
        settle().await;
        assert!(
            !loan.is_finished(),
            "the loan did not wait for the open batch"
        );
        held.commit().await.unwrap();
        assert_eq!(loan.await.unwrap(), ["a", "b"]);

        group.release().await;
        let back = tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await;
        assert!(
            back.expect("release kept the connection").is_ok(),
            "the released connection was broken"
        );
    }

    /// A call that joins a batch makes its savepoint with its first statement: rolling
    /// it back undoes its row and not the row of the call before it, and the rows it
    /// reports are its own (not the savepoint's stale count).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joined_call_rolls_back_to_the_savepoint_its_first_statement_made() {
        let group = writer().await;
        let held = holding(&group, "a").await;
        let g = group.clone();
        let joined = tokio::spawn(async move {
            let (tx, answer) = deferred_insert(&g, Some("b")).await.unwrap();
            assert_eq!(tx.scope, Scope::Savepoint, "the call joined the open batch");
            tx.rollback().await.unwrap();
            answer.written
        });
        settle().await;
        let g = group.clone();
        let kept = tokio::spawn(async move {
            let (tx, answer) = deferred_insert(&g, Some("c")).await.unwrap();
            tx.commit().await.unwrap();
            answer.written
        });
        settle().await;
        held.commit().await.unwrap();
        assert_eq!(
            joined.await.unwrap(),
            1,
            "the rolled-back call wrote one row"
        );
        assert_eq!(kept.await.unwrap(), 1, "the kept call wrote one row");
        assert_eq!(committed(&group).await, ["a", "c"]);
    }

    /// A call that opens the batch sends its first statement as it is.
    #[tokio::test]
    async fn a_call_that_opens_the_batch_sends_no_savepoint() {
        let group = writer().await;
        let (tx, answer) = deferred_insert(&group, Some("a")).await.unwrap();
        assert_eq!(tx.scope, Scope::Batch);
        assert_eq!(answer.written, 1);
        tx.commit().await.unwrap();
        assert_eq!(committed(&group).await, ["a"]);
    }

    /// A joined call whose first statement fails after its savepoint was made is
    /// rolled back to it alone: the call before it in the batch is committed, and the
    /// writer takes the next call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joined_first_statement_that_fails_is_undone_alone() {
        let group = writer().await;
        let held = holding(&group, "a").await;
        let g = group.clone();
        let failing = tokio::spawn(async move {
            // NOT NULL: the savepoint is made, the insert fails.
            deferred_insert(&g, None).await.map(drop)
        });
        settle().await;
        let held_commit = held.commit().await;
        assert!(failing.await.unwrap().is_err());
        held_commit.expect("one call's failed statement failed the call before it");
        assert_eq!(committed(&group).await, ["a"]);
        let (tx, _) = deferred_insert(&group, Some("d")).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(committed(&group).await, ["a", "d"]);
    }

    /// Callers that send their savepoint with their first statement, committing,
    /// rolling back, dropping their call and giving up at random moments (during the
    /// first statement too): every commit that returned succeeded and is in the
    /// database, no call that rolled back, was dropped or gave up before its commit
    /// is, and the writer is free afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_way_of_ending_a_deferred_call_loses_or_keeps_the_wrong_rows() {
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum End {
            Commit,
            Rollback,
            Drop,
        }
        let group = writer().await;
        let mut calls = tokio::task::JoinSet::new();
        // A fixed linear congruential sequence: the same mix on every run.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for i in 0..400 {
            let end = [End::Commit, End::Rollback, End::Drop][next(3) as usize];
            let patience = (next(3) == 0).then(|| Duration::from_micros(50 + next(1_500)));
            let g = group.clone();
            calls.spawn(async move {
                let name = format!("call-{i:03}");
                let call = async {
                    let (tx, _) = deferred_insert(&g, Some(&name)).await?;
                    match end {
                        End::Commit => tx.commit().await,
                        End::Rollback => tx.rollback().await,
                        End::Drop => {
                            drop(tx);
                            Ok(())
                        }
                    }
                };
                let ended = match patience {
                    Some(patience) => tokio::time::timeout(patience, call).await.ok(),
                    None => Some(call.await),
                };
                (name, end, ended.map(|r| r.is_ok()))
            });
            if i % 8 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let mut outcomes = Vec::new();
        while let Some(done) = calls.join_next().await {
            outcomes.push(done.unwrap());
        }
        let free = tokio::time::timeout(Duration::from_secs(5), group.lend());
        drop(free.await.expect("a batch was left open").unwrap());

        let committed = committed(&group).await;
        for (name, end, ended) in &outcomes {
            let kept = committed.contains(name);
            match (end, ended) {
                (End::Commit, Some(true)) => {
                    assert!(kept, "{name}: its commit returned, its row is gone")
                }
                // Nothing here fails a batch: one caller's departure must not fail another.
                (End::Commit, Some(false)) => panic!("{name}: its commit failed"),
                // A commit given up on may or may not have reached the batch's commit.
                (End::Commit, None) => {}
                (End::Rollback | End::Drop, _) => assert!(!kept, "{name} ({end:?}) was committed"),
            }
        }
        assert!(
            outcomes.iter().any(|(_, _, ended)| ended.is_none()),
            "no caller gave up: the test did not test that"
        );
        assert!(
            outcomes
                .iter()
                .filter(|o| o.1 == End::Commit && o.2 == Some(true))
                .count()
                > 50,
            "too few calls committed for the test to mean anything"
        );
    }

    /// A joined call dropped while its first statement runs (a client that
    /// disconnects, a caller's timeout): the statement runs to its end anyway, the call
    /// is rolled back to the savepoint it made, and the calls around it in the batch
    /// are committed. Nothing of the dropped call is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_dropped_during_its_first_statement_is_undone_alone() {
        let group = writer().await;
        let first = holding(&group, "a").await;
        let g = group.clone();
        let dropped = tokio::spawn(async move {
            let opening = g.begin_deferred().await.unwrap();
            let run = opening.execute(&SLOW, |text| sqlx::query(text).bind("b"));
            tokio::time::timeout(Duration::from_millis(30), run)
                .await
                .is_err()
        });
        settle().await;
        let g = group.clone();
        let next = tokio::spawn(async move {
            let (tx, _) = deferred_insert(&g, Some("c")).await.unwrap();
            tx.commit().await.unwrap();
        });
        settle().await;
        let first = first.commit().await;
        assert!(
            dropped.await.unwrap(),
            "the slow statement ended before it was dropped"
        );
        next.await.unwrap();
        first.expect("a caller that gave up failed the batch it was in");
        assert_eq!(committed(&group).await, ["a", "c"]);
    }

    /// A call that wrote nothing ends without a statement to undo it, and still
    /// returns only once the batch it read in is committed: what it decided from
    /// (the key exists) then stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_wrote_nothing_returns_with_its_batchs_commit() {
        const NOTHING: FirstStatement =
            first_statement!("INSERT INTO written (name) SELECT $1 WHERE 0");
        let group = writer().await;
        let first = holding(&group, "a").await;
        let g = group.clone();
        let unwritten = tokio::spawn(async move {
            let opening = g.begin_deferred().await.unwrap();
            let (tx, answer) = opening
                .execute(&NOTHING, |text| sqlx::query(text).bind("x"))
                .await
                .unwrap();
            assert_eq!(answer.written, 0);
            tx.end_unwritten().await.unwrap();
        });
        settle().await;
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let g = group.clone();
        let last = tokio::spawn(async move {
            let mut tx = g.begin().await.unwrap();
            wait.await.unwrap();
            sqlx::query(INSERT.alone())
                .bind("c")
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        });
        settle().await;
        let committer = tokio::spawn(first.commit());
        settle().await;
        assert!(
            !unwritten.is_finished(),
            "a call that wrote nothing returned before its batch's commit"
        );
        assert!(!committer.is_finished());
        go.send(()).unwrap();
        last.await.unwrap();
        unwritten.await.unwrap();
        committer.await.unwrap().unwrap();
        assert_eq!(committed(&group).await, ["a", "c"]);
    }
}
