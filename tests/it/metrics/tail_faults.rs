//! The tailer under faults: database outages, transactions that commit out of id
//! order, and interleaved writers. In each, the counters must equal what the rows
//! imply: nothing lost, nothing counted twice.

use super::*;
use crate::support::TestDb;
use crate::support::fixture::{Fixture, refund};
use idemwatch::store::StoreOptions;
use idemwatch::tail::TailSettings;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::sync::watch;

/// A row only the tail cares about, written by hand inside a caller's transaction:
/// a `replayed` attempt with a seq no guard uses. Returns its id.
const INSERT_HELD_ROW: &str = "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, \
    fencing_token, actor, detail, occurred_at, prev_hash, hash) \
    VALUES ($1, 'acme', 'issue_refund', $2, 'replayed', 1, 'held-writer', '{}', now(), 'x', 'x') \
    RETURNING id";

/// Runs [`INSERT_HELD_ROW`] for `key` at `seq` in `conn` (an open transaction).
async fn insert_held_row(conn: &mut PgConnection, key: &str, seq: i64) -> i64 {
    sqlx::query_scalar(INSERT_HELD_ROW)
        .bind(key)
        .bind(seq)
        .fetch_one(conn)
        .await
        .unwrap()
}

fn quick() -> TailSettings {
    TailSettings {
        batch_size: 5,
        busy_interval: Duration::from_millis(10),
        idle_interval: Duration::from_millis(100),
        max_backoff: Duration::from_millis(500),
    }
}

async fn admin(db: &TestDb) -> PgConnection {
    PgConnection::connect(&db.url).await.unwrap()
}

fn database_name(url: &str) -> String {
    let path = url.split('?').next().unwrap();
    path.rsplit('/').next().unwrap().to_string()
}

async fn exec(conn: &mut PgConnection, sql: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(conn)
        .await
        .unwrap();
}

/// The PostgreSQL half's database with the guard on it, or `None` where PostgreSQL is
/// not installed (skipped loudly; a failure under CI=true, as `TestDb::postgres` says).
async fn on_postgres() -> Option<(TestDb, Fixture)> {
    let db = TestDb::postgres().await?;
    let f = Fixture::new(&db);
    Some((db, f))
}

/// A tail that counts from now: the rows already there, and fresh metrics.
async fn tail_from_now(store: &Store) -> (HashSet<i64>, Arc<Metrics>) {
    (ids_now(store).await, Arc::new(Metrics::default()))
}

fn events(m: &Metrics) -> u64 {
    m.families().idemwatch_tail_events_total.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_closed_and_reopened_loses_and_repeats_nothing() {
    let db = TestDb::sqlite().await;
    let f = Fixture::new(&db);
    let (before, metrics) = tail_from_now(&db.store).await;
    let mut tailer = Tailer::new(metrics.clone(), quick());
    let tail_store = Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    tailer.poll(&tail_store).await.unwrap();
    for order in ["S1", "S2", "S3"] {
        f.guard
            .run(&refund(order, 1, "1"), &f.client([]))
            .await
            .unwrap();
    }
    tailer.catch_up(&tail_store).await.unwrap();
    let position = tailer.position();

    // The tailer's database goes away.
    tail_store.close().await;
    let err = tailer.poll(&tail_store).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert_eq!(tailer.position(), position, "a failed poll does not move");
    let s = scrape(&db.store, &metrics).await;
    assert_eq!(s.value("idemwatch_db_up", &[]), 0.0);
    assert_eq!(s.value("idemwatch_tail_errors_total", &[]), 1.0);

    // Writes go on meanwhile; the tailer comes back on a fresh pool.
    for order in ["S1", "S4", "S5"] {
        f.guard
            .run(&refund(order, 1, "1"), &f.client([]))
            .await
            .unwrap();
    }
    let reopened = Store::connect(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    catch_up_all(&mut tailer, &reopened, &metrics, &before).await;
    let s = scrape(&db.store, &metrics).await;
    assert_counters_match_rows(&s, &attempt_rows(&db.store).await, &before, &no_tenant);
    let new = [("tool", "issue_refund"), ("outcome", "new")];
    let replay = [("tool", "issue_refund"), ("outcome", "replay")];
    assert_eq!(s.value("idempotency_requests_total", &new), 5.0);
    assert_eq!(s.value("idempotency_requests_total", &replay), 1.0);
    assert_eq!(s.value("idemwatch_db_up", &[]), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_open_write_transaction_holds_the_tail_back_and_loses_nothing() {
    let Some((db, f)) = on_postgres().await else {
        return;
    };
    let store = &db.store;
    let (before, metrics) = tail_from_now(store).await;
    let mut tailer = Tailer::new(metrics.clone(), quick());
    tailer.poll(store).await.unwrap();
    let a = refund("HELD-A", 100, "1");
    f.guard.run(&a, &f.client([])).await.unwrap();
    catch_up_all(&mut tailer, store, &metrics, &before).await;
    assert_eq!(events(&metrics), 2);

    // A writer takes an id and keeps its transaction open; later writers commit
    // higher ids first. Following ids would pass the open row and never count it.
    // (On a key of its own: the row's foreign key check share-locks the record, which
    // would block the guard's next lock on that key until the commit.)
    let x = refund("HELD-X", 100, "1");
    f.guard.run(&x, &f.client([])).await.unwrap();
    catch_up_all(&mut tailer, store, &metrics, &before).await;
    let mut conn = admin(&db).await;
    let mut tx = conn.begin().await.unwrap();
    let held_id = insert_held_row(&mut tx, x.intent.key().unwrap().as_str(), 1000).await;
    f.guard
        .run(&refund("HELD-B", 100, "1"), &f.client([]))
        .await
        .unwrap();
    f.guard.run(&a, &f.client([])).await.unwrap();
    let later = attempt_rows(store).await;
    assert!(
        later
            .iter()
            .filter(|r| !before.contains(&r.id))
            .all(|r| r.id != held_id)
    );
    assert!(
        later.iter().any(|r| r.id > held_id),
        "later rows have higher ids"
    );

    for _ in 0..10 {
        tailer.poll(store).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(
        events(&metrics),
        4,
        "nothing past the open transaction is read"
    );
    let s = scrape(store, &metrics).await;
    assert!(
        s.value("idemwatch_tail_held_back_seconds", &[]) >= 0.25,
        "{}",
        s.text
    );
    assert!(
        s.value("idemwatch_tail_lag_seconds", &[]) > 0.0,
        "{}",
        s.text
    );

    tx.commit().await.unwrap();
    catch_up_all(&mut tailer, store, &metrics, &before).await;
    let s = scrape(store, &metrics).await;
    assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &no_tenant);
    let replay = [("tool", "issue_refund"), ("outcome", "replay")];
    assert_eq!(s.value("idempotency_requests_total", &replay), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_tail_started_behind_an_open_transaction_counts_only_what_commits_later() {
    let Some((db, f)) = on_postgres().await else {
        return;
    };
    let store = &db.store;
    let x = refund("START-X", 100, "1");
    f.guard.run(&x, &f.client([])).await.unwrap();
    let mut conn = admin(&db).await;
    let mut tx = conn.begin().await.unwrap();
    insert_held_row(&mut tx, x.intent.key().unwrap().as_str(), 1000).await;
    // Committed before the start, but after the open transaction in tail order.
    f.guard
        .run(&refund("START-B", 100, "1"), &f.client([]))
        .await
        .unwrap();
    let before = ids_now(store).await;

    let metrics = Arc::new(Metrics::default());
    let mut tailer = Tailer::new(metrics.clone(), quick());
    tailer.poll(store).await.unwrap();
    tx.commit().await.unwrap();
    f.guard
        .run(&refund("START-C", 100, "1"), &f.client([]))
        .await
        .unwrap();
    catch_up_all(&mut tailer, store, &metrics, &before).await;
    let s = scrape(store, &metrics).await;
    assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &no_tenant);
    let outcome = |o| {
        s.value(
            "idempotency_requests_total",
            &[("tool", "issue_refund"), ("outcome", o)],
        )
    };
    assert_eq!(
        (outcome("new"), outcome("replay")),
        (1.0, 1.0),
        "C's claim and the held row only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_outage_keeps_metrics_up_and_the_tail_resumes_without_loss() {
    let Some((db, f)) = on_postgres().await else {
        return;
    };
    let store = &db.store;
    // The tailer connects as its own role, as in production (see docs/METRICS.md).
    let name = database_name(&db.url);
    let role = format!("{name}_tail");
    let mut admin = admin(&db).await;
    exec(
        &mut admin,
        format!(
            "CREATE ROLE {role} LOGIN; \
        GRANT SELECT ON idempotency_attempts, idempotency_records TO {role}; \
        GRANT pg_read_all_stats TO {role}"
        ),
    )
    .await;
    let tail_url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let options = StoreOptions {
        max_connections: 2,
        acquire_timeout: Duration::from_secs(1),
    };
    let tail_store = Store::connect(&tail_url, &options).await.unwrap();
    let (before, metrics) = tail_from_now(store).await;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(Tailer::new(metrics.clone(), quick()).run(tail_store.clone(), stopped));
    wait_for("the first poll", &metrics, |m| {
        m.families().idemwatch_db_up.get() == 1
    })
    .await;

    let drive = |orders: &'static [&'static str]| {
        let f = &f;
        async move {
            for order in orders {
                let call = refund(order, 1, "1");
                f.guard.run(&call, &f.client([])).await.unwrap();
                f.guard.run(&call, &f.client([])).await.unwrap();
            }
        }
    };
    drive(&["O1", "O2", "O3"]).await;
    wait_for("the first rows", &metrics, |m| events(m) >= 9).await;
    assert_eq!(events(&metrics), 9);

    // The outage: the tailer's role can no longer connect, its sessions are gone.
    // (Two statements: one batch would be one transaction, and sessions reconnecting
    // before it commits would pass the CONNECT check.)
    exec(
        &mut admin,
        format!("REVOKE CONNECT ON DATABASE {name} FROM PUBLIC"),
    )
    .await;
    exec(
        &mut admin,
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"),
    )
    .await;
    wait_for("db_up 0", &metrics, |m| {
        m.families().idemwatch_db_up.get() == 0
            && m.families().idemwatch_tail_errors_total.get() > 0
    })
    .await;
    let s = scrape(store, &metrics).await;
    assert_eq!(
        s.value("idemwatch_db_up", &[]),
        0.0,
        "/metrics answers during the outage"
    );
    drive(&["O4", "O5"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(events(&metrics), 9, "nothing is read during the outage");

    exec(
        &mut admin,
        format!("GRANT CONNECT ON DATABASE {name} TO PUBLIC"),
    )
    .await;
    let all = attempt_rows(store)
        .await
        .iter()
        .filter(|r| !before.contains(&r.id))
        .count() as u64;
    wait_for("catching up after the outage", &metrics, |m| {
        events(m) >= all
    })
    .await;
    assert_eq!(events(&metrics), all, "no row counted twice");
    let _ = stop.send(true);
    task.await.unwrap();
    let s = scrape(store, &metrics).await;
    assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &no_tenant);
    let replay = [("tool", "issue_refund"), ("outcome", "replay")];
    assert_eq!(s.value("idempotency_requests_total", &replay), 5.0);
    assert_eq!(s.value("idemwatch_db_up", &[]), 1.0);
    tail_store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_interleaved_writers_are_counted_exactly() {
    let Some((db, f)) = on_postgres().await else {
        return;
    };
    let store = &db.store;
    let (before, metrics) = tail_from_now(store).await;
    let settings = TailSettings {
        batch_size: 7,
        busy_interval: Duration::from_millis(5),
        ..quick()
    };
    let (stop, stopped) = watch::channel(false);
    let tail = tokio::spawn(Tailer::new(metrics.clone(), settings).run(store.clone(), stopped));
    // The tail starts at the head: rows written before its first poll are not its.
    wait_for("the first poll", &metrics, |m| {
        m.families().idemwatch_db_up.get() == 1
    })
    .await;

    let mut writers = tokio::task::JoinSet::new();
    for w in 0..6 {
        let f = Fixture {
            guard: f.guard.clone(),
            clock: f.clock.clone(),
            ledger: f.ledger.clone(),
            store: store.clone(),
        };
        writers.spawn(async move {
            for i in 0..30 {
                let call = refund(&format!("W{w}-{i}"), 100, "1");
                let first = match i % 6 {
                    1 => vec![Fault::Decline],
                    2 => vec![Fault::Unavailable],
                    4 => vec![Fault::DropResponse],
                    _ => vec![],
                };
                let _ = f.guard.run(&call, &f.client(first)).await;
                match i % 6 {
                    3 => {
                        let mut changed = call.clone();
                        changed.args["amount_p"] = json!(1);
                        let _ = f.guard.run(&changed, &f.client([])).await;
                    }
                    4 | 5 => {}
                    _ => {
                        let _ = f.guard.run(&call, &f.client([])).await;
                    }
                }
            }
        });
    }
    // Slow committers: each row's id is taken long before its transaction commits.
    for w in 0..2 {
        let call = refund(&format!("SLOW-{w}"), 100, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        let key = call.intent.key().unwrap().to_string();
        let url = db.url.clone();
        writers.spawn(async move {
            let mut conn = PgConnection::connect(&url).await.unwrap();
            for i in 0..20_u64 {
                let mut tx = conn.begin().await.unwrap();
                insert_held_row(&mut tx, &key, 1000 + i as i64).await;
                let pause = (i * 7919 + w * 104_729) % 40;
                tokio::time::sleep(Duration::from_millis(pause)).await;
                tx.commit().await.unwrap();
            }
        });
    }
    writers.join_all().await;

    let all = attempt_rows(store)
        .await
        .iter()
        .filter(|r| !before.contains(&r.id))
        .count() as u64;
    wait_for("the tail to read every row", &metrics, |m| events(m) >= all).await;
    assert_eq!(events(&metrics), all, "no row counted twice");
    let _ = stop.send(true);
    tail.await.unwrap();
    let s = scrape(store, &metrics).await;
    assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &no_tenant);
    let replay = [("tool", "issue_refund"), ("outcome", "replay")];
    // Per writer: 5 replays of DONE keys (i % 6 == 0) + 20 hand-written rows in total.
    assert_eq!(
        s.value("idempotency_requests_total", &replay),
        6.0 * 5.0 + 40.0
    );
    let conflict = [("tool", "issue_refund"), ("outcome", "conflict")];
    assert_eq!(s.value("idempotency_requests_total", &conflict), 6.0 * 5.0);
}
