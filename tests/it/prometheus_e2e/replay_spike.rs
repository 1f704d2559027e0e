//! A replay spike pages through a real Prometheus and Alertmanager (see the parent module
//! for what differs from production).

use super::{
    ALERT, DASHBOARD, RULES, RUNBOOK, api, follow, get, query, rules_for_test, start_prometheus,
    wait_until,
};
use crate::metrics::promtool_check;
use crate::support::alertmanager::{self, start_alertmanager};
use crate::support::dashboard::{dashboard_exprs, substitute};
use crate::support::fixture::{Fixture, refund};
use crate::support::process::{free_addr, installed, start};
use crate::support::server::refund_tools_file;
use crate::support::webhook::Webhook;
use crate::support::{TestDb, pg};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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
    // The tools file names the tool: its series are exported at 0 from the start, so
    // the first event is an increase Prometheus sees (issue 50).
    let tools = refund_tools_file(dir.path());
    let tools = tools.to_str().unwrap();
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
            "--tools-file",
            tools,
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

    // Prometheus: empty (no history at all), the rules, a 1 s scrape of idemwatch, the
    // links' external labels, and the Alertmanager.
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
    let (_prometheus, prometheus) = start_prometheus(dir.path(), &config).await;
    wait_until(
        "Prometheus scraping idemwatch",
        Duration::from_secs(60),
        || async {
            query(prometheus, "up{job=\"idemwatch\"} == 1").await["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        },
    )
    .await;

    // The first event of the tool is a conflict, in the first scrape interval of its
    // series: on the old exporter the series appeared holding 1, `increase()` saw 0 and
    // IdempotencyPayloadConflict never fired.
    let f = Fixture::new(&db);
    let first = refund("FIRST", 4500, "1");
    f.guard.run(&first, &f.client([])).await.unwrap();
    let mut changed = first.clone();
    changed.args["amount_p"] = serde_json::json!(4000);
    assert!(f.guard.run(&changed, &f.client([])).await.is_err());
    // The incident: the provider slows past the clients' deadline and about one
    // request in five is a retry answered from the stored result: 132 replays in
    // 12 seconds, well above the alert's 30 in 5 minutes.
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
        // The conflict is a ticket, not a page.
        let ticket = webhook
            .wait_for("ticket", "IdempotencyPayloadConflict")
            .await;
        assert_eq!(
            ticket.alert("IdempotencyPayloadConflict")["labels"]["tool"],
            "issue_refund"
        );
        for n in webhook.received() {
            let names: Vec<&Value> = n.alerts().map(|a| &a["labels"]["alertname"]).collect();
            let expected = if n.receiver == "page" {
                ALERT
            } else {
                "IdempotencyPayloadConflict"
            };
            assert!(
                names.iter().all(|a| *a == expected),
                "{}: {names:?}",
                n.receiver
            );
        }
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

#[test]
fn only_the_spike_alerts_for_is_shortened() {
    let rules = "      - alert: IdempotencyPayloadConflict\n        for: 0m\n      - alert: IdempotencyReplaySpike\n        expr: x\n        for: 2m\n        keep_firing_for: 5m\n";
    let out = rules_for_test(rules);
    assert!(out.contains("for: 0m"));
    assert!(out.contains("        for: 5s\n        keep_firing_for: 5m"));
    assert!(!out.contains("for: 2m"));
}
