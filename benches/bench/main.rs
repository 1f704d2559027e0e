//! `cargo bench --bench bench [-- AREA…]`: idemwatch's benchmarks, each compared with a
//! baseline measured in the same run. Method and results: docs/PERFORMANCE.md.
//!
//! Environment: `BENCH_SECONDS` (per measurement, default 5), `TEST_DATABASE_URL` (an
//! existing PostgreSQL; otherwise a throwaway cluster is started as in the tests).

mod guard;
#[path = "../../tests/it/support/pg.rs"]
#[allow(
    dead_code,
    reason = "shared with the tests; the benchmark uses part of it"
)]
mod pg;
mod report;

use idemwatch::store::{Store, StoreOptions};
use std::time::Duration;

async fn fresh_postgres() -> Store {
    let admin = pg::admin_url()
        .await
        .unwrap_or_else(|why| panic!("PostgreSQL is needed for benchmarks: {why}"));
    let name = format!("idemwatch_bench_{}", std::process::id());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name}"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let store = Store::connect(
        &url,
        &StoreOptions {
            max_connections: 40,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    store
}

async fn fresh_sqlite(dir: &std::path::Path) -> Store {
    let url = format!("sqlite://{}?mode=rwc", dir.join("bench.db").display());
    let store = Store::connect(
        &url,
        &StoreOptions {
            max_connections: 40,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    store
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs this binary too, without `--bench`: the
    // benchmarks only run under `cargo bench`.
    if !args.iter().any(|a| a == "--bench") {
        println!("benchmarks run with `cargo bench --bench bench`; nothing to test here");
        return;
    }
    let areas: Vec<String> = args.into_iter().filter(|a| !a.starts_with('-')).collect();
    let wants = |area: &str| areas.is_empty() || areas.iter().any(|a| a == area);
    let seconds = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let duration = Duration::from_secs(seconds);
    let mut figures = Vec::new();
    if wants("guard") {
        let pg = fresh_postgres().await;
        guard::run(&pg, "PostgreSQL", duration, &mut figures).await;
        let dir = tempfile::tempdir().unwrap();
        let lite = fresh_sqlite(dir.path()).await;
        guard::run(&lite, "SQLite", duration, &mut figures).await;
    }
    report::print(&figures);
}
