//! PostgreSQL crashed (`pg_ctl stop -m immediate`: every server process killed, no
//! checkpoint) and started again while guard calls are in flight, on a cluster with
//! `fsync` and `synchronous_commit` on. A real `idemwatch serve` watches the same
//! database; the test samples its `/readyz` and `/metrics` throughout. Guard calls run
//! both in process (8 workers, `load.rs`) and over HTTP against that serve (4 workers on
//! /api/v1/guard/admit|settle|reconcile, `http_load.rs`): over HTTP a cut-off call must
//! get a 503 `unavailable` problem or a connection error (never a 500, never a success
//! that is not committed), and after the recovery every intent finishes, retried with
//! the same intent, with exactly one effect.

use super::cluster::{Cluster, execute, wait_until_up};
use super::http_load::HttpLoad;
use super::load::{Load, metric_sum};
use super::monitor::Monitor;
use super::{assert_tail_counted, assert_verifies, recover_and_check, watching_guard_serve};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_and_restart_loses_no_acknowledged_call_and_makes_no_duplicate() {
    let Some(pg) = Cluster::primary() else {
        return;
    };
    execute(&pg.url("postgres"), "CREATE DATABASE idemwatch").await;
    let url = pg.url("idemwatch");
    let (serve, _tools) = watching_guard_serve(&url).await;
    let monitor = Monitor::start(&serve.addr).await;
    let load = Load::start(&url, 8).await;
    let http = HttpLoad::start(&serve.addr, 4);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let crashed = Instant::now();
    pg.crash();
    // Keep the database down until the outside has seen the outage: a fixed pause was too
    // short on a loaded machine, where /readyz's own probe could outlast it.
    let seen = Duration::from_secs(30);
    monitor.wait_for(|s| s.ready == 503, crashed, seen).await;
    monitor
        .wait_for(|s| s.db_up == Some(0.0), crashed, seen)
        .await;
    let restarting = Instant::now();
    pg.start();
    let accepting = restarting.elapsed();
    wait_until_up(&url, Duration::from_secs(30)).await;
    let (tally, finisher, samples) = recover_and_check(monitor, load, restarting).await;
    let http = http.finish_and_check(&finisher.store).await;
    let mut http_texts: Vec<&str> = http.cut_off.iter().map(|c| c.1.as_str()).collect();
    http_texts.sort_unstable();
    http_texts.dedup();
    let http_first_cut = http.cut_off.iter().map(|c| c.0).min();
    let http_again = http.first_success_after(restarting);

    // From the outside: /readyz 503 and idemwatch_db_up 0 during the outage, both back.
    let not_ready = samples.iter().find(|s| s.at >= crashed && s.ready == 503);
    let db_down = samples
        .iter()
        .find(|s| s.at >= crashed && s.db_up == Some(0.0));
    assert!(not_ready.is_some(), "/readyz never answered 503");
    assert!(db_down.is_some(), "idemwatch_db_up never went to 0");
    let ready_again = Monitor::first(&samples, restarting, |s| s.ready == 200).unwrap();
    let up_again = Monitor::first(&samples, restarting, |s| s.db_up == Some(1.0)).unwrap();
    let guard_again = tally
        .first_success_after(restarting)
        .expect("guard calls succeed after the restart");
    let last_before = tally
        .acked
        .iter()
        .map(|a| a.2)
        .filter(|a| *a < crashed)
        .max()
        .unwrap();
    let first_cut = tally.cut_off.iter().map(|c| c.0).min();
    let mut texts: Vec<&str> = tally.cut_off.iter().map(|c| c.1.as_str()).collect();
    texts.sort_unstable();
    texts.dedup();

    // The tailer resumed where it was: it counted every row once, no gap, no double.
    let rows = count_rows(&finisher.store).await;
    let metrics = assert_tail_counted(&serve.addr, rows).await;
    let admissions = count_admissions(&finisher.store).await;
    assert_eq!(
        metric_sum(&metrics, "idempotency_requests_total"),
        admissions as f64,
        "idempotency_requests_total vs admission rows"
    );
    assert_verifies(&url);

    eprintln!(
        "crash/restart: {} calls acknowledged, {} cut off ({} distinct errors: {texts:?}), {} finished after; \
         first cut-off {:?} after the crash; pg_ctl start took {accepting:?}; \
         after the restart: guard ok in {:?}, /readyz 200 in {:?}, idemwatch_db_up 1 in {:?}; \
         callers saw no success for {:?}; tailer counted {rows} rows exactly; \
         over HTTP: {} calls acknowledged, {} requests cut off ({} distinct errors: {http_texts:?}), \
         {} finished after; first HTTP cut-off {:?} after the crash; HTTP guard ok {:?} after the restart",
        tally.acked.len(),
        tally.cut_off.len(),
        texts.len(),
        tally.pending.len(),
        first_cut.map(|t| t.saturating_duration_since(crashed)),
        guard_again - restarting,
        ready_again - restarting,
        up_again - restarting,
        guard_again - last_before,
        http.acked.len(),
        http.cut_off.len(),
        http_texts.len(),
        http.pending.len(),
        http_first_cut.map(|t| t.saturating_duration_since(crashed)),
        http_again.map(|t| t.saturating_duration_since(restarting)),
    );
    drop(serve);
}

async fn count_rows(store: &idemwatch::store::Store) -> i64 {
    let idemwatch::store::Store::Postgres(pool) = store else {
        unreachable!()
    };
    sqlx::query_scalar("SELECT count(*) FROM idempotency_attempts")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn count_admissions(store: &idemwatch::store::Store) -> i64 {
    store
        .attempt_kind_counts(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|(k, _)| k.admission_outcome().is_some())
        .map(|(_, n)| n)
        .sum()
}
