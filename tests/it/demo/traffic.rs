//! The traffic generator in process: every kind of event, never a duplicate, and the
//! incident switch.

use super::{fast, kinds, records};
use crate::both_backends;
use crate::support::TestDb;
use crate::support::as_key;
use idemwatch::demo::{Demo, DemoConfig, IncidentSchedule, REPEAT_ORDER};
use idemwatch::guard::{AttemptKind, GENESIS_HASH, Status, chain_hash};
use idemwatch::store::Store;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

both_backends!(
    async fn the_demo_shows_every_kind_of_event_and_never_a_duplicate(db: TestDb) {
        let demo = Demo::new(db.store.clone(), fast(20.0));
        demo.run(tokio::time::sleep(Duration::from_secs(7))).await;
        let provider = demo.provider();

        // The provider's own count: one effect per intent, whatever happened.
        assert_eq!(provider.duplicates(), 0);
        let effects = provider.effects();
        assert!(effects.len() > 50, "only {} effects", effects.len());
        for e in &effects {
            assert_eq!(provider.effects_for_key(&e.key), 1, "{e:?}");
        }

        // The guard's records agree with the provider's books.
        let records = records(&db.store).await;
        let effect_keys: HashSet<&str> = effects.iter().map(|e| e.key.as_str()).collect();
        let mut statuses = BTreeMap::<String, usize>::new();
        for (key, status, _, _) in &records {
            *statuses.entry(status.clone()).or_default() += 1;
            match status.parse::<Status>().unwrap() {
                Status::Done => assert!(
                    effect_keys.contains(key.as_str()),
                    "DONE without effect: {key}"
                ),
                Status::Failed => assert!(
                    !effect_keys.contains(key.as_str()),
                    "FAILED with effect: {key}"
                ),
                Status::Unknown | Status::InProgress => {}
            }
        }
        assert!(
            statuses["UNKNOWN"] >= 1,
            "the forgotten key waits for a person: {statuses:?}"
        );

        // Every kind of event the guard writes on its own appeared in the log.
        let kinds = kinds(&db.store).await;
        for kind in [
            AttemptKind::Claimed,
            AttemptKind::Completed,
            AttemptKind::Replayed,
            AttemptKind::ReplayedFailure,
            AttemptKind::InFlightRejected,
            AttemptKind::PayloadMismatch,
            AttemptKind::Failed,
            AttemptKind::MarkedUnknown,
            AttemptKind::TakenOver,
            AttemptKind::ReconciledFound,
            AttemptKind::Resent,
            AttemptKind::Escalated,
        ] {
            assert!(
                kinds.get(&kind).copied().unwrap_or(0) > 0,
                "no {kind} in {kinds:?}"
            );
        }

        // Two genuine refunds on one order: two intents, two keys, two effects.
        let repeat = provider.effects_for_order(REPEAT_ORDER);
        assert_eq!(repeat.len(), 2, "{repeat:?}");
        assert_ne!(repeat[0].key, repeat[1].key);
        assert_eq!(repeat[0].amount_p, repeat[1].amount_p);
        let business_ref = format!("order:{REPEAT_ORDER}");
        let mut intents = HashSet::new();
        for e in &repeat {
            let (_, status, bref, intent) = records
                .iter()
                .find(|r| r.0 == e.key)
                .expect("a record per effect");
            assert_eq!(
                (status.as_str(), bref.as_deref()),
                ("DONE", Some(business_ref.as_str()))
            );
            intents.insert(intent.clone());
            // "Weeks later": past the (compressed) duplicate window, no suspected pair.
            let pairs = db.store.suspected_pairs_of(&as_key(&e.key)).await.unwrap();
            assert!(pairs.is_empty(), "{pairs:?}");
        }
        assert_eq!(intents.len(), 2);
        let (first, second) = (&repeat[0], &repeat[1]);
        assert!(
            second.performed_at - first.performed_at
                >= chrono::TimeDelta::from_std(fast(20.0).provider_retention).unwrap(),
            "the second refund comes after the provider's retention: {repeat:?}"
        );

        // The provider's lookup page: what a person checks before resolving a key.
        let app = idemwatch::web::app_with(
            idemwatch::web::AppState::new(db.store.clone()),
            idemwatch::demo::router(demo.clone()),
        );
        let page = crate::support::app::get(&app, &format!("/demo/provider/{}", first.key)).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(&first.resource_id), "{}", page.body);
        assert!(
            page.body.contains("1 effect tagged with this key"),
            "{}",
            page.body
        );
        assert!(page.body.contains(&format!("/keys/{}", first.key)));
        let page =
            crate::support::app::get(&app, &format!("/demo/provider/{}", "0".repeat(64))).await;
        assert!(
            page.body.contains("No effect is tagged with this key"),
            "{}",
            page.body
        );

        // Each key's log is contiguous and its hash chain verifies.
        for (key, _, _, _) in &records {
            let attempts = db.store.attempts(&as_key(key)).await.unwrap();
            let mut prev = GENESIS_HASH.to_string();
            for (i, a) in attempts.iter().enumerate() {
                assert_eq!(a.seq, i as i64 + 1);
                assert_eq!(a.prev_hash, prev);
                assert_eq!(chain_hash(&a.prev_hash, a.chain_fields()), a.hash);
                prev = a.hash.clone();
            }
        }

        // /demo/stats tells the same story.
        let snapshot = demo.snapshot().await.unwrap();
        assert_eq!(
            (snapshot.effects, snapshot.duplicates),
            (effects.len() as u64, 0)
        );
        assert!(snapshot.by_outcome["conflict"] >= 1);
        assert_eq!(snapshot.requests, snapshot.by_outcome.values().sum::<i64>());
    }
);

/// Replays over admissions, as the recording rule computes it.
async fn replay_ratio(store: &Store) -> (f64, i64) {
    let k = kinds(store).await;
    let n = |kind| k.get(&kind).copied().unwrap_or(0);
    let admissions: i64 = k
        .iter()
        .filter(|(kind, _)| kind.admission_outcome().is_some())
        .map(|(_, n)| n)
        .sum();
    let replays = n(AttemptKind::Replayed) + n(AttemptKind::ReplayedFailure);
    (replays as f64 / admissions as f64, admissions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_incident_switch_takes_the_replay_ratio_from_a_trickle_to_a_fifth() {
    let run = |incident: bool| async move {
        let db = TestDb::sqlite().await;
        let mut config = DemoConfig::new(20.0, 10.0);
        config.showcase = false;
        if incident {
            config.incident = IncidentSchedule {
                start_now: true,
                length: Duration::from_secs(3600),
                ..IncidentSchedule::OFF
            };
        }
        let demo = Demo::new(db.store.clone(), config);
        demo.run(tokio::time::sleep(Duration::from_secs(6))).await;
        assert_eq!(demo.provider().duplicates(), 0);
        replay_ratio(&db.store).await
    };
    let (normal, n) = run(false).await;
    assert!(n > 60, "{n} admissions");
    assert!(normal < 0.05, "normal day: replay ratio {normal}");
    let (incident, n) = run(true).await;
    eprintln!("replay ratio: normal day {normal:.4}, incident {incident:.4} ({n} admissions)");
    assert!(n > 60, "{n} admissions");
    assert!(incident > 0.12, "incident: replay ratio {incident}");
}
