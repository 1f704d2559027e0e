//! Failover: a synchronous streaming standby (`pg_basebackup -R`,
//! `synchronous_standby_names = '*'`) promoted while the primary is killed under
//! guard load. sqlx 0.9 takes one host per URL (no multi-host list, no
//! `target_session_attrs`), so idemwatch reaches the new primary through a front
//! address that the operator (here, the test) repoints: a virtual IP, a DNS name, or
//! a proxy such as HAProxy or PgBouncer. The pools reconnect by themselves.

use super::cluster::{Cluster, FrontAddress, execute, wait_until_up};
use super::load::Load;
use super::monitor::Monitor;
use super::{assert_tail_counted, assert_verifies, recover_and_check, watching_serve};
use sqlx::Connection;
use std::time::{Duration, Instant};

async fn scalar(url: &str, sql: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promoted_standby_takes_over_with_every_acknowledged_write() {
    let Some(primary) = Cluster::primary() else {
        return;
    };
    execute(&primary.url("postgres"), "CREATE DATABASE idemwatch").await;
    let standby = Cluster::standby_of(&primary);
    // Synchronous replication: a commit is acknowledged once the standby has it.
    let admin = primary.url("postgres");
    execute(&admin, "ALTER SYSTEM SET synchronous_standby_names = '*'").await;
    execute(&admin, "SELECT pg_reload_conf()").await;
    let started = Instant::now();
    while scalar(
        &primary.url("postgres"),
        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
    )
    .await
        != 1
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "standby never synchronous"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let front = FrontAddress::start(primary.port).await;
    let url = front.url("idemwatch");
    let serve = watching_serve(&url).await;
    let monitor = Monitor::start(&serve.addr).await;
    let load = Load::start(&url, 8).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The primary dies; the standby is promoted; the front address is repointed.
    let killed = Instant::now();
    primary.crash();
    standby.promote();
    let promoted = killed.elapsed();
    let new_primary = standby.url("idemwatch");
    wait_until_up(&new_primary, Duration::from_secs(30)).await;
    // Transaction ids continue after promotion: every row replayed from the old
    // primary has a txid below any the new primary hands out, so the tailer's
    // (txid, id) position stays valid.
    let replayed_max = scalar(
        &new_primary,
        "SELECT COALESCE(max(txid::text::bigint), 0) FROM idempotency_attempts",
    )
    .await;
    let next_xid = scalar(&new_primary, "SELECT pg_current_xact_id()::text::bigint").await;
    assert!(next_xid > replayed_max, "{next_xid} <= {replayed_max}");
    front.repoint(standby.port);
    let repointed = Instant::now();

    // Every success the guard answered, on the old primary or the new, is on the new
    // one; one effect per intent.
    let (tally, _, samples) = recover_and_check(monitor, load, repointed).await;

    let rows: i64 = scalar(&new_primary, "SELECT count(*) FROM idempotency_attempts").await;
    // The tailer counted every row once across the failover.
    assert_tail_counted(&serve.addr, rows).await;
    assert_verifies(&new_primary);

    // After the repointing: a call acknowledged between the kill and then had
    // committed on the old primary as it died (and reached the synchronous standby).
    let guard_again = tally
        .first_success_after(repointed)
        .expect("guard calls resume");
    let ready_again = Monitor::first(&samples, repointed, |s| s.ready == 200).unwrap();
    let up_again = Monitor::first(&samples, repointed, |s| s.db_up == Some(1.0)).unwrap();
    let mut texts: Vec<&str> = tally.cut_off.iter().map(|c| c.1.as_str()).collect();
    texts.sort_unstable();
    texts.dedup();
    eprintln!(
        "failover: {} calls acknowledged (all on the new primary), {} cut off ({texts:?}), {} finished after; \
         kill to promoted {promoted:?}; kill to the first guard success on the new primary {:?} (repointed after {:?}); \
         after repointing: /readyz 200 in {:?}, idemwatch_db_up 1 in {:?}; txids {replayed_max} -> {next_xid}; \
         tailer counted {rows} rows exactly",
        tally.acked.len(),
        tally.cut_off.len(),
        tally.pending.len(),
        guard_again - killed,
        repointed - killed,
        ready_again.saturating_duration_since(repointed),
        up_again.saturating_duration_since(repointed),
    );
    drop(serve);
}
