//! The plan of a whole export on PostgreSQL: the merge join of the two primary-key
//! indexes, which streams the rows in (key, seq) order as it reads them, however
//! large the log looks to the planner. Left to itself, the serial planner sorts a
//! large log on disk first (docs/PERFORMANCE.md, "The whole log in index order").
//! A filtered export gets the server's own plan, and on a server that runs queries
//! serially the memory to hash its window in one batch ("A window of a large log").

use super::evidence::done_keys;
use super::*;
use crate::support::TestDb;
use idemwatch::store::StoreOptions;

/// A new store on the test database after `ALTER DATABASE … SET {setting}` (new
/// connections pick the setting up; the test database is dropped afterwards).
async fn reconnected_with(db: &TestDb, store: &Store, setting: &str) -> Store {
    let name = db.url.rsplit('/').next().unwrap();
    let name = name.split('?').next().unwrap();
    dba(store, &format!("ALTER DATABASE {name} SET {setting}")).await;
    Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_export_streams_in_index_order_however_large_the_log_looks() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let f = Fixture::new(&db);
    done_keys(&f, 12).await;
    let (before, _) = export(&f.store, &ExportFilter::default(), Format::Csv).await;

    // What a log far larger than memory looks like to the planner: each page read
    // out of order a thousand times dearer than one read in order. The planner alone
    // then scans the table and sorts it (as it did at 10 M attempts with the
    // default costs); new connections pick the setting up.
    let large = reconnected_with(&db, &f.store, "random_page_cost = 1000").await;

    let whole = large
        .explain_export(&ExportFilter::default())
        .await
        .unwrap()
        .unwrap();
    assert!(
        whole.contains("Merge Join") && !whole.contains("Sort"),
        "a whole export must stream both primary-key indexes without a sort:\n{whole}"
    );
    assert!(
        whole.contains("idempotency_attempts_key_seq")
            && whole.contains("idempotency_records_pkey"),
        "{whole}"
    );
    // Same rows, same bytes, whichever plan.
    let (after, _) = export(&large, &ExportFilter::default(), Format::Csv).await;
    assert_eq!(after, before);
    // A filter leaves the planner its choice (`export_plan`'s unit test): a selective
    // one, on a real log, its index and a sort of the few rows.
}

/// A filtered export runs in the server's own plan, parallel workers included: the
/// serial plan it was given until 2026-12-02 was the whole gap to psql's COPY for a
/// window of 100 k attempts (docs/PERFORMANCE.md, "A window in the server's own
/// plan"). On a server that runs queries serially it gets 16 MB of `work_mem`: with
/// the default 4 MB the serial planner joined a window of 100 k attempts in a
/// 5 M-attempt log by hashing every record, spilled in 32 batches to disk (0.63×
/// psql's COPY end to end). A server configured with more keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_export_gets_the_servers_plan_and_serially_the_memory_for_its_window() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let f = Fixture::new(&db);
    done_keys(&f, 3).await;
    let window = ExportFilter {
        since: Some(Utc::now() - TimeDelta::hours(1)),
        ..ExportFilter::default()
    };
    let plan = f.store.explain_export(&window).await.unwrap().unwrap();
    assert!(
        !plan.contains("max_parallel_workers_per_gather") && !plan.contains("work_mem"),
        "on a server that allows parallel workers, a filtered export keeps its settings:\n{plan}"
    );
    // The whole export streams indexes and sorts nothing: it keeps the server's memory.
    let whole = f
        .store
        .explain_export(&ExportFilter::default())
        .await
        .unwrap()
        .unwrap();
    assert!(!whole.contains("work_mem"), "{whole}");

    let serial = reconnected_with(&db, &f.store, "max_parallel_workers_per_gather = 0").await;
    let plan = serial.explain_export(&window).await.unwrap().unwrap();
    assert!(
        plan.contains("work_mem = '16MB'"),
        "on a serial server a filtered export has 16 MB of work_mem:\n{plan}"
    );

    let generous = reconnected_with(&db, &f.store, "work_mem = '64MB'").await;
    let plan = generous.explain_export(&window).await.unwrap().unwrap();
    assert!(
        plan.contains("work_mem = '64MB'")
            && plan.contains("max_parallel_workers_per_gather = '0'"),
        "a server's larger work_mem is never lowered:\n{plan}"
    );
}

/// After its first row, an export on PostgreSQL decodes without sqlx's type check
/// (`store::export::Checked`): the statement's column types, checked on the first row,
/// hold for every row. They are checked as declared, not value by value, so a column
/// whose first value is NULL is checked too. Here `duration_ms` has become text
/// whose values are 8 bytes long, the size of the `int8` the export reads: decoded
/// blindly they would be written as wrong numbers. The export must stop instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_of_another_type_stops_the_export_even_when_its_first_value_is_null() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let f = Fixture::new(&db);
    done_keys(&f, 3).await;
    let Store::Postgres(pool) = &f.store else {
        unreachable!("a PostgreSQL test")
    };
    let first: Option<i64> = sqlx::query_scalar(
        "SELECT duration_ms FROM idempotency_attempts ORDER BY key, seq LIMIT 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(first, None, "the first row's duration is NULL (a claim)");
    // A table rewrite, not an UPDATE (the attempt log refuses those).
    dba(
        &f.store,
        "ALTER TABLE idempotency_attempts ALTER COLUMN duration_ms TYPE text \
         USING CASE WHEN duration_ms IS NOT NULL THEN '12345678' END",
    )
    .await;
    let mut out = Vec::new();
    let err = idemwatch::export::export_to(
        &f.store,
        &ExportFilter::default(),
        Format::Csv,
        CsvCells::Neutralised,
        &mut out,
    )
    .await
    .expect_err("a column of another type must stop the export")
    .to_string();
    assert!(
        err.contains("14") && err.contains("TEXT"),
        "the error names the column (14, duration_ms) and its type: {err}"
    );
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.lines().count() <= 1,
        "no row was written, only the header at most: {text}"
    );
}
