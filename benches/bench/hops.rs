//! Experiment (`hops`, only when named): what one statement's hand-off to SQLite's
//! connection thread costs on this machine. sqlx runs each SQLite connection on a
//! thread of its own; every statement sent is a message to it and an answer back, and
//! on SQLite's one writer that time is the whole queue's. Measured on the store's write
//! connection, idle: `SELECT 1` sent one at a time, against five `SELECT 1` sent as one
//! batch (one hand-off). The difference, per statement saved, is the hand-off.
//!
//! And what taking a connection from sqlx's pool and giving it back costs, as each
//! batch of the writer did until the writer kept its connection (group_commit/batch.rs):
//! `SELECT 1` on a connection taken from a one-connection pool on the same file (no
//! test before acquire, as the store's writer pool) and given back each time, against
//! the same on a connection held throughout.

use super::report::Figure;
use idemwatch::store::Store;
use sqlx::sqlite::SqlitePoolOptions;
use std::time::Instant;

pub async fn run(store: &Store, url: &str, figures: &mut Vec<Figure>) {
    let Store::Sqlite(pools) = store else {
        return;
    };
    let mut conn = pools.lend_writer().await.unwrap();
    let n = 20_000u32;
    for round in 1..=3 {
        let t = Instant::now();
        for _ in 0..n {
            sqlx::query("SELECT 1").execute(&mut *conn).await.unwrap();
        }
        let one = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        let t = Instant::now();
        for _ in 0..n / 5 {
            sqlx::query("SELECT 1; SELECT 1; SELECT 1; SELECT 1; SELECT 1")
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        let five = t.elapsed().as_secs_f64() * 1e6 / f64::from(n / 5);
        figures.push(Figure::plain(
            format!("SQLite statement sent alone, round {round}"),
            "us",
            one,
            format!(
                "five as one batch: {five:.1} us; a hand-off saved per statement batched: {:.1} us",
                (5.0 * one - five) / 4.0
            ),
            None,
        ));
    }
    drop(conn);

    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(url)
        .await
        .unwrap();
    let n = 5_000u32;
    for round in 1..=3 {
        let t = Instant::now();
        for _ in 0..n {
            let mut taken = pool.acquire().await.unwrap();
            sqlx::query("SELECT 1").execute(&mut *taken).await.unwrap();
        }
        let taken = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        let mut held = pool.acquire().await.unwrap();
        let t = Instant::now();
        for _ in 0..n {
            sqlx::query("SELECT 1").execute(&mut *held).await.unwrap();
        }
        let kept = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        drop(held);
        figures.push(Figure::plain(
            format!(
                "SQLite statement on a connection taken from the pool and given back, round {round}"
            ),
            "us",
            taken,
            format!(
                "on a connection kept: {kept:.1} us; the pool's round trip: {:.1} us",
                taken - kept
            ),
            None,
        ));
    }
    pool.close().await;
}
