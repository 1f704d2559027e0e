//! The recommended layout beyond one server: `serve --no-migrate --prune-interval 0`
//! on a hot standby for the pages, exports and metrics, and a `serve` on the primary
//! for resolving. The standby's instance refuses writes with a message that points at
//! the primary, and reports its replay lag.

use super::cluster::{Cluster, execute};
use super::load::metric_sum;
use crate::support::fixture::refund;
use crate::support::provider::{Client, Fault, Ledger};
use crate::support::server::{Server, get};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{Guard, GuardSettings, ManualClock};
use idemwatch::store::{Store, StoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request: (status, head, body).
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Resolves `key` FAILED through `POST /api/v1/keys/{key}/resolve`, as a browser-signed
/// local admin does (CSRF cookie and header from `GET /api/v1/csrf`).
async fn resolve(addr: &str, key: &str) -> (u16, String, String) {
    let (status, head, body) = http(addr, "GET", "/api/v1/csrf", "", "").await;
    assert_eq!(status, 200, "{body}");
    let cookie = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .expect("a CSRF cookie")
        .to_string();
    let token: serde_json::Value = serde_json::from_str(&body).unwrap();
    let headers = format!(
        "Cookie: {cookie}\r\nX-CSRF-Token: {}\r\n",
        token["csrf_token"].as_str().unwrap()
    );
    let body = r#"{"resolution": "failed", "reason": "provider shows no refund"}"#;
    http(
        addr,
        "POST",
        &format!("/api/v1/keys/{key}/resolve"),
        &headers,
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_hot_standby_reads_refuses_writes_and_reports_its_lag() {
    let Some(primary) = Cluster::primary() else {
        return;
    };
    execute(&primary.url("postgres"), "CREATE DATABASE idemwatch").await;
    let primary_url = primary.url("idemwatch");
    let on_primary =
        Server::start("serve", &primary_url, &["--backlog-refresh-interval", "1s"]).await;
    let standby = Cluster::standby_of(&primary);
    let standby_url = standby.url("idemwatch");
    let on_standby = Server::start(
        "serve",
        &standby_url,
        &[
            "--no-migrate",
            "--prune-interval",
            "0",
            "--backlog-refresh-interval",
            "1s",
            "--tail-poll-interval",
            "200ms",
        ],
    )
    .await;

    // The guard writes on the primary: a refund that completes and one left UNKNOWN.
    let store = Store::connect(&primary_url, &StoreOptions::default())
        .await
        .unwrap();
    let clock = ManualClock::new(Utc::now());
    let ledger = Ledger::new(clock.clone(), TimeDelta::hours(24));
    let guard = Guard::new(store.clone(), Arc::new(clock), GuardSettings::default());
    let client = |faults| Client::new(&ledger, Duration::from_millis(200), faults);
    let done = refund("R-1", 1000, "1");
    guard.run(&done, &client(vec![])).await.unwrap();
    let unknown = refund("R-2", 2000, "1");
    guard
        .run(&unknown, &client(vec![Fault::Unavailable]))
        .await
        .unwrap_err();
    let written = Instant::now();
    let key = unknown.intent.key().unwrap().to_string();

    // The standby's instance shows it once replayed.
    let visible = loop {
        let (status, body) = get(&on_standby.addr, &format!("/api/v1/keys/{key}"))
            .await
            .unwrap();
        if status == 200 && body.contains("UNKNOWN") {
            break written.elapsed();
        }
        assert!(
            written.elapsed() < Duration::from_secs(20),
            "never replayed: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for path in [
        "/",
        "/keys",
        &format!("/keys/{key}"),
        "/backlog",
        "/export/attempts.ndjson",
        "/readyz",
    ] {
        let (status, body) = get(&on_standby.addr, path).await.unwrap();
        assert_eq!(status, 200, "{path} on the standby: {body}");
    }
    // Its tailer counts what the primary wrote, and it reports its lag.
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let (_, metrics) = get(&on_standby.addr, "/metrics").await.unwrap();
        if metric_sum(&metrics, "idempotency_requests_total") >= 2.0 || Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        metric_sum(&metrics, "idempotency_requests_total"),
        2.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("# HELP idemwatch_replica_lag_seconds "),
        "{metrics}"
    );
    let lag = metric_sum(&metrics, "idemwatch_replica_lag_seconds");
    assert!((0.0..5.0).contains(&lag), "replica lag {lag}");
    let (_, primary_metrics) = get(&on_primary.addr, "/metrics").await.unwrap();
    assert_eq!(
        metric_sum(&primary_metrics, "idemwatch_replica_lag_seconds"),
        0.0
    );

    // A resolve on the standby is refused, pointing at the primary; nothing changed.
    let (status, head, refusal) = resolve(&on_standby.addr, &key).await;
    assert_eq!(status, 503, "{refusal}");
    assert!(
        refusal.contains("read-only standby") && refusal.contains("primary"),
        "{refusal}"
    );
    assert!(!head.to_ascii_lowercase().contains("retry-after"), "{head}");
    // On the primary's instance it works, and the standby shows the result.
    let (status, _, body) = resolve(&on_primary.addr, &key).await;
    assert_eq!(status, 200, "{body}");
    let resolved = Instant::now();
    loop {
        let (_, body) = get(&on_standby.addr, &format!("/api/v1/keys/{key}"))
            .await
            .unwrap();
        if body.contains("\"FAILED\"") {
            break;
        }
        assert!(resolved.elapsed() < Duration::from_secs(20), "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "read replica: a guard write visible on the standby's pages after {visible:?}, a resolution after {:?}; \
         idemwatch_replica_lag_seconds {lag}; resolve on the standby: 503 {refusal}",
        resolved.elapsed()
    );
}
