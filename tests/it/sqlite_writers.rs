//! SQLite's one writer: a process writes through one connection (writers queue for it
//! instead of sleeping in the busy handler) and reads through the pool; two stores on
//! one file — what two `serve` processes are — still perform each intent exactly once,
//! their write locks arbitrated by SQLite's busy timeout; no way of ending a write
//! transaction leaves the writer held. SQLite's own checkpoints keep the WAL bounded.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::effects::Effects;
use crate::support::fixture::refund;
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
async fn the_wal_is_checkpointed_by_sqlite_and_stays_bounded() {
    let db = TestDb::sqlite().await;
    let Store::Sqlite(pools) = &db.store else {
        unreachable!("a SQLite test database")
    };
    // SQLite's own checkpoints, every 1,000 pages; WAL with synchronous = NORMAL (1).
    let mut writer = pools.lend_writer().await.unwrap();
    let auto: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
        .fetch_one(&mut *writer)
        .await
        .unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *writer)
        .await
        .unwrap();
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *writer)
        .await
        .unwrap();
    assert_eq!((auto, mode.as_str(), synchronous), (1000, "wal", 1));
    sqlx::query("CREATE TABLE filler (body BLOB NOT NULL)")
        .execute(&mut *writer)
        .await
        .unwrap();
    drop(writer);

    let file = db.url.trim_start_matches("sqlite://");
    let file = std::path::PathBuf::from(file.split('?').next().unwrap());
    let wal = file.with_extension("db-wal");
    let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
    // 64 MiB through the WAL in a steady stream of 256 KiB transactions, sixteen times
    // the size at which SQLite checkpoints (1,000 pages of 4 KiB).
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
        largest <= written as u64 / 8,
        "the WAL reached {largest} bytes for {written} written"
    );
    // Closed, the store leaves every page in the database file and no WAL.
    db.store.close().await;
    assert!(
        size(&file) >= written as u64,
        "the database file holds {} of {written} bytes",
        size(&file)
    );
    assert_eq!(size(&wal), 0, "the WAL outlived the store");
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
    let db = TestDb::sqlite().await;
    let Store::Sqlite(pools) = &db.store else {
        unreachable!("a SQLite test database")
    };
    sqlx::query("CREATE TABLE written (name TEXT NOT NULL)")
        .execute(&mut *pools.lend_writer().await.unwrap())
        .await
        .unwrap();
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
        let pools = pools.clone();
        calls.spawn(async move {
            let name = format!("call-{i:03}");
            let call = async {
                let mut tx = pools.begin_write().await.unwrap();
                sqlx::query("INSERT INTO written (name) VALUES ($1)")
                    .bind(&name)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
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
    let free = tokio::time::timeout(Duration::from_secs(5), pools.lend_writer()).await;
    drop(
        free.expect("a transaction was left open: the writer is held")
            .unwrap(),
    );

    let committed: Vec<String> = sqlx::query_scalar("SELECT name FROM written")
        .fetch_all(pools.reader())
        .await
        .unwrap();
    let mut gave_up = 0;
    for (name, end, finished) in &outcomes {
        let kept = committed.contains(name);
        match (end, finished) {
            (End::Commit, true) => assert!(kept, "{name}: its commit returned, its row is gone"),
            (End::Rollback | End::Drop, _) => assert!(!kept, "{name} ({end:?}) was committed"),
            // Gave up: its row is there only if it reached its commit.
            (End::Commit, false) => gave_up += 1,
        }
    }
    assert!(
        outcomes.iter().any(|(_, _, finished)| !finished),
        "no caller gave up: the test did not test that"
    );
    assert!(committed.len() + gave_up >= outcomes.iter().filter(|o| o.1 == End::Commit).count());
    db.store.close().await;
}
