//! The tailer and /metrics, checked against the attempt rows that produced them.
//!
//! Expected values are computed here from the rows with a mapping written out
//! independently of `idemwatch::tail::events` (the contract in docs/METRICS.md), and
//! the scenarios also pin concrete numbers, so a mapping bug in either place fails.

mod cardinality;
mod tail_faults;
mod tail_pending;
mod values;

use crate::support::fixture::Fixture;
use crate::support::pg;
use crate::support::provider::Fault;
use idemwatch::guard::{GuardError, IdempotencyKey, Resolution, ResolveRequest};
use idemwatch::metrics::Metrics;
use idemwatch::store::Store;
use idemwatch::tail::Tailer;
use idemwatch::web::{self, AppState};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Label set of one series, sorted by label name.
pub type Labels = BTreeMap<String, String>;

/// A parsed text exposition.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub text: String,
    pub samples: Vec<(String, Labels, f64)>,
}

impl Scrape {
    pub fn parse(text: String) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("sample line");
                let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
                match series.split_once('{') {
                    None => (series.to_string(), Labels::new(), value),
                    Some((name, rest)) => {
                        let body = rest.strip_suffix('}').expect("closing brace");
                        (name.to_string(), parse_labels(body), value)
                    }
                }
            })
            .collect();
        Scrape { text, samples }
    }

    /// The value of the series with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, v)| *v)
    }

    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("{name}{labels:?} missing from\n{}", self.text))
    }
}

fn parse_labels(body: &str) -> Labels {
    let mut labels = Labels::new();
    let mut rest = body;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    labels
}

/// GET /metrics through the real router.
pub async fn scrape(store: &Store, metrics: &Arc<Metrics>) -> Scrape {
    let app = web::app(AppState::with_metrics(store.clone(), metrics.clone()));
    Scrape::parse(crate::support::app::metrics(&app).await)
}

/// Feeds `text` to `promtool check metrics` and fails on any finding. A missing
/// promtool fails under CI=true and skips loudly otherwise.
pub fn promtool_check(text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            if pg::required() {
                panic!("promtool is required under CI=true: {e}");
            }
            eprintln!("\n*** SKIPPED promtool check metrics (promtool not found: {e}) ***\n");
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool check metrics: {findings}\n--- exposition ---\n{text}"
    );
}

/// One attempt row, read with this test's own SQL.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Row {
    pub id: i64,
    pub tool: String,
    pub tenant: String,
    pub kind: String,
    pub detail: sqlx::types::Json<Value>,
    pub duration_ms: Option<i64>,
}

pub async fn attempt_rows(store: &Store) -> Vec<Row> {
    const SQL: &str =
        "SELECT id, tool, tenant, kind, detail, duration_ms FROM idempotency_attempts ORDER BY id";
    match store {
        Store::Postgres(pool) => sqlx::query_as(SQL).fetch_all(pool).await.unwrap(),
        Store::Sqlite(pool) => sqlx::query_as(SQL).fetch_all(pool).await.unwrap(),
    }
}

/// The ids present now: rows before a tail's start, which it must not count.
pub async fn ids_now(store: &Store) -> HashSet<i64> {
    attempt_rows(store).await.iter().map(|r| r.id).collect()
}

/// Every counter series the rows imply: (metric, labels) → value, per the contract.
/// `tenant_of` maps a row's tenant to its label value (None: no tenant label).
pub fn expected_counters(
    rows: &[Row],
    tenant_of: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<(String, Labels), f64> {
    let mut out = BTreeMap::new();
    // The latency histogram and the suspected duplicates never carry the tenant label.
    let mut add = |name: &str, row: &Row, extra: &[(&str, &str)]| {
        let mut labels = Labels::new();
        labels.insert("tool".into(), row.tool.clone());
        let per_tool_only =
            name.ends_with("_count") || name == "idempotency_suspected_duplicates_total";
        if let Some(t) = tenant_of(&row.tenant).filter(|_| !per_tool_only) {
            labels.insert("tenant".into(), t);
        }
        for (k, v) in extra {
            labels.insert(k.to_string(), v.to_string());
        }
        *out.entry((name.to_string(), labels)).or_insert(0.0) += 1.0;
    };
    for row in rows {
        let req = |outcome| ("idempotency_requests_total", [("outcome", outcome)]);
        let to = |status| ("idempotency_transitions_total", [("status", status)]);
        let mut updates = vec![];
        match row.kind.as_str() {
            "claimed" => {
                updates.push(req("new"));
                if row.detail.get("suspected_duplicate_of").is_some() {
                    add("idempotency_suspected_duplicates_total", row, &[]);
                }
            }
            "replayed" => updates.push(req("replay")),
            "replayed_failure" => updates.push(req("replay_failure")),
            "payload_mismatch" => updates.push(req("conflict")),
            "in_flight_rejected" => updates.push(req("in_flight")),
            "taken_over" => updates.push(req("takeover")),
            "completed" | "reconciled_found" => updates.push(to("DONE")),
            "failed" => updates.push(to("FAILED")),
            "marked_unknown" => updates.push(to("UNKNOWN")),
            "escalated" => {
                updates.push(to("UNKNOWN"));
                add("idempotency_escalations_total", row, &[]);
            }
            "resolved" => {
                let resolution = row.detail["resolution"].as_str().unwrap();
                let previous = row.detail["previous_status"].as_str();
                add(
                    "idempotency_resolutions_total",
                    row,
                    &[("resolution", resolution)],
                );
                match resolution {
                    "done" => updates.push(to("DONE")),
                    "failed" => updates.push(to("FAILED")),
                    _ if previous != Some("UNKNOWN") => updates.push(to("UNKNOWN")),
                    _ => {}
                }
            }
            _ => {}
        }
        for (name, extra) in updates {
            add(name, row, &extra);
        }
        if matches!(row.kind.as_str(), "completed" | "failed" | "marked_unknown")
            && row.duration_ms.is_some()
        {
            add("idempotency_attempt_duration_seconds_count", row, &[]);
        }
    }
    out
}

/// Asserts that every counter of `scrape` equals what the rows after `before` imply:
/// each implied series has its value, every other event series is 0, and the tail
/// read exactly those rows.
pub fn assert_counters_match_rows(
    scrape: &Scrape,
    rows: &[Row],
    before: &HashSet<i64>,
    tenant_of: &dyn Fn(&str) -> Option<String>,
) {
    let counted: Vec<Row> = rows
        .iter()
        .filter(|r| !before.contains(&r.id))
        .cloned()
        .collect();
    let expected = expected_counters(&counted, tenant_of);
    for ((name, labels), value) in &expected {
        let got = scrape
            .samples
            .iter()
            .find(|(n, l, _)| n == name && l == labels)
            .map(|(_, _, v)| *v);
        assert_eq!(got, Some(*value), "{name}{labels:?}\n{}", scrape.text);
    }
    let event_families = [
        "idempotency_requests_total",
        "idempotency_transitions_total",
        "idempotency_resolutions_total",
        "idempotency_escalations_total",
        "idempotency_attempt_duration_seconds_count",
        "idempotency_suspected_duplicates_total",
    ];
    for (name, labels, value) in &scrape.samples {
        if event_families.contains(&name.as_str())
            && !expected.contains_key(&(name.clone(), labels.clone()))
        {
            assert_eq!(*value, 0.0, "unexpected {name}{labels:?}\n{}", scrape.text);
        }
    }
    let sum_ms: i64 = counted
        .iter()
        .filter(|r| matches!(r.kind.as_str(), "completed" | "failed" | "marked_unknown"))
        .filter_map(|r| r.duration_ms)
        .sum();
    let sum_s: f64 = scrape
        .samples
        .iter()
        .filter(|(n, _, _)| n == "idempotency_attempt_duration_seconds_sum")
        .map(|(_, _, v)| v)
        .sum();
    assert!(
        (sum_s - sum_ms as f64 / 1000.0).abs() < 1e-6,
        "{sum_s} vs {sum_ms} ms"
    );
    assert_eq!(
        scrape.value("idemwatch_tail_events_total", &[]),
        counted.len() as f64,
        "the tail read each row after its start exactly once"
    );
}

/// Polls `tailer` until it has read every row now in the log that is not in `before`
/// (on PostgreSQL, other tests' open transactions may hold it back for a while).
pub async fn catch_up_all(
    tailer: &mut Tailer,
    store: &Store,
    metrics: &Metrics,
    before: &HashSet<i64>,
) {
    let want = attempt_rows(store)
        .await
        .iter()
        .filter(|r| !before.contains(&r.id))
        .count() as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        tailer.catch_up(store).await.unwrap();
        let read = metrics.families().idemwatch_tail_events_total.get();
        assert!(read <= want, "read {read} rows, only {want} exist");
        if read == want {
            return;
        }
        assert!(Instant::now() < deadline, "tail stuck at {read} of {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `done` holds for the metrics (a running tailer's progress).
pub async fn wait_for(what: &str, metrics: &Metrics, done: impl Fn(&Metrics) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(metrics) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn resolve(
    f: &Fixture,
    key: &IdempotencyKey,
    resolution: Resolution,
) -> Result<(), GuardError> {
    let request = ResolveRequest {
        resolution,
        reason: "checked at the provider".into(),
        evidence: (resolution == Resolution::Done).then(|| "rf_manual".to_string()),
        result: None,
        actor: "sam@support".into(),
        expected_token: None,
    };
    f.guard.resolve(key, &request).await.map(|_| ())
}

pub fn no_tenant(_: &str) -> Option<String> {
    None
}
