//! End to end: the built `idemwatch serve` on a temporary SQLite database, a real
//! Prometheus (Debian's package) scraping it every second with the project's rules, a
//! replay spike driven through the guard in this process against the same database
//! file, and `IdempotencyReplaySpike` watched until it fires through Prometheus's
//! HTTP API. Then every rule expression and every dashboard query is evaluated and
//! must come back without error.
//!
//! Two things differ from production, on purpose:
//! - The replay-spike rule compares the last 5 minutes with the tool's previous hour.
//!   A fresh Prometheus has no previous hour, so the test backfills 70 minutes of a
//!   normal day (10 requests/s, 0.4% replays, ending 6 minutes ago) for the same
//!   series with `promtool tsdb create-blocks-from openmetrics` before starting it.
//! - The alert's `for:` (minutes) is shortened to 5 s in the test's copy of the rules,
//!   so the test takes well under two minutes. The expression is the real one; the
//!   `for:` timing is covered by the promtool unit tests in grafana/prometheus/tests.

use crate::guard_faults::{Fixture, refund};
use crate::metrics::promtool_check;
use crate::support::{TestDb, pg};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RULES: &str = "grafana/prometheus/idemwatch-rules.yml";
const DASHBOARD: &str = "grafana/dashboards/idemwatch.json";
const ALERT: &str = "IdempotencyReplaySpike";

/// Used only while the rules file is not in the tree: the replay-spike alert and the
/// recording rules it reads, as the rules file defines them.
const FALLBACK_RULES: &str = r#"groups:
  - name: idemwatch.recording
    rules:
      - record: tool_outcome:idempotency_requests:rate5m
        expr: sum without (tenant) (max without (instance, pod) (rate(idempotency_requests_total[5m])))
      - record: tool_outcome:idempotency_requests:rate1h
        expr: sum without (tenant) (max without (instance, pod) (rate(idempotency_requests_total[1h])))
      - record: tool:idempotency_requests:rate5m
        expr: sum without (outcome) (tool_outcome:idempotency_requests:rate5m)
      - record: tool:idempotency_requests:rate1h
        expr: sum without (outcome) (tool_outcome:idempotency_requests:rate1h)
      - record: tool:idempotency_replay_ratio:rate5m
        expr: sum without (outcome) (tool_outcome:idempotency_requests:rate5m{outcome=~"replay|replay_failure"}) / (tool:idempotency_requests:rate5m > 0)
      - record: tool:idempotency_replay_ratio:rate1h
        expr: sum without (outcome) (tool_outcome:idempotency_requests:rate1h{outcome=~"replay|replay_failure"}) / (tool:idempotency_requests:rate1h > 0)
  - name: idemwatch.guard
    rules:
      - alert: IdempotencyReplaySpike
        expr: |
          tool:idempotency_replay_ratio:rate5m > 0.05
          and
          tool:idempotency_replay_ratio:rate5m
            > 5 * (tool:idempotency_replay_ratio:rate1h offset 1h or tool:idempotency_replay_ratio:rate1h)
          and
          tool:idempotency_requests:rate5m > 0.5
        for: 2m
        labels:
          severity: critical
        annotations:
          summary: "Replay ratio spike on {{ $labels.tool }}"
"#;

/// Kills a child process when the test ends, however it ends.
struct Running(Child, &'static str, PathBuf);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.2).unwrap_or_default();
            eprintln!("--- {} log ---\n{log}", self.1);
        }
    }
}

fn start(name: &'static str, program: &str, args: &[&str], dir: &Path) -> Running {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(program)
        .args(args)
        .env("IDEMWATCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    Running(child, name, log)
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

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

/// Grafana variables in a dashboard query, replaced with concrete values.
fn substitute(expr: &str, instance: &str) -> String {
    let value = |name: &str| -> String {
        match name {
            "job" => "idemwatch".into(),
            "instance" => instance.into(),
            "tool" => "issue_refund".into(),
            "tenant" => ".*".into(),
            "__rate_interval" => "1m".into(),
            "__interval" => "15s".into(),
            "__range" => "1h".into(),
            "__range_s" => "3600".into(),
            "__range_ms" => "3600000".into(),
            "__interval_ms" => "15000".into(),
            other => panic!("dashboard variable ${other} has no test value: add one here"),
        }
    };
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').expect("closing brace of a variable");
            let name = braced[..end].split(':').next().unwrap_or_default();
            (name, end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        out.push_str(&value(name));
        rest = &after[used..];
    }
    out.push_str(rest);
    out
}

fn dashboard_exprs(json: &Value, out: &mut Vec<String>) {
    match json {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) if !e.trim().is_empty() => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_spike_fires_the_alert_in_a_real_prometheus() {
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

    // Prometheus: backfilled history, the rules, a 1 s scrape of idemwatch.
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
    let real_rules = root.join(RULES);
    let rules_text = std::fs::read_to_string(&real_rules).unwrap_or_else(|_| {
        eprintln!("*** {RULES} not in this tree: using the test's copy of {ALERT} ***");
        FALLBACK_RULES.to_string()
    });
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, rules_for_test(&rules_text)).unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
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
    // request in five is a retry answered from the stored result.
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
        "end-to-end: {ALERT} fired and {} expressions evaluated in {:?}",
        exprs.len(),
        started.elapsed()
    );
}

#[test]
fn grafana_variables_are_replaced_with_concrete_values() {
    assert_eq!(
        substitute(
            r#"rate(x{job="$job",instance=~"${instance:regex}",tool=~"$tool"}[$__rate_interval])"#,
            "127.0.0.1:1"
        ),
        r#"rate(x{job="idemwatch",instance=~"127.0.0.1:1",tool=~"issue_refund"}[1m])"#
    );
}

#[test]
fn only_the_spike_alerts_for_is_shortened() {
    let rules = "      - alert: IdempotencyPayloadConflict\n        for: 0m\n      - alert: IdempotencyReplaySpike\n        expr: x\n        for: 2m\n        keep_firing_for: 5m\n";
    let out = rules_for_test(rules);
    assert!(out.contains("for: 0m"));
    assert!(out.contains("        for: 5s\n        keep_firing_for: 5m"));
    assert!(!out.contains("for: 2m"));
}
