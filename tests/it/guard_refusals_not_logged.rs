//! A run of identical refusals on one key is one row and a count (issue 47, docs/GUARD.md
//! "What the attempt log records"): the refusals answered without a row are counted on
//! the key (`refusals_not_logged`, on the key page and in its JSON) and in
//! `idemwatch_guard_refusals_not_logged_total{tool,reason}`, so rows plus the count are
//! the refusals answered.

use crate::both_backends;
use crate::support::app::{get, metrics};
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use chrono::TimeDelta;
use idemwatch::export::verify_database;
use idemwatch::guard::AttemptKind;
use serde_json::json;

/// The counter's sample for `reason` on the refund tool, from the exposition text.
fn not_logged(text: &str, reason: &str) -> Option<u64> {
    let series = format!(
        "idemwatch_guard_refusals_not_logged_total{{reason=\"{reason}\",tool=\"issue_refund\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map(|v| v.parse().unwrap())
}

both_backends!(
    async fn a_thousand_identical_stale_settles_are_one_row_and_a_count_of_999(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("N-1", 4500, "1");
        let key = api.admit(&call).await.key();
        // Another worker takes the key over once the lease has run out…
        api.f.clock.advance(TimeDelta::seconds(31));
        assert_eq!(api.admit(&call).await.json["decision"], "reconcile");
        // …and the first, stuck, settles under its stale token a thousand times.
        for _ in 0..1000 {
            let r = api
                .settle(&key, 1, json!({"outcome": "done", "result": {"id": 1}}))
                .await;
            assert_eq!(r.json["code"], "lease_lost", "{:?}", r.json);
        }

        let attempts = db.store.attempts(&key).await.unwrap();
        let stale = attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::StaleWriteRejected)
            .count();
        assert_eq!(stale, 1, "one row for the run: {attempts:#?}");
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(record.refusals_not_logged, 999, "the rest are counted");
        assert_eq!(
            record.fencing_token.0, 2,
            "the stale writes changed nothing"
        );
        let state = api.key_state(&key, "").await;
        assert_eq!(state.json["refusals_not_logged"], 999, "{:?}", state.json);
        let page = get(&api.http.app, &format!("/keys/{key}")).await;
        assert!(
            page.body
                .contains("Repeated refusals not logged</dt><dd>999 "),
            "{}",
            page.body
        );
        let exported = metrics(&api.http.app).await;
        assert_eq!(not_logged(&exported, "stale_write_rejected"), Some(999));

        // Identical mismatches count under their own reason, on top.
        let other = refund("N-1", 450_000, "1");
        for _ in 0..10 {
            assert_eq!(api.admit(&other).await.json["code"], "payload_mismatch");
        }
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(record.refusals_not_logged, 999 + 9);
        let exported = metrics(&api.http.app).await;
        assert_eq!(not_logged(&exported, "payload_mismatch"), Some(9));
        assert_eq!(not_logged(&exported, "in_flight_rejected"), Some(0));
        // The count is beside the chain, not in it: the log still verifies.
        let report = verify_database(&db.store).await.unwrap();
        assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    }
);
