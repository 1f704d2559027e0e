//! `cargo bench --bench bench [-- AREA…]`: idemwatch's benchmarks, each compared with a
//! baseline measured in the same run. Method and results: docs/PERFORMANCE.md.
//!
//! Areas: guard, guard-http, mcp-proxy, chain, probe, tailer, pages, export, footprint, exporter, checkpoint
//! (all when none is named), `soak` (only when named: it runs for `BENCH_SOAK_SECS`,
//! see soak.rs), `checkpoint-writer` (only when named: what a checkpoint costs the guard on SQLite,
//! see checkpoint_writer.rs) and `attack` (only when named: the reads during issue 47's
//! attack on a release `serve`, see attack.rs).
//!
//! Environment: `BENCH_SCALE` (`small`, the default, or `full`: 1 M keys / 10 M
//! attempts, 10 M records for the backlog), `BENCH_KEYS` / `BENCH_BACKLOG_RECORDS` to
//! override, `BENCH_ROUNDS` × `BENCH_SLICE_MS` (interleaved slices per side, default
//! 10 × 500 ms), `TEST_DATABASE_URL` (an existing PostgreSQL; otherwise a throwaway
//! cluster is started as in the tests), `BENCH_BACKENDS` (`postgres`, `sqlite` or
//! both, comma-separated; default both) for the areas that run on both backends,
//! `BENCH_PG_POOL` (PostgreSQL pool size, default `StoreOptions`' 16),
//! `BENCH_GUARD_SHAPES` (set: the guard area on PostgreSQL runs `guard::shapes`).

mod attack;
mod chain;
mod checkpoint;
mod checkpoint_writer;
mod export;
mod exporter;
mod guard;
mod guard_http;
mod http;
mod mcp_proxy;
mod pages;
#[path = "../../tests/it/support/pg.rs"]
#[allow(
    dead_code,
    reason = "shared with the tests; the benchmark uses part of it"
)]
mod pg;
mod probe;
mod report;
mod seed;
#[path = "../../tests/it/support/attack.rs"]
mod shared_attack;
mod slices;
mod soak;
mod soak_diag;
mod tailer;

use idemwatch::store::{Store, StoreOptions};

async fn fresh_postgres(tag: &str) -> (Store, String) {
    let admin = pg::admin_url()
        .await
        .unwrap_or_else(|why| panic!("PostgreSQL is needed for benchmarks: {why}"));
    let name = format!("idemwatch_bench_{tag}_{}", std::process::id());
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
    // The pool `serve` and the library open by default (16), unless `BENCH_PG_POOL`
    // says otherwise: how many backends run at once decides the tail on a small
    // machine, so the figures are for the size users run (docs/PERFORMANCE.md, "A warm
    // start, the noise, and the pool").
    let defaults = StoreOptions::default();
    let store = Store::connect(
        &url,
        &StoreOptions {
            max_connections: std::env::var("BENCH_PG_POOL")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(defaults.max_connections),
            ..defaults
        },
    )
    .await
    .unwrap();
    store.migrate().await.unwrap();
    (store, url)
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
    let named = |area: &str| areas.iter().any(|a| a == area);
    let scale = Scale::from_env();
    let plan = slices::Plan::from_env();
    println!("scale: {scale:?}; {plan:?}");
    let mut figures = Vec::new();
    let backends = std::env::var("BENCH_BACKENDS").unwrap_or_default();
    let on =
        |backend: &str| backends.is_empty() || backends.split(',').any(|b| b.trim() == backend);
    if wants("guard") {
        if on("postgres") {
            let (pg, _) = fresh_postgres("guard").await;
            if std::env::var("BENCH_GUARD_SHAPES").is_ok() {
                guard::shapes(&pg, plan, &mut figures).await;
            } else {
                guard::run(&pg, "PostgreSQL", plan, &mut figures).await;
            }
        }
        if on("sqlite") {
            let dir = tempfile::tempdir().unwrap();
            let lite = fresh_sqlite(dir.path()).await;
            guard::run(&lite, "SQLite", plan, &mut figures).await;
        }
    }
    if named("checkpoint-writer") {
        let dir = tempfile::tempdir().unwrap();
        let lite = fresh_sqlite(dir.path()).await;
        checkpoint_writer::run(&lite, &mut figures).await;
    }
    if wants("probe") {
        let keys = std::env::var("BENCH_PROBE_KEYS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20_000);
        let (pg, _) = fresh_postgres("probe").await;
        probe::run(&pg, "PostgreSQL", keys, plan, &mut figures).await;
        let dir = tempfile::tempdir().unwrap();
        let lite = fresh_sqlite(dir.path()).await;
        probe::run(&lite, "SQLite", keys, plan, &mut figures).await;
    }
    if wants("guard-http") {
        let (pg, _) = fresh_postgres("guard_http").await;
        guard_http::run(&pg, "PostgreSQL", plan, &mut figures).await;
        let dir = tempfile::tempdir().unwrap();
        let lite = fresh_sqlite(dir.path()).await;
        guard_http::run(&lite, "SQLite", plan, &mut figures).await;
    }
    if wants("mcp-proxy") {
        if on("postgres") {
            let (pg, _) = fresh_postgres("mcp_proxy").await;
            mcp_proxy::run(&pg, "PostgreSQL", plan, true, &mut figures).await;
        }
        if on("sqlite") {
            let dir = tempfile::tempdir().unwrap();
            let lite = fresh_sqlite(dir.path()).await;
            mcp_proxy::run(&lite, "SQLite", plan, !on("postgres"), &mut figures).await;
        }
    }
    if wants("tailer") {
        let (pg, url) = fresh_postgres("tailer").await;
        tailer::ingest(&pg, plan, scale.tail_rows, &mut figures).await;
        tailer::lag(&pg, &url, 2000, 10, &mut figures).await;
    }
    if wants("chain") {
        chain::run(200_000, &mut figures);
    }
    if wants("checkpoint") {
        let (pg, _) = fresh_postgres("checkpoint").await;
        let took = seed::chains(&pg, 0, scale.keys, true).await;
        figures.push(report::Figure::plain(
            format!("seeding {} keys / {} attempts", scale.keys, scale.keys * 10),
            "s",
            took,
            "for the checkpoint area: real chains (verify_chains.sql)".into(),
            None,
        ));
        checkpoint::run(&pg, scale.keys, &mut figures).await;
    }
    let seeded = ["pages", "export", "footprint", "exporter"];
    if seeded.iter().any(|a| wants(a)) {
        let (pg, url) = fresh_postgres("seeded").await;
        let version: String = sqlx::query_scalar("SELECT version()")
            .fetch_one(seed::pg(&pg))
            .await
            .unwrap();
        println!("{version}");
        let took = seed::seed(&pg, 0, scale.keys, 10, scale.unknown, true).await;
        figures.push(report::Figure::plain(
            format!("seeding {} keys / {} attempts", scale.keys, scale.keys * 10),
            "s",
            took,
            "INSERT … SELECT generate_series, indexes rebuilt after".into(),
            None,
        ));
        if wants("pages") {
            pages::run(&pg, scale.keys, scale.unknown, plan, 8, &mut figures).await;
        }
        let bin = (wants("export") || wants("footprint")).then(export::release_binary);
        if let Some(bin) = &bin {
            if wants("export") {
                let sizes = [100_000, scale.keys * 10];
                export::run(&pg, &url, bin, &sizes, &mut figures).await;
            }
            if wants("footprint") {
                export::footprint(&url, bin, &mut figures).await;
            }
            if wants("export") {
                // Last: it leaves a checkpoint behind.
                export::with_evidence(&pg, &url, bin, &mut figures).await;
            }
        }
        if wants("exporter") {
            exporter::scrape(&pg, plan, &mut figures).await;
            if scale.backlog_records > scale.keys {
                let took = seed::seed(&pg, scale.keys, scale.backlog_records, 10, 0, false).await;
                figures.push(report::Figure::plain(
                    format!("seeding records up to {}", scale.backlog_records),
                    "s",
                    took,
                    "records only (no attempts) for the backlog figure".into(),
                    None,
                ));
            }
            exporter::backlog_refresh(&pg, plan.rounds, scale.backlog_records, &mut figures).await;
        }
    }
    if named("attack") {
        let (pg, url) = fresh_postgres("attack").await;
        attack::run(&pg, &url, &mut figures).await;
    }
    if named("soak") {
        let plan = soak::SoakPlan::from_env();
        if let Ok(path) = std::env::var("BENCH_SOAK_REPLAY") {
            soak::report_saved(&path, &plan, &mut figures);
        } else {
            let (pg, url) = fresh_postgres("soak").await;
            soak::run(&pg, &url, &plan, &mut figures).await;
        }
    }
    report::print(&figures);
}

#[derive(Debug, Clone, Copy)]
struct Scale {
    keys: u64,
    unknown: u64,
    backlog_records: u64,
    tail_rows: u64,
}

impl Scale {
    fn from_env() -> Scale {
        let full = std::env::var("BENCH_SCALE").is_ok_and(|s| s == "full");
        let get = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(default)
        };
        let (keys, records, tail) = if full {
            (1_000_000, 10_000_000, 500_000)
        } else {
            (100_000, 1_000_000, 100_000)
        };
        Scale {
            keys: get("BENCH_KEYS", keys),
            unknown: 10_000,
            backlog_records: get("BENCH_BACKLOG_RECORDS", records),
            tail_rows: get("BENCH_TAIL_ROWS", tail),
        }
    }
}
