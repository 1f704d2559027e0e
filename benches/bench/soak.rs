//! `soak`: the service as production runs it, for a while, sampled over time.
//!
//! `run_server` (what `serve` runs: the app, the tailer and the backlog refresher on
//! their own pool, the pruner, the checkpointer) on a fresh PostgreSQL database, with retention
//! compressed so rows expire during the run, and the guard driven in-process at a
//! fixed offered rate with a mix of new calls, replays, timeouts (the provider's
//! error is ambiguous: the key goes UNKNOWN) and takeovers (a retry of a timed-out
//! call takes the key over and reconciles). Every sample interval it records the
//! tables' and indexes' sizes, the guard's p99, the tail lag (`/metrics`), the key
//! page's p99 (`GET /keys/{key}` on the served app) and how far the pruner is behind
//! (the oldest prunable DONE key's age beyond the cutoff).
//!
//! Environment: `BENCH_SOAK_SECS` (duration, default 3600), `BENCH_SOAK_SAMPLE_SECS`
//! (60), `BENCH_SOAK_RATE` (offered guard operations/s, 1000), `BENCH_SOAK_RETAIN`
//! (DONE/FAILED retention and the provider's key retention, `3m`: three retention
//! periods fit before the reference sample, so the tables have filled and autovacuum
//! has reused the deleted rows' space by then; with `10m` the 10th minute is still
//! filling, docs/PERFORMANCE.md),
//! `BENCH_SOAK_PRUNE_INTERVAL` (`1m`), `BENCH_SOAK_PRUNE_BATCH` (`--prune-batch-size`,
//! 500, the default), `BENCH_SOAK_CHECKPOINT_INTERVAL` (`--checkpoint-interval` with a
//! signing key made for the run, `1m` as `serve`'s default; `0`: no checkpoints, as
//! the runs before 2026-12-05), `BENCH_SOAK_STEADY_SECS` (the reference
//! sample the later ones are compared with, 600). Writes
//! `docs/performance/soak-<date>.json` and `.svg`. `BENCH_SOAK_REPLAY=<such a file>`
//! reports a saved run's samples instead of running (`report_saved`).

use super::http::Client;
use super::report::{Figure, Latencies};
use clap::Parser;
use idemwatch::cli::{ServeArgs, run_server};
use idemwatch::guard::{
    Guard, GuardSettings, IdempotencyKey, Intent, Operation, SystemClock, ToolCall,
};
use idemwatch::store::Store;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Clone)]
pub struct SoakPlan {
    pub duration: Duration,
    pub sample: Duration,
    pub rate: u64,
    pub retain: String,
    pub prune_interval: String,
    /// `--prune-batch-size`: keys per pruner transaction.
    pub prune_batch: String,
    /// `--checkpoint-interval`; `0`: no signing key, no checkpoints.
    pub checkpoint_interval: String,
    pub steady: Duration,
}

impl SoakPlan {
    pub fn from_env() -> SoakPlan {
        let secs = |name: &str, default: u64| {
            Duration::from_secs(
                std::env::var(name)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(default),
            )
        };
        let text = |name: &str, default: &str| std::env::var(name).unwrap_or(default.into());
        SoakPlan {
            duration: secs("BENCH_SOAK_SECS", 3600),
            sample: secs("BENCH_SOAK_SAMPLE_SECS", 60),
            rate: secs("BENCH_SOAK_RATE", 1000).as_secs(),
            retain: text("BENCH_SOAK_RETAIN", "3m"),
            prune_interval: text("BENCH_SOAK_PRUNE_INTERVAL", "1m"),
            prune_batch: text("BENCH_SOAK_PRUNE_BATCH", "500"),
            checkpoint_interval: text("BENCH_SOAK_CHECKPOINT_INTERVAL", "1m"),
            steady: secs("BENCH_SOAK_STEADY_SECS", 600),
        }
    }
}

/// The provider: answers at once, or (for a call marked `"timeout": true`) fails
/// ambiguously the first time; its lookup finds every effect, so a takeover
/// reconciles to DONE.
struct SoakOp {
    retention: chrono::TimeDelta,
}

impl Operation for SoakOp {
    type Error = String;
    fn key_retention(&self) -> chrono::TimeDelta {
        self.retention
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    async fn execute(&self, _: &IdempotencyKey, args: &Value) -> Result<Value, String> {
        if args["timeout"] == json!(true) {
            return Err("provider timed out".into());
        }
        Ok(json!({"refund_id": "rf_soak"}))
    }
    async fn find_by_key(&self, _: &IdempotencyKey) -> Result<Option<Value>, String> {
        Ok(Some(json!({"refund_id": "rf_soak", "found": true})))
    }
}

fn soak_call(n: u64, timeout: bool) -> ToolCall {
    ToolCall {
        intent: Intent {
            tenant: format!("tenant-{}", n % 20),
            tool: "issue_refund".into(),
            workflow_id: format!("soak-{n}"),
            step_id: "1".into(),
            intent_id: format!("refund:{n}"),
        },
        business_ref: Some(format!("order:S-{n}")),
        args: json!({"order": format!("S-{n}"), "amount_p": 4500, "timeout": timeout}),
        actor: "soak".into(),
    }
}

/// One sample interval's figures.
#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct Sample {
    pub at_s: u64,
    pub ops_per_s: f64,
    pub errors: u64,
    /// Of `errors`, the offers dropped because 256 calls were in flight.
    #[serde(default)]
    pub dropped: u64,
    pub guard_p50_ms: f64,
    pub guard_p99_ms: f64,
    pub key_page_p99_ms: f64,
    pub tail_lag_max_ms: f64,
    pub records: i64,
    pub attempts: i64,
    pub records_mib: f64,
    pub records_indexes_mib: f64,
    pub attempts_mib: f64,
    pub attempts_indexes_mib: f64,
    pub pruner_behind_s: f64,
    /// The evidence tables (`evidence_*`: leaves, receipts, checkpoints, block roots)
    /// with their indexes. 0 in the files of runs before 2026-12-05.
    #[serde(default)]
    pub evidence_mib: f64,
    /// Checkpoints written in the interval and their mean time
    /// (`idemwatch_checkpoint_duration_seconds`); 0 without checkpoints.
    #[serde(default)]
    pub checkpoints: u64,
    #[serde(default)]
    pub checkpoint_mean_s: f64,
    /// Age of the newest checkpoint when sampled (0: none yet).
    #[serde(default)]
    pub checkpoint_age_s: f64,
    /// Where the interval's time went (`soak_diag`): CPU by process group, buffer
    /// reads, autovacuum runs, every table's size, the costliest statements. Absent
    /// from the files of runs before 2026-12-04 22:30.
    #[serde(default)]
    pub diag: Value,
}

#[derive(Default)]
struct Window {
    guard: Vec<Duration>,
    page: Vec<Duration>,
    lag_ms: Vec<f64>,
    done: u64,
    errors: u64,
    dropped: u64,
    /// The first failed call's error of the interval, for the log.
    first_error: Option<String>,
    /// When the interval's first and last offers were dropped, for the log.
    drops: Option<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)>,
}

const SIZES: &str = "SELECT pg_table_size('idempotency_records'), pg_indexes_size('idempotency_records'), \
    pg_table_size('idempotency_attempts'), pg_indexes_size('idempotency_attempts'), \
    (SELECT count(*) FROM idempotency_records), (SELECT count(*) FROM idempotency_attempts)";

const EVIDENCE_SIZE: &str = "SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint \
    FROM pg_stat_user_tables WHERE relname LIKE 'evidence\\_%'";
const NEWEST_CHECKPOINT_AGE: &str = "SELECT coalesce(extract(epoch FROM (now() - max(created_at)))::float8, 0) \
    FROM evidence_checkpoints";

/// Seconds by which the oldest DONE key the pruner may delete is past its cutoff.
const BEHIND: &str = "SELECT coalesce(extract(epoch FROM ($1 - min(updated_at)))::float8, 0) \
    FROM idempotency_records WHERE status = 'DONE' AND updated_at < $1 \
    AND provider_retention_until <= $2";

pub async fn run(store: &Store, url: &str, plan: &SoakPlan, figures: &mut Vec<Figure>) {
    // A signing key made for the run, as an operator's `new-signing-key` would.
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("signing.pem");
    std::fs::write(
        &key_file,
        idemwatch::evidence::keys::signing_key_pem(&idemwatch::evidence::keys::generate()),
    )
    .unwrap();
    let mut argv = vec![
        "soak".to_string(),
        "--checkpoint-interval".into(),
        plan.checkpoint_interval.clone(),
    ];
    if plan.checkpoint_interval != "0" {
        argv.extend(["--signing-key".into(), key_file.display().to_string()]);
    }
    let args = Args::parse_from(
        argv.into_iter().chain(
            [
                "--database-url",
                url,
                "--retain-done",
                &plan.retain,
                "--retain-failed",
                &plan.retain,
                "--max-workflow-duration",
                &plan.retain,
                "--max-provider-key-retention",
                &plan.retain,
                "--prune-interval",
                &plan.prune_interval,
                "--prune-batch-size",
                &plan.prune_batch,
            ]
            .map(String::from),
        ),
    )
    .serve;
    let retention = args.retention.checked().await.unwrap();
    let retain = retention.retain_done.0;
    let prune_every = retention.interval.0;
    let auth = args.auth.authenticator(args.listen).unwrap();
    let tools = args.guard.tools().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = {
        let store = store.clone();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            run_server(
                &args,
                retention,
                auth,
                tools,
                store,
                listener,
                axum::Router::new(),
                shutdown,
            )
            .await
        })
    };
    println!(
        "soak: {:?} at {} ops/s offered, DONE kept {}, pruner every {} ({} keys a batch), checkpoints every {}, sample every {:?}",
        plan.duration,
        plan.rate,
        plan.retain,
        plan.prune_interval,
        plan.prune_batch,
        plan.checkpoint_interval,
        plan.sample
    );

    let guard = Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    );
    let op = Arc::new(SoakOp { retention: retain });
    let window = Arc::new(Mutex::new(Window::default()));
    let recent: Arc<Mutex<VecDeque<ToolCall>>> = Arc::default();
    let timed_out: Arc<Mutex<VecDeque<ToolCall>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started + plan.duration;
    let in_flight = Arc::new(tokio::sync::Semaphore::new(256));

    // The load: every 10 ms, rate / 100 operations (open loop; an offer that finds
    // 256 in flight is dropped and counted as an error).
    let load = {
        let (window, recent, timed_out, next, op) = (
            window.clone(),
            recent.clone(),
            timed_out.clone(),
            next.clone(),
            op.clone(),
        );
        let guard = guard.clone();
        let per_tick = plan.rate.div_ceil(100);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while Instant::now() < end {
                tick.tick().await;
                for _ in 0..per_tick {
                    let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                        let mut w = lock(&window);
                        w.errors += 1;
                        w.dropped += 1;
                        let now = chrono::Utc::now();
                        w.drops = Some(w.drops.map_or((now, now), |(first, _)| (first, now)));
                        continue;
                    };
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let (call, kind) = match n % 100 {
                        0..80 => (soak_call(n, false), "new"),
                        80..90 => match lock(&recent).get((n as usize * 7) % 4096).cloned() {
                            Some(c) => (c, "replay"),
                            None => (soak_call(n, false), "new"),
                        },
                        90..95 => (soak_call(n, true), "timeout"),
                        _ => match lock(&timed_out).pop_front() {
                            Some(c) => (c, "takeover"),
                            None => (soak_call(n, false), "new"),
                        },
                    };
                    let (g, op, window, recent, timed_out) = (
                        guard.clone(),
                        op.clone(),
                        window.clone(),
                        recent.clone(),
                        timed_out.clone(),
                    );
                    tokio::spawn(async move {
                        let t = Instant::now();
                        let result = g.run(&call, op.as_ref()).await;
                        let took = t.elapsed();
                        let ok = match (kind, &result) {
                            (_, Ok(_)) => true,
                            // A timeout leaves the key UNKNOWN: the expected answer.
                            ("timeout", Err(_)) => true,
                            _ => false,
                        };
                        {
                            let mut w = lock(&window);
                            w.guard.push(took);
                            w.done += 1;
                            if !ok {
                                w.errors += 1;
                                if w.first_error.is_none() {
                                    w.first_error = Some(format!("{kind}: {:?}", result.err()));
                                }
                            }
                        }
                        match kind {
                            "new" => {
                                let mut r = lock(&recent);
                                r.push_back(call);
                                if r.len() > 4096 {
                                    r.pop_front();
                                }
                            }
                            "timeout" => lock(&timed_out).push_back(call),
                            _ => {}
                        }
                        drop(permit);
                    });
                }
            }
        })
    };

    // The key page, one client, every 50 ms, on a recently written key.
    let pages = {
        let (window, recent) = (window.clone(), recent.clone());
        tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut i = 0usize;
            while Instant::now() < end {
                tick.tick().await;
                i += 1;
                let key = lock(&recent)
                    .get(i * 13 % 4096)
                    .map(|c| c.intent.key().unwrap().to_string());
                let Some(key) = key else { continue };
                let t = Instant::now();
                let (status, _) = client.get(&format!("/keys/{key}")).await;
                let took = t.elapsed();
                let mut w = lock(&window);
                // A key pruned since it was picked answers 404: still a page served.
                if status == 200 || status == 404 {
                    w.page.push(took);
                } else {
                    w.errors += 1;
                }
            }
        })
    };

    // The tail lag as the service reports it, every second.
    let lags = {
        let window = window.clone();
        tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < end {
                tick.tick().await;
                let body = client.get_text("/metrics").await;
                if let Some(v) = gauge(&body, "idemwatch_tail_lag_seconds") {
                    lock(&window).lag_ms.push(v * 1000.0);
                }
            }
        })
    };

    let pg = super::seed::pg(store);
    let mut diag = super::soak_diag::Diag::start(pg.clone()).await;
    let mut samples = Vec::new();
    let mut last = Instant::now();
    let mut checkpoints_before = (0.0, 0.0);
    while Instant::now() < end {
        tokio::time::sleep(plan.sample.min(end - Instant::now())).await;
        let w = std::mem::take(&mut *lock(&window));
        let secs = last.elapsed().as_secs_f64();
        last = Instant::now();
        let sizes: (i64, i64, i64, i64, i64, i64) =
            sqlx::query_as(SIZES).fetch_one(pg).await.unwrap();
        let now = chrono::Utc::now();
        let behind: f64 = sqlx::query_scalar(BEHIND)
            .bind(now - retain)
            .bind(now)
            .fetch_one(pg)
            .await
            .unwrap();
        let evidence: i64 = sqlx::query_scalar(EVIDENCE_SIZE)
            .fetch_one(pg)
            .await
            .unwrap();
        let checkpoint_age_s: f64 = sqlx::query_scalar(NEWEST_CHECKPOINT_AGE)
            .fetch_one(pg)
            .await
            .unwrap();
        // A connection of its own each time: the server closes one idle for a minute.
        let body = Client::connect(addr).await.get_text("/metrics").await;
        let checkpoints_now = (
            gauge(&body, "idemwatch_checkpoint_duration_seconds_count").unwrap_or(0.0),
            gauge(&body, "idemwatch_checkpoint_duration_seconds_sum").unwrap_or(0.0),
        );
        let checkpoints = checkpoints_now.0 - checkpoints_before.0;
        let checkpoint_time = checkpoints_now.1 - checkpoints_before.1;
        checkpoints_before = checkpoints_now;
        let (g, p) = (Latencies::new(w.guard), Latencies::new(w.page));
        let mib = |b: i64| b as f64 / 1_048_576.0;
        let s = Sample {
            at_s: started.elapsed().as_secs(),
            ops_per_s: w.done as f64 / secs,
            errors: w.errors,
            dropped: w.dropped,
            guard_p50_ms: g.p50_ms(),
            guard_p99_ms: g.p99_ms(),
            key_page_p99_ms: p.p99_ms(),
            tail_lag_max_ms: w.lag_ms.iter().copied().fold(0.0, f64::max),
            records: sizes.4,
            attempts: sizes.5,
            records_mib: mib(sizes.0),
            records_indexes_mib: mib(sizes.1),
            attempts_mib: mib(sizes.2),
            attempts_indexes_mib: mib(sizes.3),
            pruner_behind_s: behind,
            evidence_mib: mib(evidence),
            checkpoints: checkpoints as u64,
            checkpoint_mean_s: if checkpoints > 0.0 {
                checkpoint_time / checkpoints
            } else {
                0.0
            },
            checkpoint_age_s,
            diag: diag.sample().await,
        };
        if let Some(e) = &w.first_error {
            eprintln!("soak: first failed call of the interval: {e}");
        }
        if let Some((first, last)) = w.drops {
            eprintln!("soak: offers dropped from {first} to {last}");
        }
        eprintln!("soak sample: {s:?}");
        samples.push(s);
    }
    for task in [load, pages, lags] {
        task.await.unwrap();
    }
    let written: Vec<(i64, chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
        "SELECT seq, created_at, leaves_added FROM evidence_checkpoints ORDER BY seq",
    )
    .fetch_all(pg)
    .await
    .unwrap();
    for (seq, at, leaves) in written {
        eprintln!("soak: checkpoint {seq} begun at {at}, {leaves} leaves");
    }
    // Let in-flight calls finish, then stop the service.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop.send(());
    served.await.unwrap().unwrap();

    report(plan, prune_every.num_seconds() as f64, &samples, figures);
    write_files(plan, &samples);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The figures the issue names, each as its largest deviation from the reference
/// sample (the one at `plan.steady`) over the later samples.
fn report(plan: &SoakPlan, prune_every_s: f64, samples: &[Sample], figures: &mut Vec<Figure>) {
    print_table(samples);
    let reference = samples
        .iter()
        .position(|s| s.at_s + plan.sample.as_secs() / 2 >= plan.steady.as_secs())
        .unwrap_or(samples.len().saturating_sub(1));
    let later = &samples[reference..];
    type Series = fn(&Sample) -> f64;
    let series: [(&str, &str, Series); 6] = [
        ("records + indexes size", "MiB", |s| {
            s.records_mib + s.records_indexes_mib
        }),
        ("attempts + indexes size", "MiB", |s| {
            s.attempts_mib + s.attempts_indexes_mib
        }),
        ("guard p99", "ms", |s| s.guard_p99_ms),
        ("tail lag (max)", "ms", |s| s.tail_lag_max_ms),
        ("key page p99", "ms", |s| s.key_page_p99_ms),
        ("guard ops/s", "ops/s", |s| s.ops_per_s),
    ];
    for (name, series_unit, f) in series {
        let Some(first) = later.first().map(f) else {
            continue;
        };
        let worst = later
            .iter()
            .map(|s| f(s) - first)
            .fold(0.0f64, |a, d| if d.abs() > a.abs() { d } else { a });
        // A reference of 0 (a tail lag maximum with no transaction holding the tail
        // back in that minute) has no percentage: the figure is then the largest
        // change in the series' own unit, and only a flat 0 meets the band.
        let (value, unit, within) = if first == 0.0 {
            (worst, series_unit, worst == 0.0)
        } else {
            (100.0 * worst / first, "%", (worst / first).abs() <= 0.2)
        };
        figures.push(Figure::plain(
            format!("soak: {name}, largest change after {} s", later[0].at_s),
            unit,
            value,
            format!(
                "reference {first:.2} at {} s; {} samples after",
                later[0].at_s,
                later.len() - 1
            ),
            Some(("within ±20 %", within)),
        ));
    }
    windowed(plan, later, figures);
    let behind = samples
        .iter()
        .map(|s| s.pruner_behind_s)
        .fold(0.0, f64::max);
    figures.push(Figure::plain(
        "soak: pruner behind its cutoff (max over the run)".into(),
        "s",
        behind,
        format!("prune interval {prune_every_s} s"),
        Some(("<= one interval", behind <= prune_every_s)),
    ));
    evidence(plan, later, figures);
}

/// The checkpointer and the evidence tables, in runs that wrote checkpoints (or
/// receipts: the pruner writes one per key it deletes, with or without checkpoints).
/// The evidence is an append-only log: it grows with every key, by design, and its
/// size is reported against the band like the other tables', and as a rate.
fn evidence(plan: &SoakPlan, later: &[Sample], figures: &mut Vec<Figure>) {
    let (Some(first), Some(last)) = (later.first(), later.last()) else {
        return;
    };
    if first.evidence_mib > 0.0 {
        let hours = (last.at_s - first.at_s) as f64 / 3600.0;
        let growth = (last.evidence_mib - first.evidence_mib) / hours.max(1e-9);
        let ops: f64 =
            later[1..].iter().map(|s| s.ops_per_s).sum::<f64>() / (later.len() - 1).max(1) as f64;
        figures.push(Figure::plain(
            format!("soak: evidence tables + indexes, growth after {} s", first.at_s),
            "MiB/h",
            growth,
            format!(
                "{:.0} → {:.0} MiB, {:.0} bytes per guard call at {ops:.0} calls/s; an append-only log",
                first.evidence_mib,
                last.evidence_mib,
                growth * 1_048_576.0 / (ops * 3600.0).max(1.0)
            ),
            Some((
                "within ±20 %",
                (last.evidence_mib - first.evidence_mib).abs() <= 0.2 * first.evidence_mib,
            )),
        ));
    }
    let written: Vec<&Sample> = later.iter().filter(|s| s.checkpoints > 0).collect();
    if written.is_empty() {
        return;
    }
    let slowest = written
        .iter()
        .map(|s| s.checkpoint_mean_s)
        .fold(0.0, f64::max);
    let oldest = later.iter().map(|s| s.checkpoint_age_s).fold(0.0, f64::max);
    let count: u64 = written.iter().map(|s| s.checkpoints).sum();
    let interval = idemwatch::cli::parse_duration(&plan.checkpoint_interval)
        .map_or(f64::INFINITY, |d| d.as_secs_f64());
    figures.push(Figure::plain(
        "soak: checkpoint time, slowest sample's mean".into(),
        "s",
        slowest,
        format!(
            "{count} checkpoints in {} samples, every {interval} s; the newest's age at most {oldest:.0} s",
            later.len()
        ),
        Some(("< one checkpoint interval", slowest < interval)),
    ));
}

/// Samples per window of [`windowed`]: ten minutes of the default one-minute samples.
const WINDOW: Duration = Duration::from_secs(600);

/// The latency figures again, flattened over time: the median of each ten-minute
/// window's samples from the reference on, against the first window's. Not the
/// issue's band (every sample against the tenth minute's): a per-minute p99 at 1,000
/// operations/s is the 600th slowest call of its minute and moves by more than ±20 %
/// from one minute to the next with nothing changing (docs/PERFORMANCE.md, "An hour at
/// 1,000 operations/s"); a drift over the hour moves the window medians, noise does
/// not. Reported beside the band, never instead of it. A window needs at
/// least half its samples; a trailing shorter one is left out.
fn windowed(plan: &SoakPlan, later: &[Sample], figures: &mut Vec<Figure>) {
    let per_window = (WINDOW.as_secs() / plan.sample.as_secs().max(1)).max(1) as usize;
    let windows: Vec<&[Sample]> = later
        .chunks(per_window)
        .filter(|w| w.len() * 2 >= per_window)
        .collect();
    if windows.len() < 2 {
        return;
    }
    type Series = fn(&Sample) -> f64;
    let series: [(&str, Series); 3] = [
        ("guard p99", |s| s.guard_p99_ms),
        ("key page p99", |s| s.key_page_p99_ms),
        ("tail lag (max)", |s| s.tail_lag_max_ms),
    ];
    for (name, f) in series {
        let medians: Vec<f64> = windows
            .iter()
            .map(|w| {
                let mut v: Vec<f64> = w.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                let mid = v.len() / 2;
                if v.len().is_multiple_of(2) {
                    (v[mid - 1] + v[mid]) / 2.0
                } else {
                    v[mid]
                }
            })
            .collect();
        let first = medians[0];
        let worst = medians[1..]
            .iter()
            .map(|m| m - first)
            .fold(0.0f64, |a, d| if d.abs() > a.abs() { d } else { a });
        let (value, unit, within) = if first == 0.0 {
            (worst, "ms", worst == 0.0)
        } else {
            (100.0 * worst / first, "%", (worst / first).abs() <= 0.2)
        };
        let listed: Vec<String> = medians.iter().map(|m| format!("{m:.1}")).collect();
        figures.push(Figure::plain(
            format!(
                "soak: {name}, median of each {}-minute window from {} s, largest change",
                WINDOW.as_secs() / 60,
                later[0].at_s
            ),
            unit,
            value,
            format!("window medians {} ms", listed.join(", ")),
            Some(("within ±20 % (windowed; not the issue's band)", within)),
        ));
    }
}

/// The verdicts of a run already written: `BENCH_SOAK_REPLAY=docs/performance/soak-….json`
/// reads its samples and reports them as the run would have, with this version's
/// figures (the windowed ones are newer than some files). Needs no database.
pub fn report_saved(path: &str, plan: &SoakPlan, figures: &mut Vec<Figure>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let saved: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let samples: Vec<Sample> = serde_json::from_value(saved["samples"].clone())
        .unwrap_or_else(|e| panic!("{path}: samples: {e}"));
    let interval = saved["prune_interval"]
        .as_str()
        .and_then(|t| idemwatch::cli::parse_duration(t).ok())
        .unwrap_or_else(|| panic!("{path}: no prune_interval"));
    let sample = samples
        .get(1)
        .zip(samples.first())
        .map_or(plan.sample, |(b, a)| Duration::from_secs(b.at_s - a.at_s));
    let plan = SoakPlan {
        sample,
        checkpoint_interval: saved["checkpoint_interval"]
            .as_str()
            .unwrap_or("0")
            .to_string(),
        ..plan.clone()
    };
    println!("soak: the samples of {path}");
    report(&plan, interval.as_secs_f64(), &samples, figures);
}

fn print_table(samples: &[Sample]) {
    println!(
        "| t (s) | guard ops/s | errors | guard p50 / p99 ms | key page p99 ms | tail lag max ms | records | attempts | records + idx MiB | attempts + idx MiB | pruner behind s | evidence MiB | checkpoint s (age s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in samples {
        println!(
            "| {} | {:.0} | {} | {:.2} / {:.2} | {:.2} | {:.0} | {} | {} | {:.1} + {:.1} | {:.1} + {:.1} | {:.0} | {:.0} | {:.2} ({:.0}) |",
            s.at_s,
            s.ops_per_s,
            s.errors,
            s.guard_p50_ms,
            s.guard_p99_ms,
            s.key_page_p99_ms,
            s.tail_lag_max_ms,
            s.records,
            s.attempts,
            s.records_mib,
            s.records_indexes_mib,
            s.attempts_mib,
            s.attempts_indexes_mib,
            s.pruner_behind_s,
            s.evidence_mib,
            s.checkpoint_mean_s,
            s.checkpoint_age_s
        );
    }
}

/// `docs/performance/soak-<date>.json` (the samples) and `.svg` (four panels over
/// time: sizes, guard p99, tail lag, key page p99), drawn here without a plotting
/// dependency.
fn write_files(plan: &SoakPlan, samples: &[Sample]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/performance");
    let stem = format!("soak-{}", chrono::Utc::now().format("%Y-%m-%d"));
    let json = json!({
        "duration_s": plan.duration.as_secs(),
        "rate": plan.rate,
        "retain": plan.retain,
        "prune_interval": plan.prune_interval,
        "checkpoint_interval": plan.checkpoint_interval,
        "samples": samples,
    });
    std::fs::write(
        dir.join(format!("{stem}.json")),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join(format!("{stem}.svg")), svg(samples)).unwrap();
    println!("wrote docs/performance/{stem}.json and .svg");
}

/// A panel of the plot: title, unit, and its named lines.
type Panel = (
    &'static str,
    &'static str,
    Vec<(&'static str, fn(&Sample) -> f64)>,
);

fn svg(samples: &[Sample]) -> String {
    let panels: [Panel; 4] = [
        (
            "table + index size",
            "MiB",
            vec![
                ("records", |s| s.records_mib + s.records_indexes_mib),
                ("attempts", |s| s.attempts_mib + s.attempts_indexes_mib),
                ("evidence", |s| s.evidence_mib),
            ],
        ),
        (
            "guard latency",
            "ms",
            vec![("p99", |s| s.guard_p99_ms), ("p50", |s| s.guard_p50_ms)],
        ),
        ("tail lag (max)", "ms", vec![("lag", |s| s.tail_lag_max_ms)]),
        ("key page p99", "ms", vec![("p99", |s| s.key_page_p99_ms)]),
    ];
    let (w, h, pad) = (360.0, 180.0, 40.0);
    let t_max = samples.last().map_or(1.0, |s| s.at_s as f64).max(1.0);
    let colours = ["#1f77b4", "#d62728", "#2ca02c"];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        2.0 * w,
        2.0 * h
    );
    for (i, (title, unit, lines)) in panels.iter().enumerate() {
        let (x0, y0) = ((i % 2) as f64 * w, (i / 2) as f64 * h);
        let y_max = lines
            .iter()
            .flat_map(|(_, f)| samples.iter().map(f))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.1;
        let (pw, ph) = (w - 1.5 * pad, h - 1.7 * pad);
        let (left, top) = (x0 + pad, y0 + pad);
        out += &format!(
            "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">{title} ({unit})</text>\n\
             <rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{y_max:.1}</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{t_max:.0} s</text>\n",
            y0 + pad - 8.0,
            left - 3.0,
            top + 10.0,
            left - 3.0,
            top + ph,
            left + pw,
            top + ph + 14.0,
        );
        for (j, (name, f)) in lines.iter().enumerate() {
            let points: Vec<String> = samples
                .iter()
                .filter(|s| f(s).is_finite())
                .map(|s| {
                    format!(
                        "{:.1},{:.1}",
                        left + pw * s.at_s as f64 / t_max,
                        top + ph - ph * f(s) / y_max
                    )
                })
                .collect();
            out += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n\
                 <text x=\"{}\" y=\"{}\" fill=\"{}\">{name}</text>\n",
                colours[j % colours.len()],
                points.join(" "),
                left + pw - 60.0,
                top + 14.0 + 12.0 * j as f64,
                colours[j % colours.len()]
            );
        }
    }
    out + "</svg>\n"
}
