//! SQLite's WAL checkpoints, off the write path.
//!
//! By default SQLite checkpoints inside a commit: the connection whose commit takes
//! the WAL past 1,000 pages copies them into the database file and fsyncs it before
//! its `COMMIT` returns. In this crate that connection is the one writer every
//! guard call queues for (pools.rs), so each such commit stalls all queued writers
//! for the copy and two fsyncs: one guard call in many paid for it, and that was the
//! p99 at one worker (docs/PERFORMANCE.md, issue 17).
//!
//! So a store on a SQLite file turns the automatic checkpoint off
//! (`wal_autocheckpoint = 0` on every connection) and runs this task instead:
//!
//! - every [`TICK`] a `PASSIVE` checkpoint on a connection of its own. PASSIVE takes
//!   no write lock and waits for nothing, so the copying and the fsyncs run beside
//!   the writer, not in front of it.
//! - Under a steady stream of writes that alone never lets the WAL start over: SQLite
//!   rewinds the WAL at the start of a write transaction only once *every* frame is in
//!   the database file, and the writer appends frames while the checkpoint copies.
//!   So when the WAL holds more than [`RESTART_PAGES`], the task queues for the one
//!   writer like any write and checkpoints there: no frame can be added meanwhile,
//!   only the few written since the background pass are left to copy, and the next
//!   write transaction rewinds the WAL. `journal_size_limit` then truncates the file.
//! - Before queueing for the writer, the task flushes the database file itself
//!   (flush.rs) and passes once more, so that the syncs the writer's pass must make
//!   find little left to write.
//!
//! A reader that holds an old snapshot (a long export) keeps frames from being
//! copied, and the WAL grows until it ends — as with SQLite's own checkpoints; a
//! blocking checkpoint would instead stop every writer for as long as that reader.
//!
//! Durability is unchanged: `synchronous = NORMAL` in WAL mode syncs the WAL at each
//! checkpoint, never at a commit. Checkpoints now run on a clock, so the commits that
//! a power cut can lose are about a [`TICK`] old while the checkpointer can copy
//! (before: however long the WAL took to reach 1,000 pages, unbounded on a quiet
//! service).
//!
//! Every store on a SQLite file runs one — `serve`, each CLI command and each test —
//! so nobody depends on a process remembering to start it; it stops with
//! [`SqlitePools::close`](super::SqlitePools::close), or when the last handle on the
//! store is dropped. Two processes on one file each run one: PASSIVE checkpoints take
//! turns (the one that finds another running skips a tick).

mod flush;

use super::group_commit::GroupCommit;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, Error};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the background checkpoint runs. One with nothing to copy reads the
/// WAL index and returns.
pub const TICK: Duration = Duration::from_millis(100);

/// The WAL size (in pages, 4 KiB by default) past which the checkpoint is finished on
/// the writer, so that the WAL starts over (16 MiB at 4 KiB a page).
pub const RESTART_PAGES: i64 = 4096;

/// What the WAL file is truncated to when it starts over (`journal_size_limit`, in
/// bytes): a burst that grew it past [`RESTART_PAGES`] does not keep the space.
pub const JOURNAL_SIZE_LIMIT: i64 = 32 << 20;

/// The running task; stopping it is [`Checkpointer::stop`], or dropping this.
#[derive(Debug)]
pub struct Checkpointer {
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Opens the task's own connection and starts it. `writer` is the store's one
    /// writer's queue.
    pub async fn start(
        options: &SqliteConnectOptions,
        writer: GroupCommit,
    ) -> Result<Checkpointer, Error> {
        let conn = SqliteConnection::connect_with(options).await?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(conn, writer, stopped));
        Ok(Checkpointer {
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Stops the task and waits for it: after this it holds no connection, and the
    /// pools can close.
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().expect("checkpointer lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn run(mut conn: SqliteConnection, writer: GroupCommit, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // Told to stop, or every handle on the store dropped.
            _ = stopped.changed() => break,
        }
        // Logged when checkpoints start failing and when they work again, not on
        // every tick: a broken disk would otherwise write ten warnings a second.
        match (checkpoint(&mut conn, &writer).await, failing) {
            (Err(error), false) => {
                tracing::warn!(%error, "SQLite WAL checkpoints failing; retrying every tick");
                failing = true;
            }
            (Err(error), true) => tracing::debug!(%error, "SQLite WAL checkpoint failed again"),
            (Ok(()), true) => {
                tracing::info!("SQLite WAL checkpoints work again");
                failing = false;
            }
            (Ok(()), false) => {}
        }
    }
    let _ = conn.close().await;
}

/// One pass: copy what the WAL holds beside the writer; once the WAL has grown past
/// [`RESTART_PAGES`], sync beside the writer what can be synced there, then finish on
/// the writer.
#[tracing::instrument(level = "debug", skip_all)]
async fn checkpoint(conn: &mut SqliteConnection, writer: &GroupCommit) -> Result<(), Error> {
    let (busy, wal, copied) = passive(conn).await?;
    if busy != 0 || wal < RESTART_PAGES {
        return Ok(());
    }
    // The writer's pass syncs the WAL's frames written since the last sync of it, then
    // the database file's pages copied since the last sync of that, with every writer
    // queued behind it. A background pass syncs the WAL but, stopped short of the WAL's
    // end by a reader (as it nearly always is under load), not the database file: so
    // flush the file here, then pass once more to sync the frames written during the
    // flush. Measured: the writer's syncs per restart 8.3 → 5.2 ms, the 8-worker p99
    // 27 → 18 ms at the median; the flush alone saved nothing here, as the writer's
    // WAL sync grew by what its database sync lost (docs/PERFORMANCE.md, "The WAL
    // restart's syncs beside the writer").
    if copied > 0 {
        flush::flush_database_file(conn).await?;
        passive(conn).await?;
    }
    // In the writers' queue, between two batches.
    let mut write = writer.lend().await?;
    passive(&mut write).await?;
    Ok(())
}

/// A `PASSIVE` checkpoint: (busy, pages in the WAL, pages of it in the database file).
/// Busy when another connection (another process) is checkpointing: it does the work
/// this time. The counts are as of the start of the pass: "all copied" does not mean
/// that the writer added nothing meanwhile (it usually has, and then the WAL does not
/// start over), so only the WAL's size decides.
async fn passive(conn: &mut SqliteConnection) -> Result<(i64, i64, i64), Error> {
    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut *conn)
        .await
}
