//! The tailer: ingest rate over pre-seeded attempt rows against a plain loop of the
//! same batch query, and commit-to-metric lag under a steady guard load.

use super::guard::{Instant0, call};
use super::report::{Figure, Latencies};
use super::seed;
use super::slices::{Plan, median};
use idemwatch::guard::{Guard, GuardSettings, SystemClock};
use idemwatch::metrics::Metrics;
use idemwatch::store::{Store, StoreOptions};
use idemwatch::tail::{TailSettings, TailSource, Tailer};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Ingest: each round appends `rows` attempt rows (10 per key, one transaction), then
/// times the tailer catching up over them and, in alternating order, a plain loop of
/// `tail_batch` reading the same rows from the same position (query only, no metrics).
pub async fn ingest(store: &Store, plan: Plan, rows: u64, figures: &mut Vec<Figure>) {
    let settings = TailSettings::default();
    let batch = settings.batch_size;
    let mut tailer = Tailer::new(Arc::new(Metrics::default()), settings);
    tailer.poll(store).await.unwrap();
    let (mut tail_rates, mut base_rates) = (Vec::new(), Vec::new());
    let per_key = 10;
    let keys = rows / per_key;
    for round in 0..plan.rounds as u64 {
        let from = 10_000_000 + round * keys;
        seed::append(store, from, from + keys, per_key).await;
        let start = tailer.position().unwrap();
        for which in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            let n = if which == 0 {
                tailer.catch_up(store).await.unwrap()
            } else {
                let (mut at, mut n) = (start, 0u64);
                loop {
                    let b = store.tail_batch(at, batch).await.unwrap();
                    n += b.len() as u64;
                    match b.last() {
                        Some(last) if b.len() >= batch as usize => at = last.position(),
                        _ => break,
                    }
                }
                n
            };
            assert_eq!(n, keys * per_key, "every appended row is read once");
            let rate = n as f64 / t.elapsed().as_secs_f64();
            if which == 0 {
                tail_rates.push(rate);
            } else {
                base_rates.push(rate);
            }
        }
    }
    let (rate, base) = (median(&tail_rates), median(&base_rates));
    figures.push(Figure::ratio(
        format!("tailer ingest, batches of {batch}, {rows} rows a round (PostgreSQL)"),
        "rows/s",
        rate,
        base,
        Some((">= 50,000 rows/s", rate >= 50_000.0)),
    ));
}

/// Lag: guard operations at `rate` a second for `seconds`, the tailer running as
/// `serve` runs it (`Tailer::run`, default settings). A watcher reads the
/// `idempotency_transitions_total{status="DONE"}` counter every millisecond; the
/// k-th completion (in the order the guard calls returned) is observed when the
/// counter reaches k. Lag = observed − returned (the return follows the commit by a
/// round trip, so this slightly understates it).
pub async fn lag(store: &Store, url: &str, rate: u64, seconds: u64, figures: &mut Vec<Figure>) {
    let metrics = Arc::new(Metrics::default());
    let slot = metrics.slot("issue_refund", "bench");
    let done = metrics
        .families()
        .idempotency_transitions_total
        .with_label_values(&slot.values(&["DONE"]));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tailer = Tailer::new(metrics.clone(), TailSettings::default());
    // As `serve` does: the tailer on a 2-connection pool of its own, so that guard
    // calls waiting for connections do not queue it behind them.
    let options = StoreOptions {
        max_connections: 2,
        ..StoreOptions::default()
    };
    let tail_store = Store::connect(url, &options).await.unwrap();
    let tail_task = tokio::spawn(tailer.run(tail_store, stop_rx.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = done.get();

    let observed = Arc::new(Mutex::new(Vec::<(Instant, u64)>::new()));
    let watcher = {
        let (observed, done, stop) = (observed.clone(), done.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let mut last = base;
            while !*stop.borrow() {
                let c = done.get();
                if c != last {
                    observed.lock().unwrap().push((Instant::now(), c - base));
                    last = c;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };

    let guard = Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    );
    let completed = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let (tick, per_tick) = (Duration::from_millis(5), rate / 200);
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut skipped = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        ticks.tick().await;
        for _ in 0..per_tick {
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                skipped += 1;
                continue;
            };
            let (g, completed) = (guard.clone(), completed.clone());
            tasks.spawn(async move {
                g.run(&call("lag"), &Instant0).await.unwrap();
                completed.lock().unwrap().push(Instant::now());
                drop(permit);
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let offered = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send(true).unwrap();
    watcher.await.unwrap();
    tail_task.await.unwrap();

    let completed = completed.lock().unwrap().clone();
    let observed = observed.lock().unwrap().clone();
    let mut lags = Vec::new();
    let mut j = 0;
    let mut unseen = 0;
    for (k, at) in completed.iter().enumerate() {
        while j < observed.len() && observed[j].1 < k as u64 + 1 {
            j += 1;
        }
        match observed.get(j) {
            Some((seen, _)) => lags.push(seen.saturating_duration_since(*at)),
            None => unseen += 1,
        }
    }
    let lags = Latencies::new(lags);
    let achieved = completed.len() as f64 / offered.as_secs_f64();
    figures.push(Figure::plain(
        format!("tailer commit-to-metric lag p99 at {rate} guard ops/s offered (PostgreSQL)"),
        "ms",
        lags.p99_ms(),
        format!(
            "p50 {:.1} ms; achieved {achieved:.0} ops/s ({} ops, {skipped} not offered: 64 in flight); {unseen} never seen",
            lags.p50_ms(),
            completed.len()
        ),
        Some(("<= 250 ms", lags.p99_ms() <= 250.0 && unseen == 0)),
    ));
}
