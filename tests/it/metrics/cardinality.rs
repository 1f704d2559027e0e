//! Tool names come from workers: a flood of distinct names must not grow /metrics
//! without bound (issue 47: 3,000 names grew it from 10 KB to 58 MB, and a restart kept
//! them, read back from the database). The tools file's tools are exported at zero
//! before their first event (issue 50: `increase()` never sees a series' first sample).

use super::*;
use crate::support::TestDb;
use crate::support::fixture::refund;
use idemwatch::metrics::{MetricsOptions, OTHER_TOOL};
use idemwatch::tail::TailSettings;
use std::collections::BTreeSet;

const CAP: usize = 50;

fn capped() -> Arc<Metrics> {
    let metrics = Arc::new(
        Metrics::new(MetricsOptions {
            tool_cap: CAP,
            ..MetricsOptions::default()
        })
        .unwrap(),
    );
    metrics.configure_tools(&["issue_refund".to_string()]);
    metrics
}

fn tool_values(s: &Scrape) -> BTreeSet<String> {
    s.samples
        .iter()
        .filter_map(|(_, labels, _)| labels.get("tool").cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_tool_names_fold_into_other_beyond_the_cap() {
    let db = TestDb::sqlite().await;
    let f = Fixture::new(&db);
    let store = &db.store;
    let metrics = capped();
    let mut tailer = Tailer::new(metrics.clone(), TailSettings::default());
    tailer.poll(store).await.unwrap();

    let run = |i: usize| {
        let mut call = refund(&format!("C-{i}"), 100, "1");
        call.intent.tool = format!("worker_tool_{i}");
        call
    };
    // The cap's worth of names, and one more: `other` exists from here on.
    for i in 0..=CAP {
        f.guard.run(&run(i), &f.client([])).await.unwrap();
    }
    tailer.catch_up(store).await.unwrap();
    let at_cap = scrape(store, &metrics).await;
    for i in CAP + 1..3000 {
        f.guard.run(&run(i), &f.client([])).await.unwrap();
    }
    tailer.catch_up(store).await.unwrap();
    let flooded = scrape(store, &metrics).await;

    let tools = tool_values(&flooded);
    assert_eq!(
        tools.len(),
        CAP + 2,
        "the tools file's, {CAP}, other: {tools:?}"
    );
    assert!(tools.contains("issue_refund") && tools.contains(OTHER_TOOL));
    assert_eq!(
        flooded.samples.len(),
        at_cap.samples.len(),
        "2,949 more tool names added series"
    );
    assert!(
        flooded.text.len() < at_cap.text.len() + 1024,
        "{}",
        flooded.text.len()
    );
    // Every event of a folded tool is counted under `other`, and as overflow.
    let rows = attempt_rows(store).await;
    let folded: Vec<&Row> = rows.iter().filter(|r| !tools.contains(&r.tool)).collect();
    assert_eq!(
        folded.len(),
        2 * (3000 - CAP),
        "a claim and a completion each"
    );
    let other_new = [("tool", OTHER_TOOL), ("outcome", "new")];
    assert_eq!(
        flooded.value("idempotency_requests_total", &other_new),
        (3000 - CAP) as f64
    );
    assert_eq!(
        flooded.value(
            "idemwatch_metrics_label_overflow_total",
            &[("label", "tool")]
        ),
        folded.len() as f64
    );
    assert_eq!(
        flooded.value(
            "idemwatch_metrics_label_overflow_total",
            &[("label", "tenant")]
        ),
        0.0
    );
    promtool_check(&flooded.text);

    // A restart reads every tool name back from the database: still capped.
    let restarted = capped();
    let mut tailer = Tailer::new(restarted.clone(), TailSettings::default());
    tailer.poll(store).await.unwrap();
    let after = scrape(store, &restarted).await;
    assert_eq!(
        tool_values(&after).len(),
        CAP + 2,
        "{:?}",
        tool_values(&after)
    );
}

#[tokio::test]
async fn the_tools_files_tools_are_exported_at_zero_before_any_event() {
    let db = TestDb::sqlite().await;
    let metrics = capped();
    let s = scrape(&db.store, &metrics).await;
    for outcome in [
        "new",
        "replay",
        "replay_failure",
        "conflict",
        "in_flight",
        "takeover",
    ] {
        let labels = [("tool", "issue_refund"), ("outcome", outcome)];
        assert_eq!(
            s.get("idempotency_requests_total", &labels),
            Some(0.0),
            "{outcome}"
        );
    }
    assert_eq!(
        s.get(
            "idempotency_suspected_duplicates_total",
            &[("tool", "issue_refund")]
        ),
        Some(0.0)
    );
    assert_eq!(
        s.get("idempotency_escalations_total", &[("tool", "issue_refund")]),
        Some(0.0)
    );
}
