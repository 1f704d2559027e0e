//! Shared test harness: a fresh database per test on either backend.

pub mod alertmanager;
pub mod app;
pub mod attack;
pub mod auth;
pub mod dashboard;
pub mod effects;
pub mod fixture;
pub mod guard_api;
pub mod pg;
pub mod plans;
pub mod process;
pub mod provider;
pub mod server;
pub mod webdriver;
pub mod webhook;

use idemwatch::guard::IdempotencyKey;
use idemwatch::store::{Store, StoreOptions};
use sqlx::Connection;
use std::sync::atomic::{AtomicU32, Ordering};

/// A key a test holds as text (a seeded key, a page's link) as the store's read
/// API takes it; text that is no key is a bug in the test.
pub fn as_key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text).unwrap_or_else(|e| panic!("{text:?} is no key: {e}"))
}

/// A migrated, empty database that lives as long as this value.
pub struct TestDb {
    pub store: Store,
    #[allow(
        dead_code,
        reason = "used by tests that start a server on the same database"
    )]
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("idemwatch.db").display()
        );
        let store = Store::connect(&url, &StoreOptions::default())
            .await
            .expect("open sqlite");
        store.migrate().await.expect("migrate sqlite");
        TestDb {
            store,
            url,
            _dir: Some(dir),
        }
    }

    /// A store on `url`, already migrated (the fault scenarios' own servers).
    pub async fn at(url: &str) -> TestDb {
        Self::at_with_connections(url, 12).await
    }

    /// [`TestDb::at`] with a pool of `connections` (1: every statement on one
    /// connection, whose prepared statements it keeps).
    pub async fn at_with_connections(url: &str, connections: u32) -> TestDb {
        let options = StoreOptions {
            max_connections: connections,
            ..StoreOptions::default()
        };
        let store = Store::connect(url, &options)
            .await
            .expect("open the database");
        TestDb {
            store,
            url: url.to_string(),
            _dir: None,
        }
    }

    /// A fresh database in the test cluster, or `None` (with a loud message) when
    /// PostgreSQL is not installed here. Under `CI=true` a missing server fails.
    pub async fn postgres() -> Option<TestDb> {
        let admin = match pg::admin_url().await {
            Ok(url) => url,
            Err(why) => {
                if pg::required() {
                    panic!("PostgreSQL is required under CI=true: {why}");
                }
                eprintln!("\n*** SKIPPED (PostgreSQL unavailable): {why} ***\n");
                return None;
            }
        };
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "idemwatch_t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("connect to the test cluster");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let url = replace_database(&admin, &name);
        let options = StoreOptions {
            max_connections: 12,
            ..StoreOptions::default()
        };
        let store = Store::connect(&url, &options).await.expect("open postgres");
        store.migrate().await.expect("migrate postgres");
        Some(TestDb {
            store,
            url,
            _dir: None,
        })
    }
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = base.rsplit_once('/').map_or(base, |(b, _)| b);
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// Runs one async test body on SQLite and on PostgreSQL, as two tests.
#[macro_export]
macro_rules! both_backends {
    ($(#[$meta:meta])* async fn $name:ident($db:ident: TestDb) $body:block) => {
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::*;
            pub(crate) async fn body($db: $crate::support::TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                body($crate::support::TestDb::sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if let Some(db) = $crate::support::TestDb::postgres().await {
                    body(db).await;
                }
            }
        }
    };
}
