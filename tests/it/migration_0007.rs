//! Migration 0007 on SQLite rebuilds the attempt log to add the `duplicate_reviewed`
//! kind. The tailer follows that log by id, so the rebuild must keep every row's id,
//! the id sequence (ids of pruned rows are never reused), the indexes and the
//! append-only trigger.

use sqlx::{Connection, SqliteConnection};

async fn run(conn: &mut SqliteConnection, file: &str) {
    let path = format!("{}/migrations/sqlite/{file}", env!("CARGO_MANIFEST_DIR"));
    let sql = std::fs::read_to_string(&path).unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{file}: {e}"));
}

async fn scalar(conn: &mut SqliteConnection, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&mut *conn).await.unwrap()
}

#[tokio::test]
async fn the_sqlite_rebuild_keeps_ids_the_sequence_indexes_and_the_trigger() {
    let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
    let mut files: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
    files.sort();
    let (before, after): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| f.as_str() < "0007");
    for f in &before {
        run(&mut conn, f).await;
    }
    let key = "a".repeat(64);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, \
         fingerprint, business_args, status, fencing_token, lease_until, attempt_count, \
         provider_retention_until, created_at, updated_at, log_seq, log_hash) VALUES \
         ('{key}', 't', 'x', 'w', 's', 'i', 'f', '{{}}', 'DONE', 1, '2026-01-01T00:00:00+00:00', 1, \
          '2026-01-02T00:00:00+00:00', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00', 3, 'h');
         INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
         occurred_at, prev_hash, hash) VALUES \
         ('{key}', 't', 'x', 1, 'claimed', 1, 'a', '2026-01-01T00:00:00+00:00', 'p', 'h1'), \
         ('{key}', 't', 'x', 2, 'completed', 1, 'a', '2026-01-01T00:00:01+00:00', 'h1', 'h2'), \
         ('{key}', 't', 'x', 3, 'replayed', 1, 'a', '2026-01-01T00:00:02+00:00', 'h2', 'h3');
         DELETE FROM idempotency_attempts WHERE seq = 3;"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    for f in &after {
        run(&mut conn, f).await;
    }
    assert_eq!(
        scalar(
            &mut conn,
            "SELECT min(id) * 10 + max(id) FROM idempotency_attempts"
        )
        .await,
        12,
        "ids kept"
    );
    assert_eq!(
        scalar(&mut conn, "SELECT count(*) FROM idempotency_attempts").await,
        2
    );
    // The sequence carried over: the next row gets 4, not the deleted row's 3.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
         occurred_at, prev_hash, hash) VALUES \
         ('{key}', 't', 'x', 3, 'duplicate_reviewed', 1, 'a', '2026-01-01T00:00:03+00:00', 'h2', 'h3')"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        scalar(&mut conn, "SELECT max(id) FROM idempotency_attempts").await,
        4
    );
    assert_eq!(
        scalar(
            &mut conn,
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'idempotency_attempts' \
             AND name IN ('idempotency_attempts_occurred_at', 'idempotency_attempts_kind_occurred_at', \
             'idempotency_attempts_occurred_at_tool_kind')"
        )
        .await,
        3
    );
    let update = sqlx::query("UPDATE idempotency_attempts SET actor = 'x' WHERE id = 1")
        .execute(&mut conn)
        .await;
    assert!(
        update.is_err_and(|e| e.to_string().contains("append-only")),
        "the trigger is back"
    );
    let bad = sqlx::query(
        "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
         occurred_at, prev_hash, hash) VALUES ($1, 't', 'x', 9, 'nonsense', 1, 'a', 'x', 'p', 'h')",
    )
    .bind(&key)
    .execute(&mut conn)
    .await;
    assert!(bad.is_err(), "the kind check is back");
}
