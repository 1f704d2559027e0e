//! Resolving one key through the form: the confirmation step, the `resolved` attempt on the
//! timeline, a moved token, a release the provider's retention forbids, bad input, and a
//! key a worker holds.

use super::{attempts, kinds, token_of};
use crate::both_backends;
use crate::support::app::{Step, TestApp};
use crate::support::as_key;
use crate::support::auth::*;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use axum::http::StatusCode;
use idemwatch::guard::{AttemptKind, Status};
use serde_json::json;

both_backends!(
    async fn a_resolver_confirms_then_the_timeline_shows_the_resolution(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let before = attempts(&db.store, &s.unknown).await;

        // Step 1: the confirmation page; nothing is written.
        let review = app
            .resolve(&s.unknown, "done", "rf_8XM1", 1, Step::Review)
            .await;
        assert_eq!(review.status, StatusCode::OK, "{}", review.body);
        for needle in [
            "<h1>Confirm: Mark DONE</h1>",
            "Nothing has been written yet.",
            &format!("<code class=\"wrap\">{}</code>", s.unknown),
            "<span class=\"badge badge-unknown\">UNKNOWN</span>",
            "<div><dt>Fencing token</dt><dd>1</dd></div>",
            "the provider remembers this key for",
            "<tr><th scope=\"row\"><code>status</code></th><td><code>UNKNOWN</code></td><td><code>DONE</code></td></tr>",
            "<tr><th scope=\"row\"><code>fencing_token</code></th><td><code>1</code></td><td><code>2</code></td></tr>",
            "<dt>evidence</dt><dd>rf_8XM1</dd>",
            "appended by <strong>sam</strong>",
            "name=\"expected_token\" value=\"1\"",
            "name=\"confirm\" value=\"yes\"",
        ] {
            assert!(
                review.body.contains(needle),
                "{needle:?} not in\n{}",
                review.body
            );
        }
        assert_eq!(attempts(&db.store, &s.unknown).await, before);
        for inline in [" style=", "<style", "<script>", " onclick", " onsubmit"] {
            assert!(
                !review.body.contains(inline),
                "no inline script or style: {inline}"
            );
        }

        // Step 2: recorded through the guard, then back to the key.
        let done = app
            .resolve(&s.unknown, "done", "rf_8XM1", 1, Step::Confirm)
            .await;
        assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
        assert_eq!(done.location(), format!("/keys/{}#timeline-h", s.unknown));
        let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
        assert_eq!((record.status, record.fencing_token.0), (Status::Done, 2));
        assert_eq!(
            record.result,
            Some(json!({"resolved_manually": true, "evidence": "rf_8XM1"}))
        );
        let last = attempts(&db.store, &s.unknown).await.pop().unwrap();
        assert_eq!(
            (last.kind, last.actor.as_str(), last.fencing_token.0),
            (AttemptKind::Resolved, "sam", 2)
        );
        assert_eq!(last.detail["reason"], "checked the provider dashboard");
        assert_eq!(last.detail["evidence"], "rf_8XM1");
        assert_eq!(last.detail["resolution"], "done");
        assert_eq!(last.detail["previous_status"], "UNKNOWN");

        let page = app
            .as_(Who::Session("vic"))
            .get(&format!("/keys/{}", s.unknown))
            .await;
        assert!(page.body.contains("data-kind=\"resolved\""));
        assert!(page.body.contains("<dt>evidence</dt><dd>rf_8XM1</dd>"));
        assert!(
            !page.body.contains("id=\"resolve\""),
            "decided: no resolve section"
        );

        // A decided key cannot be resolved again: 422, and the try is logged.
        let again = app
            .as_(Who::Session("root"))
            .resolve(&s.unknown, "failed", "", 2, Step::Confirm)
            .await;
        assert_eq!(
            again.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            again.body
        );
        assert!(again.body.contains("already DONE"), "{}", again.body);
        assert_eq!(
            kinds(&db.store, &s.unknown).await.last(),
            Some(&AttemptKind::StaleWriteRejected)
        );
    }
);

both_backends!(
    async fn a_moved_token_shows_a_conflict_page_with_the_key_now(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        // Someone else resolves first (token 1 → 2).
        let first = app
            .as_(Who::Session("root"))
            .resolve(&s.unknown, "failed", "", 1, Step::Confirm)
            .await;
        assert_eq!(first.status, StatusCode::SEE_OTHER);
        // Sam confirms what he saw at token 1.
        let late = app
            .resolve(&s.unknown, "done", "rf_8XM1", 1, Step::Confirm)
            .await;
        assert_eq!(late.status, StatusCode::CONFLICT);
        for needle in [
            "<h1 id=\"error-h\">Someone else acted first</h1>",
            "it is now FAILED with fencing token 2",
            "<span class=\"badge badge-fail\">FAILED</span>",
            "Nothing was overwritten. The refused try is in the key's attempt log.",
        ] {
            assert!(
                late.body.contains(needle),
                "{needle:?} not in\n{}",
                late.body
            );
        }
        let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Failed, "not overwritten");
        let last = attempts(&db.store, &s.unknown).await.pop().unwrap();
        assert_eq!(
            (last.kind, last.actor.as_str()),
            (AttemptKind::StaleWriteRejected, "sam")
        );
        // The review step of a stale view is refused too, and writes nothing.
        let n = attempts(&db.store, &s.unknown).await.len();
        let review = app
            .resolve(&s.unknown, "done", "rf_8XM1", 1, Step::Review)
            .await;
        assert_eq!(review.status, StatusCode::CONFLICT);
        assert!(!review.body.contains("The refused try is in"));
        assert_eq!(attempts(&db.store, &s.unknown).await.len(), n);
    }
);

both_backends!(
    async fn release_is_refused_once_the_provider_forgot_the_key(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let token = token_of(&db.store, &s.escalated).await;
        for step in [Step::Review, Step::Confirm] {
            let a = app.resolve(&s.escalated, "release", "", token, step).await;
            assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
            assert!(
                a.body.contains("a resend is no longer safe since"),
                "{}",
                a.body
            );
            assert!(
                a.body.contains("mark the key done or failed instead"),
                "{}",
                a.body
            );
        }
        let record = db
            .store
            .record(&as_key(&s.escalated))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (record.status, record.release_approved),
            (Status::Unknown, false)
        );
        // Inside the retention, release is what it says: UNKNOWN, approved for resend.
        let a = app
            .resolve(&s.unknown, "release", "", 1, Step::Confirm)
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.release_approved),
            (Status::Unknown, true)
        );
    }
);

both_backends!(
    async fn bad_input_names_the_field_and_keeps_what_was_typed(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let before = attempts(&db.store, &s.unknown).await.len();
        let a = app.resolve(&s.unknown, "done", "", 1, Step::Review).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(
            a.body
                .contains("Correct <strong>evidence</strong>: marking a key done needs evidence"),
            "{}",
            a.body
        );
        assert!(
            a.body
                .contains(">checked the provider dashboard</textarea>"),
            "the reason is kept"
        );
        assert!(
            a.body.contains("value=\"done\" checked"),
            "the choice is kept"
        );
        assert!(a.body.contains("id=\"resolve-evidence\" name=\"evidence\" type=\"text\" value=\"\" maxlength=\"500\" spellcheck=\"false\" autocomplete=\"off\" aria-invalid=\"true\""));
        let a = app
            .post_form(
                &uri,
                &[
                    ("resolution", "done"),
                    ("reason", "r"),
                    ("evidence", "rf_1"),
                    ("result", "{\"id\": "),
                    ("expected_token", "1"),
                ],
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(
            a.body
                .contains("Correct <strong>result</strong>: is not valid JSON"),
            "{}",
            a.body
        );
        // User text is escaped wherever it is shown.
        let a = app
            .post_form(
                &uri,
                &[
                    ("resolution", "failed"),
                    ("reason", "<script>alert(1)</script>"),
                    ("expected_token", "1"),
                ],
            )
            .await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(!a.body.contains("<script>alert"), "{}", a.body);
        assert!(
            a.body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{}",
            a.body
        );
        assert_eq!(attempts(&db.store, &s.unknown).await.len(), before);
    }
);

both_backends!(
    async fn a_key_a_worker_holds_is_refused_with_409(db: TestDb) {
        let f = Fixture::new(&db);
        let call_ = refund("A-77", 4500, "1");
        let key = call_.intent.key().unwrap();
        // A worker has claimed the key and holds the lease.
        let retry = {
            f.guard
                .run(&call_, &f.client([Fault::Unavailable]))
                .await
                .unwrap_err();
            f.retry_with_gated_lookup(&call_).await
        };
        let app = TestApp::builtin_on(&db, &f.clock).await;
        let a = app
            .resolve(key.as_str(), "failed", "", 2, Step::Confirm)
            .await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
        assert!(a.body.contains("A worker holds this key"), "{}", a.body);
        assert!(a.body.contains("is in flight until"), "{}", a.body);
        retry.finish().await.unwrap();
    }
);
