//! Bulk seeding with `INSERT … SELECT generate_series`: millions of rows in minutes.
//!
//! Rows satisfy every constraint of the schema (key format, statuses, kinds, unique
//! (key, seq), the foreign key) but the hash-chain columns (`prev_hash`, `hash`,
//! `log_hash`, `fingerprint`) are plausible 64-hex values, not a chain: `verify` would
//! report every key broken. The page, backlog, tail and export benchmarks never check
//! chains, so they measure the same work as on real data. The checkpoint area does
//! check them, and seeds real chains instead ([`chains`], `verify_chains.sql`).
//!
//! For speed the secondary indexes are dropped during the load and rebuilt after it
//! (definitions read back from `pg_indexes`, so they are exactly the migrations'), and
//! the foreign-key trigger is skipped (`session_replication_role = replica`): the
//! generated rows reference existing keys by construction.

use futures::StreamExt;
use idemwatch::store::Store;
use sqlx::{Executor, PgPool};
use std::time::Instant;

/// Key number `i`'s idempotency key: what [`key_of`] computes client side too.
const KEY_SQL: &str = "encode(sha256(('bench-' || i)::text::bytea), 'hex')";

pub fn key_of(i: u64) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(format!("bench-{i}").as_bytes()))
}

fn pool(store: &Store) -> &PgPool {
    match store {
        Store::Postgres(pool) => pool,
        Store::Sqlite(_) => panic!("bulk seeding is PostgreSQL only"),
    }
}

/// Records `from..to` (key numbers). Key `i < unknown` is UNKNOWN (the backlog), the
/// rest DONE with the provider's refund id `rf_000000i` in the result; `attempts` is their
/// attempt_count. Their ids are what support searches by (the insert trigger writes the
/// search terms): business ref `order:B-i`, intent id `refund:order-B-i:ticket-i`.
/// Key `i` was created `i` seconds before the base time, so listings newest first run in key-number order.
pub async fn insert_records(
    conn: &mut sqlx::PgConnection,
    from: u64,
    to: u64,
    attempts: u64,
    unknown: u64,
) {
    let sql = format!(
        "INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, \
         business_ref, fingerprint, business_args, status, fencing_token, lease_until, attempt_count, \
         result, error, provider_retention_until, created_at, updated_at, log_seq, log_hash) \
         SELECT {KEY_SQL}, 'tenant-' || (i % 20), \
           (ARRAY['issue_refund','send_sms','send_email','create_payout','charge_card'])[(1 + i % 5)::int], \
           'wf-' || i, '1', 'refund:order-B-' || i || ':ticket-' || i, 'order:B-' || i, \
           md5('f' || i) || md5('g' || i), \
           jsonb_build_object('order', 'B-' || i, 'amount_p', 4500), \
           CASE WHEN i < {unknown} THEN 'UNKNOWN' ELSE 'DONE' END, 1, \
           t.base - make_interval(secs => i) + interval '30 seconds', {attempts}, \
           CASE WHEN i < {unknown} THEN NULL \
                ELSE jsonb_build_object('refund_id', 'rf_' || lpad(i::text, 7, '0')) END, NULL, \
           t.base - make_interval(secs => i) + CASE WHEN i % 3 = 0 THEN interval '-1 hour' ELSE interval '24 hours' END, \
           t.base - make_interval(secs => i), t.base - make_interval(secs => i) + interval '1 second', \
           {attempts}, md5('h' || i) || md5('j' || i) \
         FROM generate_series({from}::bigint, {to}::bigint - 1) i, (SELECT now() AS base) t"
    );
    conn.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
}

/// `attempts` rows per key for keys `from..to`: claimed, replays, then completed (or
/// marked_unknown for the backlog keys).
pub async fn insert_attempts(
    conn: &mut sqlx::PgConnection,
    from: u64,
    to: u64,
    attempts: u64,
    unknown: u64,
) {
    let sql = format!(
        "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, detail, \
         duration_ms, occurred_at, prev_hash, hash) \
         SELECT {KEY_SQL}, 'tenant-' || (i % 20), \
           (ARRAY['issue_refund','send_sms','send_email','create_payout','charge_card'])[(1 + i % 5)::int], \
           s, CASE WHEN s = 1 THEN 'claimed' WHEN s < {attempts} THEN 'replayed' \
                   WHEN i < {unknown} THEN 'marked_unknown' ELSE 'completed' END, \
           1, 'bench', '{{}}'::jsonb, CASE WHEN s = {attempts} THEN 120 END, \
           t.base - make_interval(secs => i) + make_interval(secs => s / 1000.0), \
           md5('p' || i || ':' || s) || md5('q' || i || ':' || s), \
           md5('h' || i || ':' || s) || md5('j' || i || ':' || s) \
         FROM generate_series({from}::bigint, {to}::bigint - 1) i, \
              generate_series(1, {attempts}::bigint) s, (SELECT now() AS base) t"
    );
    conn.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
}

/// Secondary indexes of the two tables (not the constraints' own indexes).
async fn secondary_indexes(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes i \
         WHERE tablename IN ('idempotency_records', 'idempotency_attempts') \
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Drops the secondary indexes for a bulk load; [`rebuild`] puts them back.
async fn drop_secondary_indexes(pool: &PgPool) -> Vec<(String, String)> {
    let indexes = secondary_indexes(pool).await;
    for (name, _) in &indexes {
        pool.execute(sqlx::AssertSqlSafe(format!("DROP INDEX {name}")))
            .await
            .unwrap();
    }
    indexes
}

/// Rebuilds what [`drop_secondary_indexes`] dropped and refreshes the statistics.
async fn rebuild(pool: &PgPool, indexes: &[(String, String)]) {
    for (_, def) in indexes {
        pool.execute(sqlx::AssertSqlSafe(def.clone()))
            .await
            .unwrap();
    }
    pool.execute("VACUUM (ANALYZE) idempotency_records")
        .await
        .unwrap();
    pool.execute("VACUUM (ANALYZE) idempotency_attempts")
        .await
        .unwrap();
}

/// Chunks of 100 k keys: a bounded transaction each, many txids in the log.
const CHUNK: u64 = 100_000;

/// Keys `from..to` with `attempts` attempts each; the first `unknown` key numbers are
/// UNKNOWN. Set `with_attempts` false to add records only. Returns seconds taken.
pub async fn seed(
    store: &Store,
    from: u64,
    to: u64,
    attempts: u64,
    unknown: u64,
    with_attempts: bool,
) -> f64 {
    let started = Instant::now();
    let pool = pool(store);
    let indexes = drop_secondary_indexes(pool).await;
    let mut at = from;
    while at < to {
        let end = (at + CHUNK).min(to);
        let mut conn = pool.acquire().await.unwrap();
        insert_records(&mut conn, at, end, attempts, unknown).await;
        drop(conn);
        if with_attempts {
            let mut tx = pool.begin().await.unwrap();
            tx.execute("SET LOCAL session_replication_role = replica")
                .await
                .unwrap();
            insert_attempts(&mut tx, at, end, attempts, unknown).await;
            tx.commit().await.unwrap();
        }
        at = end;
    }
    rebuild(pool, &indexes).await;
    started.elapsed().as_secs_f64()
}

/// Keys `from..to` (key numbers; not those of [`key_of`]) with 10 attempts each that
/// form real chains (`verify_chains.sql`): keys derived from their intents, every hash,
/// fingerprint and head correct, so `verify` hashes every row and finds each intact.
/// A chunk of keys a statement, a chunk per core at once; `bulk` drops the secondary indexes meanwhile (for
/// a large load; small batches between measurements keep them). Returns seconds.
pub async fn chains(store: &Store, from: u64, to: u64, bulk: bool) -> f64 {
    let started = Instant::now();
    let pool = pool(store);
    let indexes = if bulk {
        drop_secondary_indexes(pool).await
    } else {
        Vec::new()
    };
    // Chunks at once, a connection and a core each: the statement is one backend's
    // work (SHA-256 and text in SQL), so one at a time leaves the other cores idle.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let chunks = (from..to)
        .step_by(CHUNK as usize)
        .map(|at| (at, (at + CHUNK).min(to)));
    futures::stream::iter(chunks)
        .for_each_concurrent(cores, |(at, end)| async move {
            let sql = include_str!("verify_chains.sql")
                .replace(":from", &at.to_string())
                .replace(":to", &end.to_string());
            // Not under `session_replication_role = replica` as [`seed`]'s attempts
            // are: records get `resend_safe_until` from their insert trigger. The
            // foreign key holds: each key's record is written by the same statement.
            pool.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
        })
        .await;
    if bulk {
        rebuild(pool, &indexes).await;
    }
    started.elapsed().as_secs_f64()
}

/// The cursor (updated_at, key) of the `n`th key in listing order, as the keys page
/// writes it in its "next page" link.
pub async fn cursor_at(store: &Store, n: i64) -> String {
    let (at, key): (chrono::DateTime<chrono::Utc>, String) = sqlx::query_as(
        "SELECT updated_at, key FROM idempotency_records ORDER BY updated_at DESC, key DESC OFFSET $1 LIMIT 1",
    )
    .bind(n - 1)
    .fetch_one(pool(store))
    .await
    .unwrap();
    format!("{}_{key}", idemwatch::guard::rfc3339(at))
}

pub fn pg(store: &Store) -> &PgPool {
    pool(store)
}

/// Keys `from..to` with their attempts, indexes in place (small batches between
/// measurements). One transaction: one txid for the batch.
pub async fn append(store: &Store, from: u64, to: u64, attempts: u64) {
    let pool = pool(store);
    let mut tx = pool.begin().await.unwrap();
    insert_records(&mut tx, from, to, attempts, 0).await;
    insert_attempts(&mut tx, from, to, attempts, 0).await;
    tx.commit().await.unwrap();
}
