//! A guard transaction dropped in the middle of its BEGIN on PostgreSQL: an aborted
//! worker, an HTTP client that went away, a timeout around a guard step. The
//! connection must not go back to the pool inside the transaction that BEGIN opened,
//! or the next claim and settle on it (single "autocommit" statements, records.rs)
//! answer success without committing: the caller is told the key is claimed and DONE
//! while no other connection ever sees the record, and the first ROLLBACK on that
//! connection throws it away. `guard_random` met it under load: a worker's settle
//! returned its result, and the key was later found IN_PROGRESS with only its
//! `claimed` row (store/pools.rs, `begin`).

use crate::support::TestDb;
use crate::support::fixture::refund;
use crate::support::provider::{Client, Fault, Ledger};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{Guard, GuardSettings, ManualClock, Status, Storage};
use idemwatch::store::{HistoryRead, Store};
use sqlx::postgres::PgConnectOptions;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback proxy to the test cluster that can hold the server's answers back
/// (`hold`), and tells when the client has sent a BEGIN (`begun`): the caller can then
/// be dropped with its BEGIN on the server and the answer unread, every time.
struct Gate {
    url: String,
    hold: watch::Sender<bool>,
    begun: Arc<AtomicBool>,
}

impl Gate {
    async fn start(url: &str) -> Gate {
        let target = PgConnectOptions::from_str(url).expect("the test URL");
        let upstream = format!("{}:{}", target.get_host(), target.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let here = listener.local_addr().unwrap();
        let (hold, held) = watch::channel(false);
        let begun = Arc::new(AtomicBool::new(false));
        let seen = begun.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(relay(client, server, held.clone(), seen.clone()));
            }
        });
        Gate {
            url: url.replacen(
                &format!("@{}:{}", target.get_host(), target.get_port()),
                &format!("@{here}"),
                1,
            ),
            hold,
            begun,
        }
    }
}

/// Copies both ways; answers read while held wait until released.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    mut held: watch::Receiver<bool>,
    begun: Arc<AtomicBool>,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if buf[..n].windows(5).any(|w| w == b"BEGIN") {
                begun.store(true, Ordering::SeqCst);
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if held.wait_for(|held| !held).await.is_err()
                || client_tx.write_all(&buf[..n]).await.is_err()
            {
                break;
            }
        }
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Backends of this test's database idle inside an open transaction.
async fn idle_in_transaction(observer: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND state = 'idle in transaction'",
    )
    .fetch_one(observer)
    .await
    .unwrap()
}

/// Drops `begin_then_more` once its BEGIN has reached the server with the answer held
/// back, then checks that the next guarded refund on the same one-connection pool is
/// committed and that no pooled connection idles inside a transaction.
async fn the_next_refund_commits_after_a_dropped_begin<F, T>(
    begin_then_more: impl FnOnce(Store) -> F,
) where
    F: std::future::Future<Output = T>,
    T: std::fmt::Debug,
{
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let gate = Gate::start(&db.url).await;
    // One connection: the one the dropped BEGIN used is the one the next claim gets.
    let one = TestDb::at_with_connections(&gate.url, 1).await;
    let observer = sqlx::PgPool::connect(&db.url).await.unwrap();
    let call = refund("C-1", 500, "1");
    let key = call.intent.key().unwrap();
    assert!(one.store.record(&key).await.unwrap().is_none());
    // Back in the pool (sqlx pings a connection given back before it is free again),
    // and used a moment ago, so it goes out without the idle ping.
    let Store::Postgres(pool) = &one.store else {
        unreachable!("a PostgreSQL store")
    };
    while pool.num_idle() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // The BEGIN reaches the server, its answer is held, and the caller is dropped.
    gate.hold.send_replace(true);
    let mut begun = Box::pin(begin_then_more(one.store.clone()));
    let started = Instant::now();
    while !gate.begun.load(Ordering::SeqCst) {
        if let std::task::Poll::Ready(r) = futures::poll!(begun.as_mut()) {
            panic!("the transaction ended before its BEGIN was answered: {r:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no BEGIN was sent"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop(begun);
    gate.hold.send_replace(false);

    // The next guarded call on the pool: claimed, executed, settled DONE.
    let clock = ManualClock::new(Utc::now());
    let ledger = Ledger::new(clock.clone(), TimeDelta::hours(24));
    let guard = Guard::new(
        one.store.clone(),
        Arc::new(clock.clone()),
        GuardSettings::default(),
    );
    let worker = Client::new(
        &ledger,
        Duration::from_secs(5),
        [Fault::Ok {
            delay: Duration::ZERO,
        }],
    );
    let outcome = guard.run(&call, &worker).await.unwrap();
    assert!(!outcome.replayed);
    assert_eq!(ledger.effects_for(key.as_str()), 1);

    // Committed: another connection sees what the caller was told.
    let seen = db.store.record(&key).await.unwrap();
    assert_eq!(
        seen.map(|r| (r.status, r.log_seq)),
        Some((Status::Done, 2)),
        "the claim and the settle the worker was told of are not committed"
    );
    assert_eq!(
        idle_in_transaction(&observer).await,
        0,
        "a pooled connection was left inside a transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_write_dropped_during_its_begin_leaves_no_transaction_open_on_the_pool() {
    let key = refund("C-1", 500, "1").intent.key().unwrap();
    the_next_refund_commits_after_a_dropped_begin(|store| async move {
        Storage::with_locked(&store, &key, |_| (Vec::new(), ())).await
    })
    .await;
}

/// The key page's one read transaction (REPEATABLE READ, READ ONLY): left open on the
/// pool, the next claim on that connection failed ("cannot execute INSERT in a
/// read-only transaction") and its reads saw an old snapshot. Every transaction of the
/// store begins through store/pools.rs's `begin`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_page_read_dropped_during_its_begin_leaves_no_transaction_open_on_the_pool() {
    let key = refund("C-2", 700, "2").intent.key().unwrap();
    let read = HistoryRead {
        after: 0,
        page: 50,
        siblings: 20,
    };
    the_next_refund_commits_after_a_dropped_begin(|store| async move {
        store.key_history(&key, read).await.map(|h| h.is_some())
    })
    .await;
}
