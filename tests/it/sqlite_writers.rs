//! SQLite's one writer: a process writes through one connection (writers queue for it
//! instead of sleeping in the busy handler) and reads through the pool; two stores on
//! one file — what two `serve` processes are — still perform each intent exactly once,
//! their write locks arbitrated by SQLite's busy timeout. The WAL is checkpointed by
//! the store's own task, beside the writer, and stays bounded.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::effects::Effects;
use crate::support::fixture::refund;
use crate::support::process::tool;
use idemwatch::export::verify_database;
use idemwatch::guard::{
    AttemptKind, Guard, GuardError, GuardSettings, IdempotencyKey, Operation, SystemClock,
};
use idemwatch::store::{PruneCutoffs, Store, StoreOptions, WritePool};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Performs an effect per send (no idempotency at the provider), after a moment, so
/// that callers overlap.
struct Provider(Arc<Effects>);

impl Operation for Provider {
    type Error = String;
    fn key_retention(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::hours(24)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    async fn execute(&self, key: &IdempotencyKey, _: &Value) -> Result<Value, String> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(self.0.send(key.as_str()))
    }
    async fn find_by_key(&self, key: &IdempotencyKey) -> Result<Option<Value>, String> {
        Ok(self.0.lookup(key.as_str()))
    }
}

fn guard(store: &Store) -> Guard<Store> {
    Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queue_for_one_connection_while_reads_use_the_pool() {
    let db = TestDb::sqlite().await;
    let Store::Sqlite(pools) = &db.store else {
        unreachable!("a SQLite test database")
    };
    // Hold the write connection in a write transaction (a prune batch, nothing due).
    let now = chrono::Utc::now();
    let cutoffs = PruneCutoffs {
        done_before: now,
        failed_before: now,
        now,
    };
    let held = db.store.prune_begin(&cutoffs, 10).await.unwrap();
    assert_eq!(pools.write_connections(), 1);

    // A guard call waits for the writer; a read does not.
    let effects = Arc::new(Effects::default());
    let call = refund("W-1", 100, "1");
    let key = call.intent.key().unwrap();
    let g = guard(&db.store);
    let op = Provider(effects.clone());
    let waiting = tokio::spawn(async move { g.run(&call, &op).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a write ran beside the held writer");
    assert_eq!(db.store.record(&key).await.unwrap(), None);
    assert!(pools.reader().size() >= 1);

    drop(held); // rolls back and gives the writer back
    let outcome = waiting.await.unwrap().unwrap();
    assert!(!outcome.replayed);

    // Thirty-two concurrent calls: all written, through the one connection.
    let mut calls = JoinSet::new();
    for i in 0..32 {
        let (g, op) = (guard(&db.store), Provider(effects.clone()));
        calls.spawn(async move { g.run(&refund(&format!("C-{i}"), 100, "1"), &op).await });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap().unwrap();
    }
    assert_eq!(pools.write_connections(), 1, "one write connection, ever");
    assert_eq!(effects.snapshot().len(), 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_perform_each_intent_exactly_once() {
    let db = TestDb::sqlite().await;
    // A second store on the same file: its own writer, as a second process has.
    let other = Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    let effects = Arc::new(Effects::default());
    let mut workers = JoinSet::new();
    for w in 0..16 {
        let store = if w % 2 == 0 {
            db.store.clone()
        } else {
            other.clone()
        };
        let effects = effects.clone();
        workers.spawn(async move {
            let (g, op) = (guard(&store), Provider(effects));
            for i in 0..40 {
                // Every worker sends every intent; retries while another holds it.
                let call = refund(&format!("T-{i}"), 100, "1");
                loop {
                    match g.run(&call, &op).await {
                        Ok(_) => break,
                        Err(GuardError::InFlight { .. }) => {
                            tokio::time::sleep(Duration::from_millis(3)).await;
                        }
                        Err(e) => panic!("intent {i}: {e}"),
                    }
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    let effects = effects.snapshot();
    assert_eq!(effects.len(), 40);
    for (key, ids) in &effects {
        assert_eq!(ids.len(), 1, "{key}: {ids:?}");
        let attempts = db.store.attempts(&as_key(key)).await.unwrap();
        let completed = attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::Completed)
            .count();
        assert_eq!(completed, 1, "{key}");
    }
    let report = verify_database(&db.store).await.unwrap();
    assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_beside_the_writer_and_stays_bounded() {
    let db = TestDb::sqlite().await;
    let Store::Sqlite(pools) = &db.store else {
        unreachable!("a SQLite test database")
    };
    // No commit copies the WAL into the database file: the store's checkpointer does.
    let auto: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
        .fetch_one(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
    assert_eq!(auto, 0, "automatic checkpoints are off on the writer");
    // Durability as before: WAL with synchronous = NORMAL (1).
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
    assert_eq!((mode.as_str(), synchronous), ("wal", 1));

    let file = db.url.trim_start_matches("sqlite://");
    let file = std::path::PathBuf::from(file.split('?').next().unwrap());
    let wal = file.with_extension("db-wal");
    let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
    // 64 MiB through the WAL in a steady stream of 256 KiB transactions, four times
    // the size at which the checkpointer makes the WAL start over (16 MiB).
    sqlx::query("CREATE TABLE filler (body BLOB NOT NULL)")
        .execute(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
    let (chunk, chunks) = (256 << 10, 256);
    let mut largest = 0;
    for _ in 0..chunks {
        let mut tx = pools.begin_write().await.unwrap();
        sqlx::query("INSERT INTO filler (body) VALUES (zeroblob($1))")
            .bind(chunk as i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        largest = largest.max(size(&wal));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let written = chunk * chunks;
    assert!(
        largest <= written as u64 * 5 / 8,
        "the WAL reached {largest} bytes for {written} written"
    );
    // Every page reaches the database file, with no write left to trigger it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while size(&file) < written as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file holds {} of {written} bytes",
            size(&file)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.store.close().await;
}

/// The checkpointer flushes the database file beside the writer (wal/flush.rs). It must
/// do so through SQLite's own descriptor: opening and closing another one in this
/// process would drop SQLite's POSIX lock on the file, and another process could then
/// take the exclusive lock and delete the WAL under a live writer. Fails on `10ec956`,
/// which flushed through `File::open(path)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flush_keeps_sqlites_lock_on_the_database() {
    let Some(python) = tool("python3", "python3") else {
        return;
    };
    let db = TestDb::sqlite().await;
    let Store::Sqlite(pools) = &db.store else {
        unreachable!("a SQLite test database")
    };
    let file = db.url.trim_start_matches("sqlite://");
    let file = std::path::PathBuf::from(file.split('?').next().unwrap());
    // Writes through the WAL until it starts over: past 16 MiB the checkpointer
    // flushes the database file, then finishes on the writer, and the next write
    // rewinds the WAL (the header's checkpoint sequence number, bytes 12..16, goes up).
    let wal = file.with_extension("db-wal");
    let sequence = || {
        use std::io::Read;
        let mut header = [0; 16];
        std::fs::File::open(&wal)
            .and_then(|mut f| f.read_exact(&mut header))
            .map(|()| u32::from_be_bytes(header[12..16].try_into().unwrap()))
            .ok()
    };
    sqlx::query("CREATE TABLE filler (body BLOB NOT NULL)")
        .execute(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
    let first = sequence();
    let mut chunks = 0;
    while sequence() == first {
        assert!(chunks < 400, "the WAL did not start over after 100 MiB");
        let mut tx = pools.begin_write().await.unwrap();
        sqlx::query("INSERT INTO filler (body) VALUES (zeroblob(262144))")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        chunks += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        shared_lock(&python, &file),
        "held",
        "another process could take the exclusive lock on the database"
    );

    // The probe can see a lost lock: what the flush through a second descriptor did.
    drop(std::fs::File::open(&file).unwrap());
    assert_eq!(shared_lock(&python, &file), "free");
    db.store.close().await;
}

/// Whether some process holds a SHARED lock on a SQLite database file, as another
/// process sees it: tries to take the write lock on SQLite's shared byte range
/// (0x40000002, 510 bytes, unix VFS) without waiting.
fn shared_lock(python: &std::path::Path, database: &std::path::Path) -> String {
    let probe = "import fcntl, os, sys\n\
                 fd = os.open(sys.argv[1], os.O_RDWR)\n\
                 try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002, 0)\n    print('free')\n\
                 except OSError:\n    print('held')\n";
    let out = std::process::Command::new(python)
        .args(["-c", probe])
        .arg(database)
        .output()
        .expect("run the lock probe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
