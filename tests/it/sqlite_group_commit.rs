//! Group commit on SQLite's one writer (src/store/group_commit.rs): the write
//! transactions queued for the writer share one `COMMIT`, each in a savepoint of its
//! own; a call that fails or is dropped is rolled back alone; nobody returns before
//! the commit that makes what it wrote, or read, durable; and nothing a caller does
//! (dropping its transaction, giving up while queued) leaves the writer held.

use crate::support::TestDb;
use idemwatch::store::{SqlitePools, Store, WritePool};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::task::JoinSet;

struct Db {
    db: TestDb,
    wal: PathBuf,
}

impl Db {
    async fn new() -> Db {
        let db = TestDb::sqlite().await;
        let file = db.url.trim_start_matches("sqlite://");
        let file = PathBuf::from(file.split('?').next().unwrap());
        sqlx::query("CREATE TABLE written (name TEXT NOT NULL)")
            .execute(&mut *Db::pools_of(&db).lend_writer().await.unwrap())
            .await
            .unwrap();
        Db {
            wal: file.with_extension("db-wal"),
            db,
        }
    }

    fn pools_of(db: &TestDb) -> &SqlitePools {
        match &db.store {
            Store::Sqlite(pools) => pools,
            Store::Postgres(_) => unreachable!("a SQLite test database"),
        }
    }

    fn pools(&self) -> &SqlitePools {
        Db::pools_of(&self.db)
    }

    /// The names committed, sorted, as a reader sees them.
    async fn committed(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT name FROM written ORDER BY name")
            .fetch_all(self.pools().reader())
            .await
            .unwrap()
    }
}

/// Commits in the WAL since it last started over: frames of the current generation
/// (the header's salts) whose "database size after commit" field is set.
fn commits_in_wal(wal: &Path) -> usize {
    let bytes = std::fs::read(wal).unwrap_or_default();
    if bytes.len() < 32 {
        return 0;
    }
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let page_size = word(8) as usize;
    let salts = &bytes[16..24];
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page_size <= bytes.len() {
        if &bytes[at + 8..at + 16] != salts {
            break;
        }
        commits += usize::from(word(at + 4) != 0);
        at += 24 + page_size;
    }
    commits
}

async fn insert(tx: &mut <SqlitePools as WritePool>::Tx, name: &str) {
    sqlx::query("INSERT INTO written (name) VALUES ($1)")
        .bind(name)
        .execute(&mut **tx)
        .await
        .unwrap();
}

/// Lets spawned tasks reach the writer's queue.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_for_the_writer_share_one_commit() {
    let db = Db::new().await;
    let mut held = db.pools().begin_write().await.unwrap();
    insert(&mut held, "held").await;
    let mut calls = JoinSet::new();
    for i in 0..16 {
        let pools = db.pools().clone();
        calls.spawn(async move {
            let mut tx = pools.begin_write().await.unwrap();
            insert(&mut tx, &format!("call-{i:02}")).await;
            tx.commit().await.unwrap();
        });
    }
    settle().await;
    let before = commits_in_wal(&db.wal);
    held.commit().await.unwrap();
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
    assert_eq!(
        commits_in_wal(&db.wal) - before,
        1,
        "seventeen calls queued together, one commit"
    );
    assert_eq!(db.committed().await.len(), 17);
    db.db.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_in_a_batch_is_rolled_back_alone() {
    let db = Db::new().await;
    let mut held = db.pools().begin_write().await.unwrap();
    insert(&mut held, "a").await;
    let pools = db.pools().clone();
    let dropped = tokio::spawn(async move {
        let mut tx = pools.begin_write().await.unwrap();
        insert(&mut tx, "b").await;
        // An error return: the transaction is dropped inside its savepoint.
        drop(tx);
    });
    settle().await;
    let pools = db.pools().clone();
    let kept = tokio::spawn(async move {
        let mut tx = pools.begin_write().await.unwrap();
        insert(&mut tx, "c").await;
        tx.commit().await.unwrap();
    });
    settle().await;
    let before = commits_in_wal(&db.wal);
    held.commit().await.unwrap();
    dropped.await.unwrap();
    kept.await.unwrap();
    assert_eq!(db.committed().await, ["a", "c"]);
    assert_eq!(commits_in_wal(&db.wal) - before, 1, "a and c in one commit");
    db.db.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_returns_before_the_commit_of_what_it_wrote_or_read() {
    let db = Db::new().await;
    let mut first = db.pools().begin_write().await.unwrap();
    insert(&mut first, "a").await;

    // Second in the queue: reads the first call's row, decides on it, rolls back.
    let pools = db.pools().clone();
    let reader = tokio::spawn(async move {
        let mut tx = pools.begin_write().await.unwrap();
        let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM written")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        seen
    });
    settle().await;
    // Third: holds the writer until told to go on.
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let pools = db.pools().clone();
    let last = tokio::spawn(async move {
        let mut tx = pools.begin_write().await.unwrap();
        wait.await.unwrap();
        insert(&mut tx, "c").await;
        tx.commit().await.unwrap();
    });
    settle().await;
    let pools = db.pools().clone();
    let committer = tokio::spawn(async move {
        first.commit().await.unwrap();
        // The commit has happened when this returns: a reader sees the batch.
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM written")
            .fetch_one(pools.reader())
            .await
            .unwrap()
    });
    settle().await;
    // The batch is open while the third call holds the writer: neither the first
    // call's commit nor the second call's rollback has returned, and nothing is
    // visible yet.
    assert!(
        !committer.is_finished(),
        "a commit returned before its batch's"
    );
    assert!(
        !reader.is_finished(),
        "a rollback returned before what it read was committed"
    );
    assert!(db.committed().await.is_empty());

    go.send(()).unwrap();
    last.await.unwrap();
    assert_eq!(
        committer.await.unwrap(),
        2,
        "the first call's commit is the batch's: the third call's row came with it"
    );
    assert_eq!(
        reader.await.unwrap(),
        1,
        "the second call saw the first call's row"
    );
    assert_eq!(db.committed().await, ["a", "c"]);
    db.db.store.close().await;
}

/// Many callers committing, rolling back, dropping their transactions and giving up at
/// random moments: every returned commit is in the database, no rolled-back or dropped
/// call is, and afterwards the writer is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_way_of_ending_a_call_leaves_the_writer_held() {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum End {
        Commit,
        Rollback,
        Drop,
    }
    let db = Db::new().await;
    let mut calls = JoinSet::new();
    // A fixed linear congruential sequence: the same mix on every run.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for i in 0..400 {
        let end = [End::Commit, End::Rollback, End::Drop][next(3) as usize];
        // A third of the callers give up after a few hundred microseconds: while
        // queued, inside their call, or while waiting for its commit.
        let patience = (next(3) == 0).then(|| Duration::from_micros(100 + next(2_000)));
        let pools = db.pools().clone();
        calls.spawn(async move {
            let name = format!("call-{i:03}");
            let call = async {
                let mut tx = pools.begin_write().await.unwrap();
                insert(&mut tx, &name).await;
                match end {
                    End::Commit => tx.commit().await.unwrap(),
                    End::Rollback => tx.rollback().await.unwrap(),
                    End::Drop => drop(tx),
                }
            };
            let finished = match patience {
                Some(patience) => tokio::time::timeout(patience, call).await.is_ok(),
                None => {
                    call.await;
                    true
                }
            };
            (name, end, finished)
        });
        if i % 8 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let mut outcomes = Vec::new();
    while let Some(done) = calls.join_next().await {
        outcomes.push(done.unwrap());
    }
    // The writer is free: it can be borrowed in its turn, so no call holds it.
    let free = tokio::time::timeout(Duration::from_secs(5), db.pools().lend_writer()).await;
    drop(
        free.expect("a batch was left open: the writer is held")
            .unwrap(),
    );

    let committed = db.committed().await;
    let mut gave_up = 0;
    for (name, end, finished) in &outcomes {
        let kept = committed.contains(name);
        match (end, finished) {
            (End::Commit, true) => assert!(kept, "{name}: its commit returned, its row is gone"),
            (End::Rollback | End::Drop, _) => assert!(!kept, "{name} ({end:?}) was committed"),
            // Gave up: its row is there only if it reached its savepoint's release.
            (End::Commit, false) => gave_up += 1,
        }
    }
    assert!(
        outcomes.iter().any(|(_, _, finished)| !finished),
        "no caller gave up: the test did not test that"
    );
    assert!(committed.len() + gave_up >= outcomes.iter().filter(|o| o.1 == End::Commit).count());
    db.db.store.close().await;
}
