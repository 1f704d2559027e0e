//! Day zero, as a new user meets it (issue 50): a Prometheus started empty with the
//! shipped rules file, unmodified (`for: 2m` and all), then `idemwatch demo --incident`.
//! `IdempotencyReplaySpike` must fire within 5 minutes of the incident's start (the
//! rule's usual share is its 2% floor: there is no history), and the demo's opening
//! payload conflict, in the process's first second, before Prometheus's first scrape of
//! it, must fire `IdempotencyPayloadConflict`. Only the scrape and evaluation intervals
//! are shortened (1 s), as a test can afford and an operator would not need.

use super::RULES;
use super::{api, start_prometheus};
use crate::support::pg;
use crate::support::process::{free_addr, installed, start};
use std::path::Path;
use std::time::{Duration, Instant};

/// The bound: within 5 minutes of the incident's start.
const WITHIN: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_incident_pages_within_five_minutes_on_a_new_prometheus() {
    if !installed("prometheus") {
        if pg::required() {
            panic!("prometheus is required under CI=true (apt-get install prometheus)");
        }
        eprintln!("\n*** SKIPPED demo day-zero alert test: prometheus not installed ***\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let demo = free_addr();
    let listen = demo.to_string();

    // Prometheus first, scraping an address where nothing answers yet, as it would
    // while the demo starts.
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: idemwatch\n    static_configs:\n      - targets: ['{listen}']\n",
            root.join(RULES).display()
        ),
    )
    .unwrap();
    let (_prometheus, prometheus) = start_prometheus(dir.path(), &config).await;

    let started = Instant::now();
    let _demo = start(
        "demo",
        env!("CARGO_BIN_EXE_idemwatch"),
        &[
            "demo",
            "--listen",
            &listen,
            "--incident",
            "--duration",
            "7m",
            "--tail-poll-interval",
            "200ms",
        ],
        dir.path(),
    );

    let firing = |alerts: &serde_json::Value, name: &str| {
        alerts["alerts"].as_array().into_iter().flatten().any(|a| {
            a["labels"]["alertname"] == name
                && a["labels"]["tool"] == "issue_refund"
                && a["state"] == "firing"
        })
    };
    let (mut spike, mut conflict) = (None, None);
    while spike.is_none() || conflict.is_none() {
        assert!(
            started.elapsed() < WITHIN,
            "after {:?}: IdempotencyReplaySpike fired at {spike:?}, IdempotencyPayloadConflict at {conflict:?}; {}",
            started.elapsed(),
            api(prometheus, "/api/v1/alerts").await
        );
        let alerts = api(prometheus, "/api/v1/alerts").await;
        if spike.is_none() && firing(&alerts, "IdempotencyReplaySpike") {
            spike = Some(started.elapsed());
        }
        if conflict.is_none() && firing(&alerts, "IdempotencyPayloadConflict") {
            conflict = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "demo --incident on a new Prometheus: IdempotencyReplaySpike firing after {:?}, IdempotencyPayloadConflict after {:?}",
        spike.unwrap_or_default(),
        conflict.unwrap_or_default()
    );
}
