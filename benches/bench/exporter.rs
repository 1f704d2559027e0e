//! The exporter: rendering /metrics at 1,000 series, and the backlog refresh next to
//! the naive full-table `count(*) … GROUP BY` a hand-rolled SQL exporter would run.

use super::http::{self, Pool};
use super::report::{Figure, Latencies};
use super::seed;
use super::slices::{Plan, alternate, alternate_each};
use chrono::Utc;
use idemwatch::metrics::{Metrics, backlog};
use idemwatch::store::Store;
use idemwatch::web::{self, AppState};
use std::sync::Arc;
use std::time::Instant;

/// Series in the text format: every line that is not a comment.
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// Metrics with at least `target` series: tools added until the text has that many.
fn metrics_with(target: usize) -> Arc<Metrics> {
    let m = Arc::new(Metrics::default());
    let mut n = 0;
    while series(&m.render().unwrap()) < target {
        m.seed(&[format!("tool_{n:03}")], &[]);
        n += 1;
    }
    m
}

pub async fn scrape(store: &Store, plan: Plan, figures: &mut Vec<Figure>) {
    let m = metrics_with(1000);
    let text = m.render().unwrap();
    let n = series(&text);
    let (render, _) = alternate_each(
        200,
        || async {
            std::hint::black_box(m.render().unwrap());
        },
        || async {},
    )
    .await;
    figures.push(Figure::plain(
        format!("Metrics::render, {n} series"),
        "ms p99",
        render.p99_ms(),
        format!("p50 {:.3} ms, {} bytes", render.p50_ms(), text.len()),
        Some(("<= 5 ms", render.p99_ms() <= 5.0)),
    ));
    let addr = http::serve(web::app(AppState::with_metrics(store.clone(), m))).await;
    let pool = Pool::new(addr, 1).await;
    let p = pool.clone();
    let scrape = move || {
        let p = p.clone();
        async move {
            p.get("/metrics", 200).await;
        }
    };
    let p = pool.clone();
    let health = move || {
        let p = p.clone();
        async move {
            p.get("/healthz", 200).await;
        }
    };
    let (s, h) = alternate(plan, 1, scrape, health).await;
    let mut f = Figure::ratio(
        format!("GET /metrics over HTTP, {n} series, 1 client"),
        "ms p99",
        s.latencies.p99_ms(),
        h.latencies.p99_ms(),
        Some(("<= 5 ms", s.latencies.p99_ms() <= 5.0)),
    );
    f.note = format!(
        "baseline GET /healthz on the same connection; scrape p50 {:.3} ms, {:.0} scrapes/s",
        s.latencies.p50_ms(),
        s.median_rate()
    );
    figures.push(f);
}

/// What an exporter without the partial index would run on every scrape.
const NAIVE: &str =
    "SELECT tool, tenant, status, count(*) FROM idempotency_records GROUP BY tool, tenant, status";

/// `rounds` blocks of ten refreshes and one naive scan, alternating which goes first:
/// a refresh is cheap, so it gets enough samples for a p99; every call is timed alone.
pub async fn backlog_refresh(
    store: &Store,
    rounds: usize,
    records: u64,
    figures: &mut Vec<Figure>,
) {
    let m = Metrics::default();
    let pool = seed::pg(store);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for which in [round % 2, 1 - round % 2] {
            if which == 0 {
                for _ in 0..10 {
                    let t = Instant::now();
                    backlog::refresh(store, &m, Utc::now()).await.unwrap();
                    ours.push(t.elapsed());
                }
            } else {
                let t = Instant::now();
                let rows: Vec<(String, String, String, i64)> =
                    sqlx::query_as(NAIVE).fetch_all(pool).await.unwrap();
                std::hint::black_box(rows);
                theirs.push(t.elapsed());
            }
        }
    }
    let (refresh, naive) = (Latencies::new(ours), Latencies::new(theirs));
    let unknown: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idempotency_records WHERE status = 'UNKNOWN'")
            .fetch_one(pool)
            .await
            .unwrap();
    let mut f = Figure::ratio(
        format!("backlog refresh, {records} records, {unknown} UNKNOWN (PostgreSQL)"),
        "ms p99",
        refresh.p99_ms(),
        naive.p99_ms(),
        Some(("<= 20 ms", refresh.p99_ms() <= 20.0)),
    );
    f.note = format!(
        "refresh p50 {:.2} ms, p90 {:.2} ms ({} refreshes); naive count(*) GROUP BY p50 {:.0} ms ({} scans); naive/refresh p50 = {:.0}x",
        refresh.p50_ms(),
        refresh.quantile_ms(0.90),
        refresh.len(),
        naive.p50_ms(),
        naive.len(),
        naive.p50_ms() / refresh.p50_ms()
    );
    figures.push(f);
}
