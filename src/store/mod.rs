//! Storage: PostgreSQL (production) or an embedded SQLite file (the default), picked
//! once from the URL scheme.
//!
//! Both backends run the same SQL text wherever the SQL can be the same (runtime
//! `query_as` + `FromRow`, `$n` placeholders, which sqlx accepts for SQLite too); the
//! few statements that must differ live side by side, and [`Backend::pick`] chooses
//! one. The `on_pool!` macro expands one body for each pool type, so each behaviour
//! is written once; a write transaction in that body opens with
//! [`WritePool::begin_write`], the one place that knows how each backend starts one.
//! [`Store`] implements the guard's storage port ([`crate::guard::Storage`]).
//! `sqlx::Error` stops here: callers see [`StoreError`].

mod browse;
mod demo;
mod duplicates;
mod error;
mod evidence;
mod export;
mod history;
mod pools;
mod prune;
mod records;
mod rows;
mod sessions;
pub(crate) mod sql;
mod tail;
mod timeline;
pub mod url_params;

pub(crate) use browse::{
    AttemptBucket, BUCKET_SECONDS, BacklogPage, Count, KeyPage, KeySummary, ResolvedAs,
};
pub use browse::{Cursor, KeyFilter};
pub(crate) use duplicates::SuspectedPair;
pub use error::StoreError;
pub use history::HistoryRead;
pub(crate) use history::{KeyHistory, Shown};
pub use pools::{Loan, SqlitePools, WritePool};
pub use prune::PruneCutoffs;
pub(crate) use prune::PrunedCounts;
pub use sessions::SessionRow;
pub(crate) use timeline::AttemptPage;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

/// How long a SQLite write waits for the file's write lock (another process) or for
/// this process's one write connection.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// What SQLite truncates the WAL file to when it starts over (`journal_size_limit`,
/// in bytes).
const WAL_SIZE_LIMIT: i64 = 32 << 20;

static PG_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

#[derive(Debug, Clone)]
pub enum Store {
    Postgres(PgPool),
    /// A read pool and the one writer ([`SqlitePools`]).
    Sqlite(SqlitePools),
}

/// Expands `$body` once per backend with `$pool` bound to the concrete pool.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            $crate::store::Store::Postgres($pool) => $body,
            $crate::store::Store::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// How long a PostgreSQL connection may sit in the pool before it is pinged on its way
/// out ([`Store::connect`]). HikariCP's window for the same decision
/// (`aliveBypassWindowMs`, 500 ms by default): a connection that answered this recently
/// is taken as alive.
pub const IDLE_PING_AFTER: Duration = Duration::from_millis(500);

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

impl Backend {
    /// The text of a statement that must differ between the backends; the one body
    /// that runs it is then written once (`on_pool!`).
    pub fn pick(self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self {
            Backend::Postgres => postgres,
            Backend::Sqlite => sqlite,
        }
    }
}

impl Store {
    /// Opens a pool for `url`: `postgres://…` / `postgresql://…` or `sqlite://…`.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        match Self::backend_of(url)? {
            Backend::Postgres => {
                url_params::warn_unrecognised(url);
                let pool = PgPoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(options.acquire_timeout)
                    // sqlx pings every connection it hands out (a round trip of its
                    // own): the guard's claim and settle are one statement each, so
                    // that was half of a guarded call's round trips. Only a connection
                    // that sat idle is pinged (`IDLE_PING_AFTER`), where a firewall or
                    // a server timeout may have closed it; one in steady use meets a
                    // dead server at its next statement either way (docs/PERFORMANCE.md,
                    // "A ping only after idling").
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= IDLE_PING_AFTER {
                                sqlx::Connection::ping(conn).await?;
                            }
                            Ok(true)
                        })
                    })
                    // PostgreSQL's JIT (on by default from cost 100,000) compiles the
                    // big export and verify statements for ~0.25 s and then saves
                    // nothing on a streaming join (docs/PERFORMANCE.md, "JIT off"). A SET
                    // rather than a startup option: PgBouncer refuses unknown ones.
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            sqlx::Executor::execute(conn, "SET jit = off").await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?;
                Ok(Store::Postgres(pool))
            }
            Backend::Sqlite => {
                let connect = SqliteConnectOptions::from_str(url)?
                    .journal_mode(SqliteJournalMode::Wal)
                    // In WAL mode: a commit does not sync; the WAL is synced at each
                    // checkpoint. A process crash loses nothing committed; a power
                    // cut may lose the commits since the last checkpoint.
                    .synchronous(SqliteSynchronous::Normal)
                    .foreign_keys(true)
                    // Within this process writers queue for the one write connection
                    // (pools.rs) and never meet the busy handler; another process on
                    // the same file still can, and waits here. Every write
                    // transaction starts with BEGIN IMMEDIATE, so waiting is safe.
                    .busy_timeout(SQLITE_BUSY_TIMEOUT)
                    // SQLite's own checkpoints (every 1,000 pages, in the commit that
                    // passes them) keep the WAL small; this truncates it after a
                    // long reader (an export) let it grow.
                    .pragma("journal_size_limit", WAL_SIZE_LIMIT.to_string());
                let read = SqlitePoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(options.acquire_timeout)
                    .connect_with(connect.clone())
                    .await?;
                // An in-memory database is one per pool: share the one pool.
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                if in_memory {
                    return Ok(Store::Sqlite(SqlitePools::new(read.clone(), read, false)));
                }
                let write = SqlitePoolOptions::new()
                    .max_connections(1)
                    // A writer waits in the queue as long as it would have waited for
                    // the lock in the busy handler.
                    .acquire_timeout(SQLITE_BUSY_TIMEOUT.max(options.acquire_timeout))
                    // No ping before each write transaction: the connection is only
                    // this process's, and the statements right after would find it
                    // broken just as well.
                    .test_before_acquire(false)
                    .connect_with(connect)
                    .await?;
                Ok(Store::Sqlite(SqlitePools::new(read, write, true)))
            }
        }
    }

    pub(crate) fn backend_of(url: &str) -> Result<Backend, StoreError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            "sqlite" => Ok(Backend::Sqlite),
            _ => Err(StoreError::Config(format!(
                "database URL must start with postgres://, postgresql:// or sqlite:// (got scheme {scheme:?})"
            ))),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Store::Postgres(_) => Backend::Postgres,
            Store::Sqlite(_) => Backend::Sqlite,
        }
    }

    fn migrator(&self) -> &'static sqlx::migrate::Migrator {
        match self {
            Store::Postgres(_) => &PG_MIGRATIONS,
            Store::Sqlite(_) => &SQLITE_MIGRATIONS,
        }
    }

    /// Applies pending migrations. Safe to run from several replicas at once: sqlx
    /// takes an advisory lock on PostgreSQL.
    #[tracing::instrument(skip_all)]
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let migrator = self.migrator();
        match self {
            Store::Postgres(pool) => migrator.run(pool).await?,
            Store::Sqlite(pools) => {
                // On the one writer, in its turn.
                let mut writer = pools.lend_writer().await?;
                migrator.run(&mut *writer).await?
            }
        }
        Ok(())
    }

    /// `/readyz`: the database answers and every migration this binary knows is applied.
    pub async fn ready(&self) -> Result<(), StoreError> {
        let latest = self.migrator().iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(pool)
                .await
        })
        .map_err(|e| match StoreError::from(e) {
            StoreError::Other(_) => StoreError::Unavailable(
                "migrations have not been applied: run `idemwatch migrate`".into(),
            ),
            other => other,
        })?;
        match applied {
            Some(v) if v >= latest => Ok(()),
            _ => Err(StoreError::Unavailable(format!(
                "database schema is behind this binary (applied {applied:?}, need {latest}): run `idemwatch migrate`"
            ))),
        }
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}
