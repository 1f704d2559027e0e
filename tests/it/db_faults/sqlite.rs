//! SQLite: a real `idemwatch demo` (the guard under synthetic traffic, two write
//! transactions per call) killed with SIGKILL mid-write and restarted on the same
//! file, and backups taken while it writes (`sqlite3 .backup`, and `VACUUM INTO` for
//! an operator without the CLI). Each file is then opened by a new process: no
//! committed row and no acknowledged call is lost, `PRAGMA integrity_check` says ok,
//! and `idemwatch verify` passes.

use super::{assert_verifies, tool};
use crate::support::server::{Server, get};
use sqlx::{Connection, SqliteConnection};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn url(file: &Path) -> String {
    format!("sqlite://{}", file.display())
}

/// `idemwatch demo` on `file` at a brisk rate: a claim and a settlement per call.
async fn demo(file: &Path) -> Server {
    Server::start(
        "demo",
        &url(file),
        &["--rate", "40", "--speed", "20", "--prune-interval", "0"],
    )
    .await
}

/// What the demo's callers got back from the guard so far (`/demo/stats`, `results`):
/// every `completed` here was acknowledged to its caller after its commit.
async fn acknowledged_completions(demo: &Server) -> u64 {
    let (status, body) = get(&demo.addr, "/demo/stats").await.expect("/demo/stats");
    assert_eq!(status, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).expect("stats JSON");
    stats["results"]["completed"]
        .as_u64()
        .expect("results.completed")
}

async fn open(file: &Path) -> SqliteConnection {
    SqliteConnection::connect(&url(file))
        .await
        .expect("open the file")
}

/// Every attempt row as key/seq → hash: what has been committed.
async fn committed_rows(file: &Path) -> HashMap<(String, i64), String> {
    let mut conn = open(file).await;
    let rows: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT key, seq, hash FROM idempotency_attempts")
            .fetch_all(&mut conn)
            .await
            .expect("read the attempt log");
    rows.into_iter().map(|(k, s, h)| ((k, s), h)).collect()
}

async fn completed_attempts(file: &Path) -> u64 {
    let mut conn = open(file).await;
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idempotency_attempts WHERE kind = 'completed'")
            .fetch_one(&mut conn)
            .await
            .expect("count completions");
    n as u64
}

/// `PRAGMA integrity_check` from this (new) process, then `idemwatch verify` from another.
async fn assert_intact(file: &Path) {
    let mut conn = open(file).await;
    let check: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut conn)
        .await
        .expect("integrity_check");
    assert_eq!(check, ["ok"], "{}", file.display());
    conn.close().await.ok();
    assert_verifies(&url(file));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_killed_mid_write_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("guard.db");
    let mut acknowledged = 0;
    for round in 0..3u64 {
        let mut demo = demo(&file).await;
        // Kill at a different moment of the write stream each round.
        tokio::time::sleep(Duration::from_millis(1200 + 170 * round)).await;
        acknowledged += acknowledged_completions(&demo).await;
        let committed = committed_rows(&file).await;
        demo.child.kill().expect("SIGKILL the demo");
        let killed = Instant::now();
        demo.child.wait().unwrap();

        // A new process opens the file: SQLite rolls the WAL forward on open.
        let after = committed_rows(&file).await;
        let reopened = killed.elapsed();
        let lost: Vec<_> = committed
            .iter()
            .filter(|(k, h)| after.get(*k) != Some(*h))
            .collect();
        assert!(lost.is_empty(), "committed rows lost or changed: {lost:?}");
        let completed = completed_attempts(&file).await;
        assert!(
            completed >= acknowledged,
            "{acknowledged} calls acknowledged as completed, {completed} completions on file"
        );
        assert_intact(&file).await;
        eprintln!(
            "sqlite SIGKILL round {round}: {} rows committed before the kill, {} on file after, \
             {acknowledged} acknowledged completions (all present), reopened in {reopened:?}",
            committed.len(),
            after.len()
        );
    }
    // And the service starts again on the file.
    let demo = demo(&file).await;
    let (status, body) = get(&demo.addr, "/readyz").await.unwrap();
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_the_demo_writes_opens_intact() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("guard.db");
    let demo = demo(&file).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let acknowledged = acknowledged_completions(&demo).await;
    let before = committed_rows(&file).await;

    let mut backups = Vec::new();
    // The operator's backup, with the CLI: the online backup API.
    if let Some(sqlite3) = tool("sqlite3", "sqlite3") {
        let copy = dir.path().join("backup-cli.db");
        let started = Instant::now();
        let out = std::process::Command::new(sqlite3)
            .arg(&file)
            .arg(format!(".backup '{}'", copy.display()))
            .output()
            .expect("run sqlite3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("sqlite3 .backup while writing: {:?}", started.elapsed());
        backups.push(copy);
    }
    // Without the CLI: `VACUUM INTO` on a connection of its own (one read transaction).
    let copy = dir.path().join("backup-vacuum.db");
    let started = Instant::now();
    let mut conn = open(&file).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "VACUUM INTO '{}'",
        copy.display()
    )))
    .execute(&mut conn)
    .await
    .expect("VACUUM INTO");
    eprintln!("VACUUM INTO while writing: {:?}", started.elapsed());
    backups.push(copy);
    drop(demo);

    for copy in &backups {
        let rows = committed_rows(copy).await;
        let missing = before.keys().filter(|k| !rows.contains_key(*k)).count();
        assert_eq!(
            missing,
            0,
            "{}: rows committed before the backup",
            copy.display()
        );
        assert!(completed_attempts(copy).await >= acknowledged);
        assert_intact(copy).await;
        // A new service opens the copy as its database.
        let server = Server::start("serve", &url(copy), &["--prune-interval", "0"]).await;
        let (status, body) = get(&server.addr, "/readyz").await.unwrap();
        assert_eq!(status, 200, "{}: {body}", copy.display());
        eprintln!(
            "backup {}: {} rows ({} before it started), intact, verified, served",
            copy.file_name().unwrap().to_string_lossy(),
            rows.len(),
            before.len()
        );
    }
}
