//! The example Alertmanager configuration holds backlog alerts while the database is down.

use super::get;
use crate::support::alertmanager::{self, post_json, start_alertmanager};
use crate::support::webhook::Webhook;
use serde_json::{Value, json};

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
            "IdemwatchCheckpointerStalled",
            json!({"job": "idemwatch", "severity": "warning"})
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
        state("IdemwatchCheckpointerStalled", "idemwatch"),
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
                    && alert["labels"]["alertname"].as_str().is_some_and(|n| {
                        n.starts_with("IdempotencyUnknown") || n == "IdemwatchCheckpointerStalled"
                    })),
                "an inhibited alert was delivered: {alert}"
            );
        }
    }
}
