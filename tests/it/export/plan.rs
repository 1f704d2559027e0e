//! The plan of a whole export on PostgreSQL: the merge join of the two primary-key
//! indexes, which streams the rows in (key, seq) order as it reads them, however
//! large the log looks to the planner. Left to itself, the serial planner sorts a
//! large log on disk first (docs/PERFORMANCE.md, "The whole log in index order").

use super::evidence::done_keys;
use super::*;
use crate::support::TestDb;
use idemwatch::store::StoreOptions;

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
    let name = db
        .url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap();
    dba(
        &f.store,
        &format!("ALTER DATABASE {name} SET random_page_cost = 1000"),
    )
    .await;
    let large = Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap();

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
