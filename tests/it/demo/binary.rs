//! The real `idemwatch demo` binary over HTTP.

use crate::support::server::free_port;
use crate::support::server::get;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idemwatch_demo_serves_stats_while_it_runs_and_ends_with_no_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.db");
    let addr = format!("127.0.0.1:{}", free_port());
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args([
            "demo",
            "--duration",
            "5s",
            "--listen",
            &addr,
            "--database-url",
        ])
        .arg(format!("sqlite://{}", file.display()))
        .env_remove("IDEMWATCH_DEMO_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start idemwatch demo");

    let started = Instant::now();
    loop {
        match get(&addr, "/healthz").await {
            Ok((200, _)) => break,
            _ if started.elapsed() > Duration::from_secs(4) => {
                panic!("/healthz never answered")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, body) = get(&addr, "/demo/stats").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(stats["effects"].as_u64().unwrap() > 0, "{stats}");
    assert_eq!(stats["duplicates"], 0, "{stats}");
    assert!(stats["requests"].as_i64().unwrap() > 0, "{stats}");
    assert!(stats["by_outcome"]["new"].as_i64().unwrap() > 0, "{stats}");
    // The same service as `serve`: the UI and live metrics from the tailer.
    let (status, _) = get(&addr, "/").await.unwrap();
    assert_eq!(status, 200, "the UI");
    let (status, metrics) = get(&addr, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    let new_refunds = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"idempotency_requests_total{outcome="new",tool="issue_refund"} "#)
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        new_refunds > 0.0,
        "/metrics has no live admissions:\n{metrics}"
    );

    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the demo stops after --duration")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("http://{addr}/metrics")),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    let (effects, duplicates) = last
        .strip_prefix("effects: ")
        .and_then(|rest| rest.split_once(", duplicates: "))
        .unwrap_or_else(|| panic!("last line {last:?}"));
    assert!(effects.parse::<u64>().unwrap() > 0);
    assert_eq!(duplicates, "0");
    assert!(file.exists(), "a given database file is kept");
}

/// Issue 15: with its defaults (10x, the built-in retention), the demo shows the
/// human-review path within its first minute: a key the provider forgot before the
/// retry, escalated, its page asking for a person; and part of the traffic went
/// through the demo's own HTTP guard API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_escalates_a_forgotten_key_within_a_minute_and_uses_the_http_guard() {
    use idemwatch::store::Store;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let addr = format!("127.0.0.1:{}", free_port());
    let _child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["demo", "--duration", "70s", "--listen", &addr])
        .args(["--database-url", &url])
        .env_remove("IDEMWATCH_DEMO_DATABASE_URL")
        .env_remove("IDEMWATCH_DEMO_SPEED")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start idemwatch demo");
    let started = Instant::now();
    wait_healthy(&addr).await;
    let store = Store::connect(&url, &Default::default()).await.unwrap();
    let Store::Sqlite(pool) = &store else {
        unreachable!("the demo runs on SQLite")
    };
    let escalated = loop {
        let key: Option<String> = sqlx::query_scalar(
            "SELECT key FROM idempotency_attempts WHERE kind = 'escalated' LIMIT 1",
        )
        .fetch_optional(pool)
        .await
        .unwrap();
        if let Some(key) = key {
            break key;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no key was escalated to a person within the demo's first minute"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // The key page asks for a person.
    let (status, page) = get(&addr, &format!("/keys/{escalated}")).await.unwrap();
    assert_eq!(status, 200);
    assert!(
        page.contains("Needs a person"),
        "the key page asks for a person"
    );
    assert!(
        page.contains("escalated"),
        "the key page shows the escalation"
    );
    // ... and links the demo provider's lookup of the key, which answers (issue 50).
    let lookup = format!("/demo/provider/{escalated}");
    assert!(
        page.contains(&format!(
            "<a href=\"{lookup}\">Look this key up at the (demo) provider</a>"
        )),
        "the key page links the demo provider's lookup"
    );
    let (status, body) = get(&addr, &lookup).await.unwrap();
    assert_eq!(status, 200, "{body}");

    // Part of the traffic went through the demo's own HTTP guard API: rows written
    // by the server for a local HTTP worker, next to the in-process ones.
    let (status, body) = get(&addr, "/demo/stats").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(stats["http_guard_calls"].as_u64().unwrap() > 0, "{stats}");
    assert_eq!(stats["duplicates"], 0, "{stats}");
    const BY_ACTOR: &str = "SELECT COUNT(DISTINCT key) FROM idempotency_attempts \
        WHERE kind = 'completed' AND actor LIKE ?";
    let count = |pattern: &'static str| {
        sqlx::query_scalar::<_, i64>(BY_ACTOR)
            .bind(pattern)
            .fetch_one(pool)
    };
    let over_http = count("local/worker-%").await.unwrap();
    let in_process = count("worker-%").await.unwrap();
    assert!(over_http > 0, "no key completed over HTTP");
    assert!(in_process > 0, "no key completed in process");
}

/// Issue 50: at Ctrl-C the demo lets its in-flight calls settle before its server
/// closes (a quarter of them settle through that server's guard API): no settle,
/// admit or reconcile failure is logged, and it exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_ctrl_c_the_demo_drains_its_calls_before_the_server_closes() {
    let addr = format!("127.0.0.1:{}", free_port());
    // The incident keeps many calls in flight (the provider's median is over the deadline).
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["demo", "--incident", "--rate", "40", "--listen", &addr])
        .env_remove("IDEMWATCH_DEMO_DATABASE_URL")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start idemwatch demo");
    wait_healthy(&addr).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, stats) = get(&addr, "/demo/stats").await.unwrap();
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(
        stats["requests"].as_i64().unwrap() > 20,
        "traffic ran: {stats}"
    );
    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the demo stops after Ctrl-C")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("stopping: letting calls in flight finish"),
        "{stdout}"
    );
    for failure in [
        "HTTP settle failed",
        "HTTP admit failed",
        "HTTP reconcile failed",
    ] {
        assert!(!stderr.contains(failure), "{failure}:\n{stderr}");
    }
    assert!(stdout.trim_end().ends_with("duplicates: 0"), "{stdout}");
}

/// Waits until the demo at `addr` answers `/healthz` (it migrates a new database first).
async fn wait_healthy(addr: &str) {
    let started = Instant::now();
    while !matches!(get(addr, "/healthz").await, Ok((200, _))) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "/healthz never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
