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
//! - The replay-spike rule compares the last 5 minutes with the tool's usual share,
//!   read from recorded 1h ratios a day and an hour old. A fresh Prometheus has none, so
//!   the rule falls back to the current 1h ratio; the test backfills 70 minutes of a
//!   normal day (10 requests/s, 0.4% replays, ending 6 minutes ago) for the same series
//!   with `promtool tsdb create-blocks-from openmetrics` before starting it, so that
//!   ratio is a normal one.
//! - The alert's `for:` (minutes) is shortened to 5 s in the test's copy of the rules,
//!   and Alertmanager's `group_wait` to 1 s, so the test takes about a minute. The
//!   expression, the routing and the inhibitions are the real ones; the `for:` timing
//!   is covered by the promtool unit tests in grafana/prometheus/tests.
//! - Prometheus's external label `idemwatch_url` points every link at this test's
//!   idemwatch, which serves the runbook itself (`/runbook`).

use crate::metrics::promtool_check;
use crate::support::alertmanager::{self, post_json, start_alertmanager};
use crate::support::dashboard::{dashboard_exprs, substitute};
use crate::support::fixture::{Fixture, refund};
use crate::support::process::{free_addr, installed, start};
use crate::support::webhook::Webhook;
use crate::support::{TestDb, pg};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RULES: &str = "grafana/prometheus/idemwatch-rules.yml";
const RUNBOOK: &str = "docs/RUNBOOK.md";
const DASHBOARD: &str = "grafana/dashboards/idemwatch.json";
const ALERT: &str = "IdempotencyReplaySpike";

/// A plain HTTP/1.0 GET (no client library needed): status and body.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
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

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn api(prometheus: SocketAddr, path: &str) -> Value {
    let (status, body) = get(prometheus, path).await.expect("Prometheus answers");
    let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(json["status"], "success", "{path}: HTTP {status}: {body}");
    json["data"].clone()
}

async fn query(prometheus: SocketAddr, promql: &str) -> Value {
    api(
        prometheus,
        &format!("/api/v1/query?query={}", encode(promql)),
    )
    .await
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut done: F)
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
fn rules_for_test(text: &str) -> String {
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

/// Seventy minutes of a normal day for the spike's series, ending six minutes ago.
fn normal_day(instance: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (start, end) = (now - 76 * 60, now - 6 * 60);
    let mut om = String::from("# TYPE idempotency_requests counter\n");
    for (outcome, per_second) in [("new", 9.96), ("replay", 0.04)] {
        for t in (start..end).step_by(15) {
            let value = per_second * (t - start) as f64;
            om.push_str(&format!(
                "idempotency_requests_total{{instance=\"{instance}\",job=\"idemwatch\",outcome=\"{outcome}\",tool=\"issue_refund\"}} {value:.3} {t}\n"
            ));
        }
    }
    om.push_str("# EOF\n");
    om
}

/// GETs an `http://host:port/path?query#fragment` link on loopback.
async fn follow(url: &str) -> (u16, String) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_spike_pages_through_a_real_prometheus_and_alertmanager() {
    if !installed("prometheus") || !installed("promtool") {
        if pg::required() {
            panic!(
                "prometheus and promtool are required under CI=true (apt-get install prometheus)"
            );
        }
        eprintln!("\n*** SKIPPED end-to-end alert test: prometheus/promtool not installed ***\n");
        return;
    }
    let started = Instant::now();
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    let idemwatch = free_addr();
    let listen = idemwatch.to_string();
    let mut serve = start(
        "idemwatch",
        env!("CARGO_BIN_EXE_idemwatch"),
        &[
            "serve",
            "--listen",
            &listen,
            "--database-url",
            &db.url,
            "--tail-poll-interval",
            "200ms",
            "--backlog-refresh-interval",
            "1s",
        ],
        dir.path(),
    );
    wait_until("idemwatch /metrics", Duration::from_secs(30), || async {
        get(idemwatch, "/metrics")
            .await
            .is_some_and(|(s, _)| s == 200)
    })
    .await;

    // The far end: the pager and the operator's docs host (a webhook server in this
    // process), and the example Alertmanager in front of it.
    let runbook = std::fs::read_to_string(root.join(RUNBOOK)).expect("docs/RUNBOOK.md");
    let webhook = Webhook::start(runbook).await;
    let alertmanager = match alertmanager::program() {
        Some(program) => Some(start_alertmanager(&program, dir.path(), webhook.addr).await),
        None => None,
    };

    // Prometheus: backfilled history, the rules, a 1 s scrape of idemwatch, the links'
    // external labels, and the Alertmanager.
    let data = dir.path().join("data");
    let om = dir.path().join("normal_day.om");
    std::fs::write(&om, normal_day(&listen)).unwrap();
    let backfill = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        backfill.status.success(),
        "{}",
        String::from_utf8_lossy(&backfill.stderr)
    );
    let rules_text = std::fs::read_to_string(root.join(RULES)).expect("the rules file");
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, rules_for_test(&rules_text)).unwrap();
    // idemwatch serves its own runbook: one external label builds every link.
    let runbook_base = format!("http://{listen}/runbook");
    let alerting = match &alertmanager {
        Some((_, am)) => {
            format!(
                "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am}']\n"
            )
        }
        None => String::new(),
    };
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n  external_labels:\n    \
             idemwatch_url: 'http://{listen}'\n\
             rule_files:\n  - {}\n{alerting}\
             scrape_configs:\n  - job_name: idemwatch\n    static_configs:\n      - targets: ['{listen}']\n",
            rules.display()
        ),
    )
    .unwrap();
    let prometheus = free_addr();
    let _prometheus = start(
        "prometheus",
        "prometheus",
        &[
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", data.display()),
            &format!("--web.listen-address={prometheus}"),
            "--log.level=warn",
        ],
        dir.path(),
    );
    wait_until(
        "Prometheus scraping idemwatch",
        Duration::from_secs(60),
        || async {
            get(prometheus, "/-/ready")
                .await
                .is_some_and(|(s, _)| s == 200)
                && query(prometheus, "up{job=\"idemwatch\"} == 1").await["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
        },
    )
    .await;

    // The incident: the provider slows past the clients' deadline and about one
    // request in five is a retry answered from the stored result: 132 replays in
    // 12 seconds, well above the alert's 30 in 5 minutes.
    let f = Fixture::new(&db);
    let mut next = 0;
    for _round in 0..12 {
        for _ in 0..40 {
            let call = refund(&format!("SPIKE-{next}"), 4500, "1");
            f.guard.run(&call, &f.client([])).await.unwrap();
            next += 1;
        }
        for i in 0..11 {
            let call = refund(&format!("SPIKE-{}", next - 1 - i * 3), 4500, "1");
            assert!(f.guard.run(&call, &f.client([])).await.unwrap().replayed);
        }
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let (_, exposition) = get(idemwatch, "/metrics").await.unwrap();
    promtool_check(&exposition);

    let deadline = Instant::now() + Duration::from_secs(90);
    let firing = loop {
        let alerts = api(prometheus, "/api/v1/alerts").await;
        let found = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["labels"]["alertname"] == ALERT && a["state"] == "firing")
            .cloned();
        if let Some(alert) = found {
            break alert;
        }
        assert!(Instant::now() < deadline, "{ALERT} did not fire: {alerts}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(firing["labels"]["tool"], "issue_refund", "{firing}");
    assert_eq!(firing["labels"]["severity"], "critical", "{firing}");

    // Delivered: Prometheus → Alertmanager → the page receiver, with links that work.
    if alertmanager.is_some() {
        let page = webhook.wait_for("page", ALERT).await;
        assert_eq!(page.body["status"], "firing", "{}", page.body);
        let alert = page.alert(ALERT);
        assert_eq!(alert["labels"]["tool"], "issue_refund", "{alert}");
        let runbook_url = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        let ui_url = alert["annotations"]["ui_url"].as_str().unwrap_or_default();
        assert_eq!(
            runbook_url,
            format!("{runbook_base}#{}", ALERT.to_lowercase()),
            "{alert}"
        );
        assert_eq!(
            ui_url,
            format!(
                "http://{listen}/keys?tool=issue_refund&outcome=replay,replay_failure&from=now-1h"
            ),
            "{alert}"
        );
        // Follow both links, as on-call would.
        let (status, text) = follow(runbook_url).await;
        assert_eq!(status, 200, "{runbook_url}");
        assert!(
            text.contains(&format!("id=\"{}\"", ALERT.to_lowercase())),
            "{runbook_url}: no section"
        );
        let (status, text) = follow(ui_url).await;
        assert_eq!(status, 200, "{ui_url}: {text}");
        assert!(
            text.contains("order:SPIKE-"),
            "{ui_url}: the spike's keys are not listed"
        );
        assert!(
            webhook.received().iter().all(|n| n.receiver == "page"),
            "only the page receiver was notified: {:?}",
            webhook.received()
        );
    }

    // Every rule expression and every dashboard query evaluates without error, on
    // live data.
    let groups = api(prometheus, "/api/v1/rules").await;
    let mut exprs: Vec<String> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["query"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 7, "rules loaded: {groups}");
    for rule in groups["groups"].as_array().into_iter().flatten() {
        for r in rule["rules"].as_array().into_iter().flatten() {
            assert_ne!(r["health"], "err", "rule failed to evaluate: {r}");
        }
    }
    match std::fs::read_to_string(root.join(DASHBOARD)) {
        Ok(text) => {
            let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
            let mut queries = Vec::new();
            dashboard_exprs(&dashboard, &mut queries);
            assert!(!queries.is_empty(), "no PromQL in {DASHBOARD}");
            exprs.extend(queries.iter().map(|q| substitute(q, &listen)));
        }
        Err(_) => eprintln!("*** {DASHBOARD} not in this tree: only rule expressions checked ***"),
    }
    for expr in &exprs {
        query(prometheus, expr).await;
    }
    // SIGTERM: the server, the tailer and the refresher stop, and the process exits 0.
    let pid = serve.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = serve.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "idemwatch serve did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "idemwatch serve exited with {status}");

    eprintln!(
        "end-to-end: {ALERT} fired{} and {} expressions evaluated in {:?}",
        if alertmanager.is_some() {
            ", paged through Alertmanager with working links,"
        } else {
            ""
        },
        exprs.len(),
        started.elapsed()
    );
}

/// The example Alertmanager configuration, live: while a replica's database is down,
/// the backlog alerts of its job are held back (they read frozen gauges) and
/// notification goes to the page for the database; another job's are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_alertmanager_holds_backlog_alerts_while_the_database_is_down() {
    let Some(program) = alertmanager::program() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(String::new()).await;
    let (_alertmanager, am) = start_alertmanager(&program, dir.path(), webhook.addr).await;

    let alert = |name: &str, labels: Value| {
        let mut labels = labels;
        labels["alertname"] = json!(name);
        json!({"labels": labels, "annotations": {"summary": name}})
    };
    let alerts = json!([
        alert(
            "IdemwatchDatabaseDown",
            json!({"job": "idemwatch", "instance": "10.0.0.1:8080", "severity": "critical"})
        ),
        alert(
            "IdempotencyUnknownNearRetention",
            json!({"job": "idemwatch", "tool": "issue_refund", "severity": "critical"})
        ),
        alert(
            "IdempotencyUnknownBacklogGrowing",
            json!({"job": "idemwatch", "tool": "issue_refund", "severity": "warning"})
        ),
        alert(
            "IdemwatchTailHeldBack",
            json!({"job": "idemwatch", "instance": "10.0.0.2:8080", "severity": "warning"})
        ),
        alert(
            "IdempotencyUnknownNearRetention",
            json!({"job": "idemwatch-staging", "tool": "issue_refund", "severity": "critical"})
        ),
    ]);
    let (status, body) = post_json(am, "/api/v2/alerts", &alerts.to_string()).await;
    assert_eq!(status, 200, "{body}");

    // The database page and the other job's page arrive; the held-back replica is another
    // instance, so its ticket arrives too.
    let page = webhook.wait_for("page", "IdemwatchDatabaseDown").await;
    assert_eq!(
        page.alert("IdemwatchDatabaseDown")["labels"]["job"],
        "idemwatch"
    );
    let staging = webhook
        .wait_for("page", "IdempotencyUnknownNearRetention")
        .await;
    assert_eq!(
        staging.alert("IdempotencyUnknownNearRetention")["labels"]["job"],
        "idemwatch-staging"
    );
    webhook.wait_for("ticket", "IdemwatchTailHeldBack").await;

    // Alertmanager says which alerts it holds back, and why.
    let (status, body) = get(am, "/api/v2/alerts")
        .await
        .expect("Alertmanager answers");
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let state = |name: &str, job: &str| -> String {
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["labels"]["alertname"] == name && a["labels"]["job"] == job)
            .map(|a| {
                format!(
                    "{} inhibited_by={}",
                    a["status"]["state"],
                    a["status"]["inhibitedBy"].as_array().map_or(0, Vec::len)
                )
            })
            .unwrap_or_else(|| panic!("{name}/{job} not listed: {listed}"))
    };
    assert_eq!(
        state("IdemwatchDatabaseDown", "idemwatch"),
        "\"active\" inhibited_by=0"
    );
    assert_eq!(
        state("IdempotencyUnknownNearRetention", "idemwatch"),
        "\"suppressed\" inhibited_by=1"
    );
    assert_eq!(
        state("IdempotencyUnknownBacklogGrowing", "idemwatch"),
        "\"suppressed\" inhibited_by=1"
    );
    assert_eq!(
        state("IdemwatchTailHeldBack", "idemwatch"),
        "\"active\" inhibited_by=0"
    );
    assert_eq!(
        state("IdempotencyUnknownNearRetention", "idemwatch-staging"),
        "\"active\" inhibited_by=0"
    );

    // Nothing about the held-back alerts reached a receiver.
    for notification in webhook.received() {
        for alert in notification.alerts() {
            assert!(
                !(alert["labels"]["job"] == "idemwatch"
                    && alert["labels"]["alertname"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("IdempotencyUnknown"))),
                "an inhibited alert was delivered: {alert}"
            );
        }
    }
}

#[test]
fn only_the_spike_alerts_for_is_shortened() {
    let rules = "      - alert: IdempotencyPayloadConflict\n        for: 0m\n      - alert: IdempotencyReplaySpike\n        expr: x\n        for: 2m\n        keep_firing_for: 5m\n";
    let out = rules_for_test(rules);
    assert!(out.contains("for: 0m"));
    assert!(out.contains("        for: 5s\n        keep_firing_for: 5m"));
    assert!(!out.contains("for: 2m"));
}
