//! Retention: the pruner keeps UNKNOWN and IN_PROGRESS keys, deletes what expired
//! with its attempts, archives first when asked, and is safe run twice at once.

use super::*;
use crate::both_backends;
use crate::support::as_key;
use idemwatch::export::{ExportRow, verify_database, verify_ndjson};
use idemwatch::guard::Status;
use idemwatch::retention::{PruneMetrics, Pruner, RetentionSettings};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

fn settings(batch_size: u32, archive: Option<&Path>) -> RetentionSettings {
    RetentionSettings {
        batch_size,
        archive_dir: archive.map(Path::to_path_buf),
        ..RetentionSettings::default()
    }
}

/// Attempt rows of every archive file in `dir`, each file verified on its own.
fn archived_rows(dir: &Path) -> Vec<ExportRow> {
    let mut rows = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("pruned-") && name.ends_with(".ndjson"),
            "no partial files left: {name}"
        );
        let bytes = std::fs::read(&path).unwrap();
        let report = verify_ndjson(&bytes[..]).unwrap();
        assert!(report.is_intact(), "{name}: {:?}", report.breaks);
        let text = String::from_utf8(bytes).unwrap();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["type"] == "attempt" {
                rows.push(serde_json::from_value(v).unwrap());
            } else {
                assert_eq!(v["source"], "archive");
            }
        }
    }
    rows
}

both_backends!(
    async fn pruning_deletes_what_expired_keeps_undecided_keys_and_archives_first(db: TestDb) {
        let f = Fixture::new(&db);
        let t0 = Utc::now() - TimeDelta::days(200);
        // At t0: FAILED, UNKNOWN and IN_PROGRESS keys (and a DONE one, and others).
        let old = seed(&f, t0).await;
        // At t0 + 60 d: a DONE and a FAILED key.
        f.clock.set(t0 + TimeDelta::days(60));
        let done_mid = refund("M-1", 100, "1");
        f.guard.run(&done_mid, &f.client([])).await.unwrap();
        let failed_mid = refund("M-2", 100, "2");
        f.guard
            .run(&failed_mid, &f.client([Fault::Decline]))
            .await
            .unwrap_err();
        // At t0 + 100 d: a recent DONE key. Now is t0 + 100 d + 1 h.
        f.clock.set(t0 + TimeDelta::days(100));
        let recent = refund("R-1", 100, "1");
        f.guard.run(&recent, &f.client([])).await.unwrap();
        f.clock.advance(TimeDelta::hours(1));
        let key = |c: &ToolCall| c.intent.key().unwrap().to_string();
        let (done_mid, failed_mid, recent) = (key(&done_mid), key(&failed_mid), key(&recent));

        // DONE keys go after 30 days, FAILED after 90: the old DONE/FAILED keys and
        // done_mid go; failed_mid (40 days) stays; UNKNOWN and IN_PROGRESS always stay.
        let gone = vec![
            old.done.clone(),
            old.failed.clone(),
            old.nasty.clone(),
            old.other.clone(),
            done_mid.clone(),
        ];
        let kept = vec![
            old.unknown.clone(),
            old.in_progress.clone(),
            failed_mid.clone(),
            recent.clone(),
        ];
        let before = expected(&f.store, &gone).await;
        assert_eq!(
            f.store
                .record(&as_key(&old.unknown))
                .await
                .unwrap()
                .unwrap()
                .status,
            Status::Unknown
        );
        assert_eq!(
            f.store
                .record(&as_key(&old.in_progress))
                .await
                .unwrap()
                .unwrap()
                .status,
            Status::InProgress
        );

        let dir = tempfile::tempdir().unwrap();
        let registry = prometheus::Registry::new();
        let pruner = Pruner::new(
            f.store.clone(),
            settings(2, Some(dir.path())),
            Arc::new(f.clock.clone()),
        )
        .with_metrics(PruneMetrics::register(&registry).unwrap());
        let summary = pruner.run_once().await.unwrap();
        assert_eq!((summary.counts.done, summary.counts.failed), (4, 1));
        assert_eq!(summary.counts.attempts as usize, before.len());
        assert_eq!(summary.batches, 3, "batches of two keys");
        assert_eq!(summary.archives.len(), 3);

        for k in &gone {
            assert!(
                f.store.record(&as_key(k)).await.unwrap().is_none(),
                "{k} pruned"
            );
            assert!(
                f.store.attempts(&as_key(k)).await.unwrap().is_empty(),
                "{k}'s attempts pruned with it"
            );
        }
        for k in &kept {
            assert!(
                f.store.record(&as_key(k)).await.unwrap().is_some(),
                "{k} kept"
            );
        }
        // What is left is consistent: every chain intact, no record without attempts.
        let report = verify_database(&f.store).await.unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!(report.keys, kept.len() as u64);

        // The archive holds exactly the deleted rows, as they were.
        let archived: Vec<Value> = archived_rows(dir.path())
            .into_iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap();
                v["type"] = json!("attempt");
                v
            })
            .collect();
        let mut archived_sorted = archived.clone();
        archived_sorted
            .sort_by_key(|v| (v["key"].as_str().unwrap().to_string(), v["seq"].as_i64()));
        assert_eq!(archived_sorted, before);

        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(
            text.contains("idemwatch_pruned_total{status=\"DONE\"} 4"),
            "{text}"
        );
        assert!(
            text.contains("idemwatch_pruned_total{status=\"FAILED\"} 1"),
            "{text}"
        );

        // Nothing more has expired.
        let again = pruner.run_once().await.unwrap();
        assert_eq!(again.counts.keys(), 0);
    }
);

both_backends!(
    async fn two_pruners_at_once_delete_and_archive_each_key_exactly_once(db: TestDb) {
        let f = Fixture::new(&db);
        let t0 = Utc::now() - TimeDelta::days(60);
        f.clock.set(t0);
        let mut keys = BTreeSet::new();
        for i in 0..24 {
            let call = refund(&format!("P-{i}"), 100, "1");
            f.guard.run(&call, &f.client([])).await.unwrap();
            keys.insert(call.intent.key().unwrap().to_string());
        }
        f.clock.set(Utc::now());
        let dir = tempfile::tempdir().unwrap();
        let a = Pruner::new(
            f.store.clone(),
            settings(3, Some(dir.path())),
            Arc::new(f.clock.clone()),
        );
        let b = a.clone();
        let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.counts.keys() + rb.counts.keys(), 24, "{ra:?} {rb:?}");
        for k in &keys {
            assert!(f.store.record(&as_key(k)).await.unwrap().is_none());
        }
        let archived = archived_rows(dir.path());
        let claimed: Vec<&str> = archived
            .iter()
            .filter(|r| r.seq == 1)
            .map(|r| r.key.as_str())
            .collect();
        let unique: BTreeSet<&str> = claimed.iter().copied().collect();
        assert_eq!(claimed.len(), 24, "each key archived once");
        assert_eq!(unique.len(), 24);
    }
);

/// The pruner's pick reads up to the later cut-off, not the whole table. With DONE
/// and FAILED cut-offs that differ (30 and 90 days by default) the OR alone gives the
/// planner no index condition; when its statistics say many keys are due (they are
/// stale between ANALYZEs, and the pruner is what makes them stale) it walks the
/// `updated_at` index from the oldest key with everything as a filter, and a pick
/// that finds fewer keys than its limit, the last of every run, read every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_pick_that_finds_few_keys_reads_no_further_than_the_cutoffs() {
    let Some(db) = crate::support::TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pool) = &db.store else {
        unreachable!()
    };
    let exec = |sql: &'static str| sqlx::query(sql).execute(pool);
    // 20,000 keys, one a second over the last 5.5 hours. The statistics are taken
    // while the provider is done with every key; then it remembers them all again,
    // so nothing is due but the planner believes the oldest keys are.
    crate::page_indexes::fill(&db.store, 20_000).await;
    exec("UPDATE idempotency_records SET provider_retention_until = now() - interval '1 day'")
        .await
        .unwrap();
    exec("ANALYZE idempotency_records").await.unwrap();
    exec("UPDATE idempotency_records SET provider_retention_until = now() + interval '1 day'")
        .await
        .unwrap();
    let now = Utc::now();
    // About 1,800 keys are older than the later cut-off, 18,000 newer.
    let cutoffs = idemwatch::store::PruneCutoffs {
        done_before: now - TimeDelta::minutes(300),
        failed_before: now - TimeDelta::minutes(310),
        now,
    };
    let explained = db
        .store
        .explain_prune_pick(&cutoffs, 500)
        .await
        .unwrap()
        .unwrap();
    let plan = &explained[0]["Plan"];
    assert_eq!(plan["Actual Rows"], 0, "nothing is due: {plan}");
    // Reading the ~1,800 keys older than the later cut-off is allowed (238 blocks on
    // 2026-12-05); reading on through the 18,000 newer ones (the old plan) is not.
    let blocks = crate::support::plans::most_blocks(plan);
    assert!(
        blocks < 2_500,
        "a pick that found nothing touched {blocks} blocks, reading past the cut-offs: {plan}"
    );
}
