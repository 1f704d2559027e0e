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
//! - a `PASSIVE` checkpoint on a connection of its own, every [`BUSY_TICK`] while
//!   commits keep adding to the WAL and every [`TICK`] once it is quiet. PASSIVE takes
//!   no write lock and waits for nothing, so the copying and the fsyncs run beside
//!   the writer, not in front of it.
//! - Beside is not free: the guard calls that overlap a pass, its WAL sync and the
//!   database file's flush (below) are the slow ones (the others' p99 is about half),
//!   though the writer's thread itself never waits on the disk. Small passes often
//!   cost those calls less than large ones seldom, so a busy WAL is checkpointed every
//!   [`BUSY_TICK`] (measured in docs/PERFORMANCE.md, "Small checkpoints often").
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
//! a power cut can lose are at most about a [`TICK`] old while the checkpointer can
//! copy, a [`BUSY_TICK`] under load (before: however long the WAL took to reach 1,000
//! pages, unbounded on a quiet service).
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

/// How often the background checkpoint runs while the WAL is quiet. One with nothing
/// to copy reads the WAL index and returns.
pub const TICK: Duration = Duration::from_millis(100);

/// How often it runs while commits keep adding to the WAL: each pass then copies and
/// syncs about this long's commits. At 100 ms the 8-worker guard's p99 on SQLite was
/// 8.5–10.6 ms, at 25 ms 8.1–9.6, at 10 ms 7.2–7.5 (docs/PERFORMANCE.md).
pub const BUSY_TICK: Duration = Duration::from_millis(10);

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
    let mut pace = Pace::default();
    let mut next = tokio::time::Instant::now();
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            // Told to stop, or every handle on the store dropped.
            _ = stopped.changed() => break,
        }
        let result = checkpoint(&mut conn, &writer).await;
        // From the pass's end, not its start: on a slow disk, where a pass's syncs
        // take longer than the tick, the passes do not follow each other back to back.
        next = tokio::time::Instant::now() + pace.after(result.as_ref().ok().copied());
        // Logged when checkpoints start failing and when they work again, not on
        // every tick: a broken disk would otherwise write ten warnings a second.
        match (result, failing) {
            (Err(error), false) => {
                tracing::warn!(%error, "SQLite WAL checkpoints failing; retrying every tick");
                failing = true;
            }
            (Err(error), true) => tracing::debug!(%error, "SQLite WAL checkpoint failed again"),
            (Ok(_), true) => {
                tracing::info!("SQLite WAL checkpoints work again");
                failing = false;
            }
            (Ok(_), false) => {}
        }
    }
    let _ = conn.close().await;
}

/// What a pass found in the WAL: its pages, and how many of them were in the
/// database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalPages {
    wal: i64,
    copied: i64,
}

/// When the next pass runs.
#[derive(Debug, Default)]
struct Pace {
    last: Option<WalPages>,
}

impl Pace {
    /// The wait after a pass that found `found` (`None`: it failed). A WAL that
    /// changed since the previous pass is busy; one that did not, or a failing pass,
    /// waits the quiet [`TICK`], so an idle service does not checkpoint a hundred
    /// times a second, nor a broken disk get retried that often.
    fn after(&mut self, found: Option<WalPages>) -> Duration {
        let busy = found.is_some() && found != self.last;
        self.last = found;
        if busy { BUSY_TICK } else { TICK }
    }
}

/// One pass: copy what the WAL holds beside the writer; once the WAL has grown past
/// [`RESTART_PAGES`], sync beside the writer what can be synced there, then finish on
/// the writer. Returns what its first step found.
#[tracing::instrument(level = "debug", skip_all)]
async fn checkpoint(conn: &mut SqliteConnection, writer: &GroupCommit) -> Result<WalPages, Error> {
    let (busy, wal, copied) = passive(conn).await?;
    let found = WalPages { wal, copied };
    if busy != 0 || wal < RESTART_PAGES {
        return Ok(found);
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
    Ok(found)
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

#[cfg(test)]
mod tests {
    use super::*;

    const AT_REST: WalPages = WalPages {
        wal: 40,
        copied: 40,
    };

    #[test]
    fn a_growing_wal_is_checkpointed_every_busy_tick_and_a_quiet_one_every_tick() {
        let mut pace = Pace::default();
        // The first pass has nothing to compare with: it looks again soon.
        assert_eq!(pace.after(Some(AT_REST)), BUSY_TICK);
        // Nothing written since: quiet.
        assert_eq!(pace.after(Some(AT_REST)), TICK);
        assert_eq!(pace.after(Some(AT_REST)), TICK);
        // Commits added frames; then the pass copied them: both are changes.
        assert_eq!(
            pace.after(Some(WalPages {
                wal: 90,
                copied: 40
            })),
            BUSY_TICK
        );
        assert_eq!(
            pace.after(Some(WalPages {
                wal: 90,
                copied: 90
            })),
            BUSY_TICK
        );
        assert_eq!(
            pace.after(Some(WalPages {
                wal: 90,
                copied: 90
            })),
            TICK
        );
        // The WAL started over: smaller, still a change.
        assert_eq!(pace.after(Some(WalPages { wal: 3, copied: 0 })), BUSY_TICK);
    }

    #[test]
    fn a_failing_pass_waits_the_quiet_tick() {
        let mut pace = Pace::default();
        assert_eq!(pace.after(None), TICK);
        assert_eq!(pace.after(None), TICK);
        // Working again: compared with nothing, so busy once.
        assert_eq!(pace.after(Some(AT_REST)), BUSY_TICK);
        assert_eq!(pace.after(Some(AT_REST)), TICK);
    }
}
