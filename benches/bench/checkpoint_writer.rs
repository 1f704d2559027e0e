//! Experiment (`checkpoint-writer`, only when named): what a signed checkpoint costs the
//! guard on SQLite, whose one writer every guard call needs.
//!
//! The guard runs open-loop at `BENCH_CKPT_RATE` calls a second (default 300: issue
//! 48's envelope for SQLite, well below the one writer's ~770 calls/s on 2 cores, so
//! the queue is empty in between; at 800 the calls queue for seconds and the figure
//! measures the queue, not the checkpoint) on a store file. Every `BENCH_CKPT_SECS`
//! seconds (default 30, ~9,000 new keys at the default rate) a checkpoint is written
//! while the load goes on, `BENCH_CKPT_ROUNDS` times (default 4). For each checkpoint:
//! its time, and the latency of the guard calls offered during it against those
//! offered in a window as long ending a second before it (the baseline, same run, same
//! load). A checkpoint that holds the writer shows as calls offered during it that
//! wait for it.

use super::guard::{Instant0, call};
use super::report::{Figure, Latencies};
use idemwatch::evidence::Checkpointer;
use idemwatch::guard::{Guard, GuardSettings, SystemClock};
use idemwatch::store::Store;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The gap between the baseline's calls and the checkpoint's start.
const SETTLE: Duration = Duration::from_secs(1);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub async fn run(store: &Store, figures: &mut Vec<Figure>) {
    let rate = env("BENCH_CKPT_RATE", 300);
    let every = Duration::from_secs(env("BENCH_CKPT_SECS", 30));
    let rounds = env("BENCH_CKPT_ROUNDS", 4);
    let writer = Checkpointer::new(
        store.clone(),
        ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        Arc::new(SystemClock),
    );
    let guard = Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    );
    // (offered at, latency) of every call, offered since the start.
    let calls: Arc<Mutex<Vec<(Instant, Duration)>>> = Arc::default();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = {
        let (calls, failed) = (calls.clone(), failed.clone());
        tokio::spawn(async move {
            let in_flight = Arc::new(tokio::sync::Semaphore::new(4096));
            let per_tick = rate.div_ceil(100);
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while !*stopped.borrow() {
                tick.tick().await;
                for _ in 0..per_tick {
                    let permit = in_flight.clone().acquire_owned().await.unwrap();
                    let (g, calls, failed) = (guard.clone(), calls.clone(), failed.clone());
                    tokio::spawn(async move {
                        let offered = Instant::now();
                        if g.run(&call("ckpt"), &Instant0).await.is_err() {
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        calls.lock().unwrap().push((offered, offered.elapsed()));
                        drop(permit);
                    });
                }
            }
            // Every call finishes before the figures are read.
            let _ = in_flight.acquire_many(4096).await;
        })
    };
    println!(
        "checkpoint-writer: guard at {rate} calls/s, a checkpoint every {every:?}, {rounds} rounds"
    );
    let mut windows = Vec::new();
    for _ in 0..rounds {
        tokio::time::sleep(every).await;
        let began = Instant::now();
        let c = writer
            .checkpoint()
            .await
            .unwrap()
            .expect("keys changed since the last checkpoint");
        windows.push((began, began.elapsed(), c.body.leaves_added));
    }
    // Calls offered during the last checkpoint finish before the figures are read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).unwrap();
    load.await.unwrap();
    let calls = calls.lock().unwrap();
    let within = |from: Instant, to: Instant| {
        Latencies::new(
            calls
                .iter()
                .filter(|(at, _)| *at >= from && *at < to)
                .map(|(_, d)| *d)
                .collect(),
        )
    };
    for (n, (began, took, leaves)) in windows.into_iter().enumerate() {
        let during = within(began, began + took);
        // Ending a second before: the calls offered just before a checkpoint that holds
        // the writer wait for it too.
        let before = within(began - SETTLE - took, began - SETTLE);
        let round = n + 1;
        figures.push(Figure::plain(
            format!("SQLite checkpoint {round}: its time"),
            "ms",
            took.as_secs_f64() * 1000.0,
            format!("{leaves} leaves, guard at {rate} calls/s meanwhile"),
            None,
        ));
        figures.push(Figure::ratio(
            format!(
                "SQLite checkpoint {round}: guard max latency of the {} calls offered during it (baseline: the {} offered before)",
                during.len(),
                before.len()
            ),
            "ms",
            during.quantile_ms(1.0),
            before.quantile_ms(1.0),
            None,
        ));
        figures.push(Figure::ratio(
            format!("SQLite checkpoint {round}: guard p50 latency during it (baseline: before)"),
            "ms",
            during.p50_ms(),
            before.p50_ms(),
            None,
        ));
    }
    let failed = failed.load(std::sync::atomic::Ordering::Relaxed);
    figures.push(Figure::plain(
        "checkpoint-writer: guard calls that failed".into(),
        "calls",
        failed as f64,
        format!("of {}", calls.len()),
        Some(("0", failed == 0)),
    ));
}
