//! Suspected duplicates (issue 15, docs/GUARD.md 4a): a claim matching another key's
//! tenant, tool, business ref and fingerprint within the tool's window is recorded, counted
//! by the tailer, shown on both keys' pages and on /duplicates, and reviewed by a resolver
//! (intended with a reason, or confirmed) with a `duplicate_reviewed` attempt.

use crate::both_backends;
use crate::metrics::{catch_up_all, ids_now};
use crate::support::app::TestApp;
use crate::support::auth::*;
use crate::support::fixture::{Fixture, refund};
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::{
    AttemptKind, DuplicateReview, DuplicateVerdict, GuardError, IdempotencyKey, ToolCall,
};
use idemwatch::metrics::Metrics;
use idemwatch::tail::{TailSettings, Tailer};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The same refund planned again: another step id, so another intent key.
fn replanned(call: &ToolCall, n: u32) -> ToolCall {
    let mut c = call.clone();
    c.intent.step_id = format!("{}-again-{n}", c.intent.step_id);
    c
}

fn key(c: &ToolCall) -> IdempotencyKey {
    c.intent.key().unwrap()
}

both_backends!(
    async fn a_second_intent_for_the_same_ref_and_arguments_is_a_suspected_duplicate(db: TestDb) {
        let f = Fixture::new(&db);
        let first = refund("D-1", 4500, "1");
        f.guard.run(&first, &f.client([])).await.unwrap();
        f.clock.advance(TimeDelta::hours(1));
        let second = replanned(&first, 1);
        f.guard.run(&second, &f.client([])).await.unwrap();
        // Two effects: the guard lets it through (it may be a genuine repeat) and says so.
        assert_eq!(f.ledger.effects().len(), 2);
        let claimed = &f.store.attempts(&key(&second)).await.unwrap()[0];
        assert_eq!(claimed.kind, AttemptKind::Claimed);
        assert_eq!(
            claimed.detail["suspected_duplicate_of"],
            json!(key(&first).as_str())
        );
        let pairs = f.store.open_suspected_pairs(None, 10).await.unwrap();
        assert_eq!(pairs.len(), 1);
        assert_eq!(
            (pairs[0].key.as_str(), pairs[0].other_key.as_str()),
            (key(&second).as_str(), key(&first).as_str())
        );
        assert_eq!(pairs[0].business_ref.as_deref(), Some("order:D-1"));
        // The earlier key's page sees the pair too.
        assert_eq!(
            f.store.suspected_pairs_of(&key(&first)).await.unwrap(),
            pairs
        );

        // Other arguments on the same ref: not suspected. A retry of the same intent: not.
        let mut other = replanned(&first, 2);
        other.args["amount_p"] = json!(100);
        f.guard.run(&other, &f.client([])).await.unwrap();
        f.guard.run(&second, &f.client([])).await.unwrap();
        assert_eq!(
            f.store.open_suspected_pairs(None, 10).await.unwrap().len(),
            1
        );

        // Past the default 24 h window: not suspected.
        f.clock.advance(TimeDelta::hours(25));
        f.guard
            .run(&replanned(&first, 3), &f.client([]))
            .await
            .unwrap();
        assert_eq!(
            f.store.open_suspected_pairs(None, 10).await.unwrap().len(),
            1
        );
        // Without a business ref nothing is probed.
        let mut a = refund("D-2", 1, "1");
        a.business_ref = None;
        f.guard.run(&a, &f.client([])).await.unwrap();
        f.guard.run(&replanned(&a, 1), &f.client([])).await.unwrap();
        assert_eq!(
            f.store.open_suspected_pairs(None, 10).await.unwrap().len(),
            1
        );
    }
);

both_backends!(
    async fn a_review_is_recorded_once_in_the_attempt_log(db: TestDb) {
        let f = Fixture::new(&db);
        let first = refund("D-3", 4500, "1");
        let second = replanned(&first, 1);
        f.guard.run(&first, &f.client([])).await.unwrap();
        f.guard.run(&second, &f.client([])).await.unwrap();
        let k = key(&second);
        let mut review = DuplicateReview {
            other_key: key(&first),
            verdict: DuplicateVerdict::Intended,
            reason: " ".into(),
            actor: "sam".into(),
        };
        let e = f.guard.review_duplicate(&k, &review).await.unwrap_err();
        assert!(
            matches!(
                e,
                GuardError::Invalid {
                    field: "reason",
                    ..
                }
            ),
            "{e:?}"
        );
        // The wrong earlier key: refused, nothing written.
        review.reason = "two parcels, two refunds".into();
        let wrong = DuplicateReview {
            other_key: key(&refund("D-9", 1, "1")),
            ..review.clone()
        };
        let e = f.guard.review_duplicate(&k, &wrong).await.unwrap_err();
        assert!(matches!(e, GuardError::NotResolvable { .. }), "{e:?}");

        f.guard.review_duplicate(&k, &review).await.unwrap();
        let log = f.log(k.as_str()).await;
        assert_eq!(log.last().unwrap().0, AttemptKind::DuplicateReviewed);
        let row = f.store.attempts(&k).await.unwrap().pop().unwrap();
        assert_eq!(row.actor, "sam");
        assert_eq!(row.detail["verdict"], json!("intended"));
        assert_eq!(row.detail["reason"], json!("two parcels, two refunds"));
        let pair = f.store.suspected_pair(&k).await.unwrap().unwrap();
        assert_eq!(
            (pair.state.as_str(), pair.reviewed_by.as_deref()),
            ("intended", Some("sam"))
        );
        assert!(
            f.store
                .open_suspected_pairs(None, 10)
                .await
                .unwrap()
                .is_empty()
        );

        // A second review (someone else, at the same time): refused, the log unchanged.
        review.verdict = DuplicateVerdict::Confirmed;
        let e = f.guard.review_duplicate(&k, &review).await.unwrap_err();
        assert!(matches!(e, GuardError::NotResolvable { .. }), "{e:?}");
        assert_eq!(f.log(k.as_str()).await.len(), log.len());
    }
);

both_backends!(
    async fn the_tailer_counts_suspected_duplicates_per_tool(db: TestDb) {
        let f = Fixture::new(&db);
        let metrics = Arc::new(Metrics::default());
        let mut tailer = Tailer::new(
            metrics.clone(),
            TailSettings {
                batch_size: 5,
                busy_interval: Duration::from_millis(10),
                idle_interval: Duration::from_millis(100),
                max_backoff: Duration::from_millis(500),
            },
        );
        tailer.poll(&db.store).await.unwrap();
        let before = ids_now(&db.store).await;
        let first = refund("D-4", 4500, "1");
        for n in 0..3 {
            f.guard
                .run(&replanned(&first, n), &f.client([]))
                .await
                .unwrap();
        }
        // PostgreSQL may hold the tail back for a moment: read every row first.
        catch_up_all(&mut tailer, &db.store, &metrics, &before).await;
        let counted = metrics
            .families()
            .idempotency_suspected_duplicates_total
            .with_label_values(&["issue_refund"])
            .get();
        assert_eq!(counted, 2);
        let text = metrics.render().unwrap();
        assert!(
            text.contains("idempotency_suspected_duplicates_total{tool=\"issue_refund\"} 2"),
            "{text}"
        );
    }
);

both_backends!(
    async fn a_resolver_reviews_a_pair_on_its_page_and_both_keys_show_it(db: TestDb) {
        let f = Fixture::new(&db);
        let app = TestApp::builtin_on(&db, &f.clock).await;
        let first = refund("D-5", 4500, "1");
        let second = replanned(&first, 1);
        f.guard.run(&first, &f.client([])).await.unwrap();
        f.guard.run(&second, &f.client([])).await.unwrap();
        let (k1, k2) = (key(&first), key(&second));

        let other_tool = app
            .as_(Who::Session("vic"))
            .get("/duplicates?tool=send_sms")
            .await;
        assert!(
            other_tool.body.contains("No open suspected duplicates"),
            "{}",
            other_tool.body
        );
        let page = app
            .as_(Who::Session("vic"))
            .get("/duplicates?tool=issue_refund")
            .await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains(&format!("/keys/{k2}")), "{}", page.body);
        assert!(page.body.contains(&format!("/keys/{k1}")));
        assert!(page.body.contains("needs the resolver role"));
        // The state's name, then what it means, without saying the name twice.
        assert!(
            page.body
                .contains("<strong>open</strong>: same tenant, tool"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("Open: "));
        for k in [&k1, &k2] {
            let key_page = app.get(&format!("/keys/{k}")).await;
            assert!(key_page.body.contains("Suspected duplicate"), "{k}");
            assert!(key_page.body.contains(&format!("/duplicates/{k2}/review")));
        }

        let uri = format!("/duplicates/{k2}/review");
        let review = |verdict| {
            [
                ("other_key", k1.as_str()),
                ("verdict", verdict),
                ("reason", ""),
            ]
        };
        // A viewer may not; a form without the CSRF token is refused; a bad verdict is named.
        let r = app
            .as_(Who::Session("vic"))
            .post_form(&uri, &review("confirmed"))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r = app
            .post_form(
                &uri,
                &[
                    ("other_key", k1.as_str()),
                    ("verdict", "confirmed"),
                    ("reason", ""),
                    ("csrf_token", "forged"),
                ],
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r = app.post_form(&uri, &review("maybe")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.body.contains("verdict"), "{}", r.body);
        assert!(
            f.store
                .suspected_pair(&k2)
                .await
                .unwrap()
                .unwrap()
                .is_open()
        );

        let r = app.post_form(&uri, &review("confirmed")).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        assert_eq!(r.location(), format!("/keys/{k2}#duplicates"));
        let pair = f.store.suspected_pair(&k2).await.unwrap().unwrap();
        assert_eq!(pair.state, "confirmed");
        let row = f.store.attempts(&k2).await.unwrap().pop().unwrap();
        assert_eq!(
            (row.kind, row.actor.as_str()),
            (AttemptKind::DuplicateReviewed, "sam")
        );
        // The confirmed pair tells the resolver what to do at the provider.
        let key_page = app.get(&format!("/keys/{k2}")).await;
        assert!(
            key_page
                .body
                .contains("Undo the later effect at the provider"),
            "{}",
            key_page.body
        );
        let page = app.get("/duplicates").await;
        assert!(page.body.contains("No open suspected duplicates"));
        // Reviewing it again: refused (422), nothing written.
        let r = app.post_form(&uri, &review("confirmed")).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    }
);
