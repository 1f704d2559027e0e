//! End to end: the built `idemwatch serve` on a temporary SQLite database, a real
//! Prometheus (Debian's package) scraping it every second with the project's rules, a
//! real Alertmanager (Debian's `prometheus-alertmanager`) with the example
//! configuration in grafana/alertmanager/, and a webhook receiver in this process. A
//! replay spike driven through the guard in this process against the same database
//! file makes `IdempotencyReplaySpike` fire in Prometheus and reach the webhook as a
//! page, whose runbook and key-list links must answer. Then every rule expression and
//! every dashboard query is evaluated and must come back without error.
//!
//! Things that differ from production, on purpose:
//! - Nothing is backfilled: Prometheus starts empty, as on a new user's first day
//!   (issue 50: the alert used to fire here only after a normal day was backfilled).
//!   With no whole-hour baseline the rule's usual share is its 2% floor.
//! - The alert's `for:` (minutes) is shortened to 5 s in the test's copy of the rules,
//!   and Alertmanager's `group_wait` to 1 s, so the test takes about a minute. The
//!   expression, the routing and the inhibitions are the real ones; the `for:` timing
//!   is covered by the promtool unit tests in grafana/prometheus/tests.
//! - Prometheus's external label `idemwatch_url` points every link at this test's
//!   idemwatch, which serves the runbook itself (`/runbook`).

mod backlog_inhibition;
mod demo_day_zero;
mod replay_spike;

use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(super) const RULES: &str = "grafana/prometheus/idemwatch-rules.yml";
pub(super) const RUNBOOK: &str = "docs/RUNBOOK.md";
pub(super) const DASHBOARD: &str = "grafana/dashboards/idemwatch.json";
pub(super) const ALERT: &str = "IdempotencyReplaySpike";

/// A plain HTTP/1.0 GET (no client library needed): status and body.
pub(super) async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

pub(super) fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) async fn api(prometheus: SocketAddr, path: &str) -> Value {
    let (status, body) = get(prometheus, path).await.expect("Prometheus answers");
    let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(json["status"], "success", "{path}: HTTP {status}: {body}");
    json["data"].clone()
}

pub(super) async fn query(prometheus: SocketAddr, promql: &str) -> Value {
    api(
        prometheus,
        &format!("/api/v1/query?query={}", encode(promql)),
    )
    .await
}

pub(super) async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The rules file with the alert's `for:` shortened (see the module comment).
pub(super) fn rules_for_test(text: &str) -> String {
    let mut in_alert = false;
    let mut shortened = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("- alert:") || trimmed.starts_with("- record:") {
                in_alert = trimmed == format!("- alert: {ALERT}");
            } else if in_alert && trimmed.starts_with("for:") {
                in_alert = false;
                shortened = true;
                let indent = &line[..line.len() - trimmed.len()];
                return format!("{indent}for: 5s");
            }
            line.to_string()
        })
        .collect();
    assert!(shortened, "no `for:` found for {ALERT} in the rules");
    lines.join("\n") + "\n"
}

/// A Prometheus with `config`, its data under `dir`, on a free port; returns the
/// process and its address once it is ready.
pub(super) async fn start_prometheus(
    dir: &std::path::Path,
    config: &std::path::Path,
) -> (crate::support::process::Running, SocketAddr) {
    let prometheus = crate::support::process::free_addr();
    let running = crate::support::process::start(
        "prometheus",
        "prometheus",
        &[
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", dir.join("data").display()),
            &format!("--web.listen-address={prometheus}"),
            "--log.level=warn",
        ],
        dir,
    );
    wait_until("Prometheus ready", Duration::from_secs(60), || async {
        get(prometheus, "/-/ready")
            .await
            .is_some_and(|(s, _)| s == 200)
    })
    .await;
    (running, prometheus)
}

/// GETs an `http://host:port/path?query#fragment` link on loopback.
pub(super) async fn follow(url: &str) -> (u16, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not http: {url}"));
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = path.split('#').next().unwrap_or("/");
    let addr: SocketAddr = host
        .parse()
        .unwrap_or_else(|_| panic!("not a loopback address: {url}"));
    assert!(addr.ip().is_loopback(), "{url}");
    get(addr, path)
        .await
        .unwrap_or_else(|| panic!("no answer from {url}"))
}
