//! PgBouncer (Debian's `pgbouncer`) between idemwatch and PostgreSQL.
//!
//! sqlx runs every query with arguments as a protocol-level prepared statement: Parse
//! and Describe in one round trip, Bind and Execute in the next, named `sqlx_s_N` per
//! client connection and cached. In transaction mode PgBouncer may hand the second
//! round trip, or the next use of the cached statement, to another server connection.
//! PgBouncer 1.21 and later track such statements (`max_prepared_statements`); before
//! that, transaction mode breaks sqlx, and session mode is the mode that works. The
//! guard's core fault scenarios, a guard load and the pages run through whichever mode
//! the installed PgBouncer supports; with an older one, a second test shows the
//! failure in transaction mode, so the docs say exactly why.

use super::cluster::{Cluster, execute};
use super::load::Load;
use super::tool;
use crate::support::TestDb;
use crate::support::pg;
use crate::support::server::{Server, free_port, get};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct PgBouncer {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl PgBouncer {
    fn start(bin: &Path, pg_port: u16, mode: &str, extra: &str) -> PgBouncer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path().display();
        // Session mode holds a server connection per client connection: the pool
        // must be as large as all clients' pools together.
        let pool = if mode == "session" { 60 } else { 4 };
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        let config = format!(
            "[databases]\n* = host=127.0.0.1 port={pg_port}\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {d}/users.txt\npool_mode = {mode}\n\
             default_pool_size = {pool}\nmax_client_conn = 200\n\
             ignore_startup_parameters = extra_float_digits\nlogfile = {d}/pgbouncer.log\n{extra}\n"
        );
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(&ini, config).unwrap();
        // PgBouncer refuses to run as root.
        let mut command = if pg::is_root() {
            let chowned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status();
            assert!(chowned.is_ok_and(|s| s.success()));
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let bouncer = PgBouncer { child, dir, port };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen: {}",
                bouncer.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        bouncer
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // SIGKILL reaches runuser only; SIGTERM is passed on to pgbouncer.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// The installed PgBouncer and its (major, minor) version.
fn pgbouncer() -> Option<(PathBuf, (u32, u32))> {
    let bin = tool("pgbouncer", "pgbouncer")?;
    let out = Command::new(&bin).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap_or_else(|| panic!("pgbouncer --version: {text}"));
    Some((bin, version))
}

/// A primary with a migrated `idemwatch` database (migrations run directly against
/// PostgreSQL: sqlx serialises them with a session advisory lock).
async fn migrated_primary() -> Cluster {
    let pg = Cluster::primary().expect("checked by pgbouncer()");
    execute(&pg.url("postgres"), "CREATE DATABASE idemwatch").await;
    let out = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["migrate", "--database-url", &pg.url("idemwatch")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guard_and_the_pages_work_through_pgbouncer() {
    let Some((bin, version)) = pgbouncer() else {
        return;
    };
    if pg::pg_bin_dir().is_none() {
        Cluster::primary(); // skips (or fails under CI) loudly
        return;
    }
    let pg = migrated_primary().await;
    let (mode, extra) = if version >= (1, 21) {
        ("transaction", "max_prepared_statements = 200")
    } else {
        ("session", "")
    };
    let bouncer = PgBouncer::start(&bin, pg.port, mode, extra);
    let url = bouncer.url("idemwatch");

    // The guard fault suite's core scenarios, through the pooler.
    use crate::guard_faults::{concurrency, lost_answers, people};
    let started = Instant::now();
    lost_answers::the_seed_trace_refunds_once::body(TestDb::at(&url).await).await;
    lost_answers::a_worker_killed_after_the_effect_is_reconciled_not_repeated::body(
        TestDb::at(&url).await,
    )
    .await;
    concurrency::sixteen_concurrent_workers_on_one_intent_make_one_effect::body(
        TestDb::at(&url).await,
    )
    .await;
    concurrency::concurrent_retries_of_an_unknown_key_let_exactly_one_take_over::body(
        TestDb::at(&url).await,
    )
    .await;
    people::a_person_resolving_while_a_worker_reconciles_cannot_race_it::body(
        TestDb::at(&url).await,
    )
    .await;
    let scenarios = started.elapsed();

    // A guard load through the pooler: every acknowledged call in the log, one effect each.
    let load = Load::start(&url, 8).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (tally, finisher) = load.stop().await;
    assert!(
        tally.cut_off.is_empty(),
        "{:?}",
        &tally.cut_off[..tally.cut_off.len().min(3)]
    );
    finisher.settle_and_check(&tally).await;

    // The pages, exports and metrics of a `serve` behind the pooler.
    let serve = Server::start(
        "serve",
        &url,
        &["--no-migrate", "--tail-poll-interval", "200ms"],
    )
    .await;
    for path in [
        "/",
        "/keys",
        "/backlog",
        "/export/attempts.ndjson",
        "/metrics",
        "/readyz",
    ] {
        let (status, body) = get(&serve.addr, path).await.unwrap();
        assert_eq!(status, 200, "{path} through pgbouncer ({mode}): {body}");
    }
    eprintln!(
        "pgbouncer {}.{} in {mode} mode: 5 core fault scenarios in {scenarios:?}; {} guard calls in 2 s by 8 callers, none cut off; pages 200",
        version.0,
        version.1,
        tally.acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_without_prepared_statement_tracking_breaks_sqlx() {
    let Some((bin, version)) = pgbouncer() else {
        return;
    };
    if version >= (1, 21) || pg::pg_bin_dir().is_none() {
        eprintln!("pgbouncer {version:?} tracks prepared statements: nothing to show");
        return;
    }
    let pg = migrated_primary().await;
    let bouncer = PgBouncer::start(&bin, pg.port, "transaction", "");
    let load = Load::start(&bouncer.url("idemwatch"), 8).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (tally, _) = load.stop().await;
    let broken: Vec<&String> = tally
        .unexpected
        .iter()
        .filter(|e| e.contains("prepared statement"))
        .collect();
    assert!(
        !broken.is_empty(),
        "expected sqlx's prepared statements to break in transaction mode; got {} acknowledged, {:?}",
        tally.acked.len(),
        &tally.unexpected[..tally.unexpected.len().min(3)]
    );
    eprintln!(
        "pgbouncer {}.{} in transaction mode: {} of {} guard calls failed with e.g. {:?}",
        version.0,
        version.1,
        tally.unexpected.len(),
        tally.unexpected.len() + tally.acked.len(),
        broken[0]
    );
}
