//! The tail's "what may I not read yet" query, polled after every short batch, does
//! work bounded by the rows it may not read, not by the size of the log.
//!
//! The bug it pins (a 2026-12-04 soak): `min(occurred_at) … WHERE txid >= xmin` was
//! answered from the `occurred_at` index, walking the log from its oldest row and
//! filtering on txid, because the planner takes the pending rows to be spread evenly
//! in time when they are all at its end. Its cost grew with the log.

use crate::support::TestDb;
use crate::support::plans::most_blocks;
use idemwatch::tail::TailSource;
use sqlx::{Connection, PgConnection};

/// Attempts for 100 keys (`batch` picks which), at `seq`, in their own transaction:
/// the log's txids spread over many transactions, as a guard writes them.
const INSERT_BATCH: &str = "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, \
    fencing_token, actor, detail, occurred_at, prev_hash, hash) \
    SELECT key, tenant, tool, $2, 'replayed', 1, 'w', '{}', now() + $1 * interval '1 ms', 'p', 'h' \
    FROM idempotency_records ORDER BY key OFFSET $1 * 100 LIMIT 100";

/// [`INSERT_BATCH`] for each of `batches`, one transaction each.
async fn insert_batches(pool: &sqlx::PgPool, batches: std::ops::Range<i64>, seq: i64) {
    for batch in batches {
        sqlx::query(INSERT_BATCH)
            .bind(batch)
            .bind(seq)
            .execute(pool)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pending_rows_are_read_from_the_txid_index_not_the_whole_log() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let store = &db.store;
    let idemwatch::store::Store::Postgres(pool) = store else {
        unreachable!()
    };
    // 20,000 keys, one attempt each, then 20,000 more attempts in 200 transactions.
    crate::page_indexes::fill(store, 20_000).await;
    insert_batches(pool, 0..200, 2).await;
    sqlx::query("ANALYZE idempotency_attempts")
        .execute(pool)
        .await
        .unwrap();

    // A writer holds the tail back (it has a txid and stays open), and 800 rows commit
    // behind it: the tail may not read them until it ends.
    let mut held = PgConnection::connect(&db.url).await.unwrap();
    let mut tx = held.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *tx)
        .await
        .unwrap();
    insert_batches(pool, 0..8, 3).await;

    let explained = store.explain_tail_pending().await.unwrap().unwrap();
    let plan = &explained[0]["Plan"];
    let text = plan.to_string();
    assert!(
        !text.contains("idempotency_attempts_occurred_at"),
        "the pending rows must come from the txid index, not a walk of the log in time \
         order: {text}"
    );
    // 800 pending rows: about 800 heap visits and a few index pages. Walking the log
    // (the old plan) visits every one of its 40,800 rows.
    let blocks = most_blocks(plan);
    assert!(
        blocks < 2_500,
        "a poll touched {blocks} blocks for 800 pending rows: {text}"
    );

    // The figure itself: the oldest pending row, and the open writer's age.
    let oldest: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT min(occurred_at) FROM idempotency_attempts WHERE seq = 3")
            .fetch_one(pool)
            .await
            .unwrap();
    // The tail's horizon is the cluster's: another test's open transaction in the same
    // cluster can hold older rows of this database back for a moment, so read again
    // until only this test's writer holds the tail (the figure must then be exact).
    let pending = settled(store, Some(oldest)).await;
    assert_eq!(pending.oldest_pending, Some(oldest));
    assert!(pending.held_back > std::time::Duration::ZERO);

    tx.commit().await.unwrap();
    let pending = settled(store, None).await;
    assert_eq!(
        pending.oldest_pending, None,
        "nothing is pending once it ends"
    );
}

/// `tail_pending` read until its oldest pending row is `want`, for at most ~10 s; the
/// last reading otherwise, for the caller's assertion to report.
async fn settled(
    store: &idemwatch::store::Store,
    want: Option<chrono::DateTime<chrono::Utc>>,
) -> idemwatch::tail::TailPending {
    let mut pending = store.tail_pending().await.unwrap();
    for _ in 0..100 {
        if pending.oldest_pending == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        pending = store.tail_pending().await.unwrap();
    }
    pending
}
