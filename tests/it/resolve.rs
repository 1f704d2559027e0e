//! The resolve workflow through `web::app` on both backends: the confirmation step,
//! the `resolved` attempt, conflicts, refusals, bulk resolve, the JSON API, and races
//! against another person and against a worker's takeover.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::auth::*;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::{Client, Fault};
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{Attempt, AttemptKind, GuardError, Status, ToolCall};
use idemwatch::store::Store;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

async fn setup(db: &TestDb) -> (Router, Seeded) {
    let s = seed(&db.store, Utc::now(), 0).await;
    (builtin_app(&db.store, Arc::new(s.clock.clone())).await, s)
}

/// A worker's retry of `call` that takes the key over and waits in its provider lookup
/// until the gate opens. Its deadline is long: the HTTP steps of a test may take more
/// than the fixture's scaled-down 100 ms on a busy machine.
async fn gated_retry(
    f: &Fixture,
    call: &ToolCall,
) -> (
    tokio::task::JoinHandle<Result<idemwatch::guard::Outcome, GuardError>>,
    Arc<tokio::sync::Notify>,
) {
    let worker = Client::new(&f.ledger, Duration::from_secs(30), [Fault::LookupGated]);
    let gate = worker.gate.clone();
    let (guard, c) = (f.guard.clone(), call.clone());
    let task = tokio::spawn(async move { guard.run(&c, &worker).await });
    let key = call.intent.key().unwrap();
    while f.status(key.as_str()).await != Status::InProgress {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (task, gate)
}

async fn attempts(store: &Store, key: &str) -> Vec<Attempt> {
    store.attempts(key).await.unwrap()
}

async fn kinds(store: &Store, key: &str) -> Vec<AttemptKind> {
    attempts(store, key).await.iter().map(|a| a.kind).collect()
}

/// The resolve form as a browser posts it: step 1 (review) or 2 (`confirm`).
fn resolve_form(resolution: &str, evidence: &str, token: i64, confirm: bool) -> String {
    let token = token.to_string();
    let csrf = csrf_token();
    let mut f = vec![
        ("resolution", resolution),
        ("reason", "checked the provider dashboard"),
        ("evidence", evidence),
        ("result", ""),
        ("expected_token", token.as_str()),
        ("csrf_token", csrf.as_str()),
    ];
    if confirm {
        f.push(("confirm", "yes"));
    }
    form(&f)
}

both_backends!(
    async fn a_resolver_confirms_then_the_timeline_shows_the_resolution(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let before = attempts(&db.store, &s.unknown).await;

        // Step 1: the confirmation page; nothing is written.
        let review = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("done", "rf_8XM1", 1, false)),
        )
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
        let done = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("done", "rf_8XM1", 1, true)),
        )
        .await;
        assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
        assert_eq!(done.location(), format!("/keys/{}#timeline-h", s.unknown));
        let record = db.store.record(&s.unknown).await.unwrap().unwrap();
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

        let page = call(
            &app,
            Method::GET,
            &format!("/keys/{}", s.unknown),
            Who::Session("vic"),
            None,
        )
        .await;
        assert!(page.body.contains("data-kind=\"resolved\""));
        assert!(page.body.contains("<dt>evidence</dt><dd>rf_8XM1</dd>"));
        assert!(
            !page.body.contains("id=\"resolve\""),
            "decided: no resolve section"
        );

        // A decided key cannot be resolved again: 422, and the try is logged.
        let again = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("root"),
            Some(resolve_form("failed", "", 2, true)),
        )
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
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        // Someone else resolves first (token 1 → 2).
        let first = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("root"),
            Some(resolve_form("failed", "", 1, true)),
        )
        .await;
        assert_eq!(first.status, StatusCode::SEE_OTHER);
        // Sam confirms what he saw at token 1.
        let late = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("done", "rf_8XM1", 1, true)),
        )
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
        let record = db.store.record(&s.unknown).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Failed, "not overwritten");
        let last = attempts(&db.store, &s.unknown).await.pop().unwrap();
        assert_eq!(
            (last.kind, last.actor.as_str()),
            (AttemptKind::StaleWriteRejected, "sam")
        );
        // The review step of a stale view is refused too, and writes nothing.
        let n = attempts(&db.store, &s.unknown).await.len();
        let review = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("done", "rf_8XM1", 1, false)),
        )
        .await;
        assert_eq!(review.status, StatusCode::CONFLICT);
        assert!(!review.body.contains("The refused try is in"));
        assert_eq!(attempts(&db.store, &s.unknown).await.len(), n);
    }
);

both_backends!(
    async fn release_is_refused_once_the_provider_forgot_the_key(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.escalated);
        let token = db
            .store
            .record(&s.escalated)
            .await
            .unwrap()
            .unwrap()
            .fencing_token
            .0;
        for confirm in [false, true] {
            let a = call(
                &app,
                Method::POST,
                &uri,
                Who::Session("sam"),
                Some(resolve_form("release", "", token, confirm)),
            )
            .await;
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
        let record = db.store.record(&s.escalated).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.release_approved),
            (Status::Unknown, false)
        );
        // Inside the retention, release is what it says: UNKNOWN, approved for resend.
        let uri = format!("/keys/{}/resolve", s.unknown);
        let a = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("release", "", 1, true)),
        )
        .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        let record = db.store.record(&s.unknown).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.release_approved),
            (Status::Unknown, true)
        );
    }
);

both_backends!(
    async fn bad_input_names_the_field_and_keeps_what_was_typed(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let before = attempts(&db.store, &s.unknown).await.len();
        let a = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("done", "", 1, false)),
        )
        .await;
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
        let bad_json = form(&[
            ("resolution", "done"),
            ("reason", "r"),
            ("evidence", "rf_1"),
            ("result", "{\"id\": "),
            ("expected_token", "1"),
            ("csrf_token", &csrf_token()),
        ]);
        let a = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(bad_json),
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
        let xss = form(&[
            ("resolution", "failed"),
            ("reason", "<script>alert(1)</script>"),
            ("expected_token", "1"),
            ("csrf_token", &csrf_token()),
        ]);
        let a = call(&app, Method::POST, &uri, Who::Session("sam"), Some(xss)).await;
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
        let (task, gate) = {
            f.guard
                .run(&call_, &f.client([Fault::Unavailable]))
                .await
                .unwrap_err();
            gated_retry(&f, &call_).await
        };
        let app = builtin_app(&db.store, Arc::new(f.clock.clone())).await;
        let uri = format!("/keys/{key}/resolve");
        let a = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 2, true)),
        )
        .await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
        assert!(a.body.contains("A worker holds this key"), "{}", a.body);
        assert!(a.body.contains("is in flight until"), "{}", a.body);
        gate.notify_one();
        task.await.unwrap().unwrap();
    }
);

both_backends!(
    async fn bulk_resolve_lists_what_it_will_do_and_which_keys_were_refused(db: TestDb) {
        let (app, s) = setup(&db).await;
        let csrf = csrf_token();
        let unknown = format!("{}.1", s.unknown);
        let escalated_token = db
            .store
            .record(&s.escalated)
            .await
            .unwrap()
            .unwrap()
            .fencing_token;
        let escalated = format!("{}.{escalated_token}", s.escalated);
        let expired = format!("{}.1", s.expired);
        let selected = |confirm: bool| {
            let mut f = vec![
                ("scope", "selected"),
                ("tool", ""),
                ("key", unknown.as_str()),
                ("key", escalated.as_str()),
                ("key", expired.as_str()),
                ("resolution", "release"),
                (
                    "reason",
                    "provider outage 14:00-14:20: nothing was executed",
                ),
                ("csrf_token", csrf.as_str()),
            ];
            if confirm {
                f.push(("confirm", "yes"));
            }
            form(&f)
        };
        let review = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(selected(false)),
        )
        .await;
        assert_eq!(review.status, StatusCode::OK, "{}", review.body);
        assert!(
            review
                .body
                .contains("<h1>Confirm: Release for resend for 3 keys</h1>"),
            "{}",
            review.body
        );
        assert!(review.body.contains("the 3 keys you selected"));
        for item in [&unknown, &escalated, &expired] {
            assert!(
                review
                    .body
                    .contains(&format!("name=\"key\" value=\"{item}\"")),
                "{item}"
            );
        }
        assert_eq!(
            kinds(&db.store, &s.unknown).await.len(),
            2,
            "nothing written yet"
        );

        let result = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(selected(true)),
        )
        .await;
        assert_eq!(result.status, StatusCode::OK, "{}", result.body);
        assert!(
            result
                .body
                .contains("Release for resend: 2 resolved, 1 refused"),
            "{}",
            result.body
        );
        assert!(
            result.body.contains("<tr class=\"refused\">"),
            "{}",
            result.body
        );
        assert!(result.body.contains("Not resolvable"), "{}", result.body);
        assert!(
            result.body.contains("a resend is no longer safe since"),
            "{}",
            result.body
        );
        for (key, want) in [
            (&s.unknown, AttemptKind::Resolved),
            (&s.expired, AttemptKind::Resolved),
            (&s.escalated, AttemptKind::StaleWriteRejected),
        ] {
            let last = attempts(&db.store, key).await.pop().unwrap();
            assert_eq!((last.kind, last.actor.as_str()), (want, "sam"), "{key}");
            assert_eq!(
                last.detail["reason"],
                "provider outage 14:00-14:20: nothing was executed"
            );
        }
    }
);

both_backends!(
    async fn bulk_resolve_of_a_filter_takes_exactly_that_filter_and_is_capped(db: TestDb) {
        let (app, s) = setup(&db).await;
        let csrf = csrf_token();
        let by_filter = form(&[
            ("scope", "filter"),
            ("tool", "issue_refund"),
            ("resolution", "failed"),
            ("reason", "r"),
            ("csrf_token", &csrf),
        ]);
        let review = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(by_filter),
        )
        .await;
        assert_eq!(review.status, StatusCode::OK, "{}", review.body);
        assert!(
            review
                .body
                .contains("all 2 backlog keys of tool issue_refund"),
            "{}",
            review.body
        );
        assert!(review.body.contains(&format!("value=\"{}.1\"", s.unknown)));
        assert!(review.body.contains(&format!("value=\"{}.1\"", s.expired)));
        assert!(
            !review.body.contains(&s.escalated),
            "another tool's key is never included"
        );

        let done = form(&[
            ("scope", "filter"),
            ("resolution", "done"),
            ("reason", "r"),
            ("csrf_token", &csrf),
        ]);
        let a = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(done),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.body.contains("each key&#39;s own evidence"), "{}", a.body);

        let many: Vec<String> = (0..1001).map(|i| format!("{i:064x}.1")).collect();
        let mut pairs: Vec<(&str, &str)> = many.iter().map(|k| ("key", k.as_str())).collect();
        pairs.extend([
            ("scope", "selected"),
            ("resolution", "failed"),
            ("reason", "r"),
            ("csrf_token", csrf.as_str()),
        ]);
        let a = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(form(&pairs)),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(
            a.body
                .contains("1001 keys selected; a batch is at most 1000"),
            "{}",
            a.body
        );
        let none = form(&[
            ("scope", "selected"),
            ("resolution", "failed"),
            ("reason", "r"),
            ("csrf_token", &csrf),
        ]);
        let a = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(none),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.body.contains("tick at least one key"));
    }
);

both_backends!(
    async fn the_json_api_resolves_with_statuses_that_mean_what_they_say(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
        let post = |who, body: &str| call(&app, Method::POST, &uri, who, Some(body.to_string()));
        let error = |body: &str| -> Value { serde_json::from_str(body).unwrap() };

        let a = post(Who::Token("sam"), "{\"resolution\": ").await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(error(&a.body)["field"], "body");
        let a = post(Who::Token("sam"), r#"{"resolution":"refund","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(error(&a.body)["field"], "resolution");
        let a = post(Who::Token("sam"), r#"{"resolution":"done","reason":"r"}"#).await;
        assert_eq!(
            (a.status, error(&a.body)["field"].clone()),
            (StatusCode::BAD_REQUEST, json!("evidence"))
        );
        let a = post(Who::Anonymous, r#"{"resolution":"failed","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        let a = post(Who::Token("vic"), r#"{"resolution":"failed","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
        assert!(
            error(&a.body)["detail"]
                .as_str()
                .unwrap()
                .contains("resolver role")
        );
        let a = call(
            &app,
            Method::POST,
            &format!("/api/v1/keys/{}/resolve", "0".repeat(64)),
            Who::Token("sam"),
            Some(r#"{"resolution":"failed","reason":"r"}"#.into()),
        )
        .await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        let a = post(
            Who::Token("sam"),
            r#"{"resolution":"failed","reason":"r","expected_token":7}"#,
        )
        .await;
        assert_eq!(a.status, StatusCode::CONFLICT);
        assert!(
            error(&a.body)["detail"]
                .as_str()
                .unwrap()
                .contains("changed since you looked")
        );
        assert_eq!(
            kinds(&db.store, &s.unknown).await,
            [
                AttemptKind::Claimed,
                AttemptKind::MarkedUnknown,
                AttemptKind::StaleWriteRejected
            ]
        );

        let body = r#"{"resolution":"done","reason":"found at provider","evidence":"rf_8XM1","result":{"refund_id":"rf_8XM1","amount_p":2500},"expected_token":1}"#;
        let a = post(Who::Token("sam"), body).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let v: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["record"]["status"], "DONE");
        assert_eq!(
            v["record"]["result"],
            json!({"refund_id":"rf_8XM1","amount_p":2500})
        );
        let last = v["attempts"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (last["kind"].as_str(), last["actor"].as_str()),
            (Some("resolved"), Some("token:sam-script"))
        );
        let a = post(
            Who::Token("root"),
            r#"{"resolution":"failed","reason":"r"}"#,
        )
        .await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
        // A session may use the API too, with the CSRF header (the helper adds it).
        let a = call(
            &app,
            Method::POST,
            &format!("/api/v1/keys/{}/resolve", s.expired),
            Who::Session("sam"),
            Some(r#"{"resolution":"failed","reason":"worker died before the call"}"#.into()),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    }
);

both_backends!(
    async fn two_resolvers_at_once_one_wins_and_the_log_shows_both(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let (a, b) = tokio::join!(
            call(
                &app,
                Method::POST,
                &uri,
                Who::Session("sam"),
                Some(resolve_form("done", "rf_8XM1", 1, true))
            ),
            call(
                &app,
                Method::POST,
                &uri,
                Who::Session("root"),
                Some(resolve_form("failed", "", 1, true))
            ),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::SEE_OTHER, StatusCode::CONFLICT],
            "{}\n{}",
            a.body,
            b.body
        );
        let log = attempts(&db.store, &s.unknown).await;
        let tail: Vec<_> = log[2..]
            .iter()
            .map(|a| (a.kind, a.fencing_token.0))
            .collect();
        assert_eq!(
            tail,
            [
                (AttemptKind::Resolved, 2),
                (AttemptKind::StaleWriteRejected, 1)
            ]
        );
        let winner = if a.status == StatusCode::SEE_OTHER {
            "sam"
        } else {
            "root"
        };
        let loser = if winner == "sam" { "root" } else { "sam" };
        assert_eq!(
            (log[2].actor.as_str(), log[3].actor.as_str()),
            (winner, loser)
        );
        let record = db.store.record(&s.unknown).await.unwrap().unwrap();
        let want = if winner == "sam" {
            Status::Done
        } else {
            Status::Failed
        };
        assert_eq!((record.status, record.fencing_token.0), (want, 2));
    }
);

both_backends!(
    async fn a_resolver_racing_a_workers_reconcile_loses_cleanly(db: TestDb) {
        let f = Fixture::new(&db);
        let app = builtin_app(&db.store, Arc::new(f.clock.clone())).await;
        let call_ = refund("A-31", 4500, "1");
        let key = call_.intent.key().unwrap();
        // The provider performed the refund; the answer was lost: UNKNOWN at token 1.
        f.guard
            .run(&call_, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        let uri = format!("/keys/{key}/resolve");
        // The person reviews at token 1 …
        let review = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 1, false)),
        )
        .await;
        assert_eq!(review.status, StatusCode::OK);
        // … a retry takes the key over (token 2) and is asking the provider …
        let (task, gate) = gated_retry(&f, &call_).await;
        // … and the person confirms what they saw.
        let confirm = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 1, true)),
        )
        .await;
        assert_eq!(confirm.status, StatusCode::CONFLICT, "{}", confirm.body);
        assert!(
            confirm.body.contains("A worker holds this key"),
            "{}",
            confirm.body
        );
        gate.notify_one();
        assert!(
            task.await.unwrap().unwrap().replayed,
            "the worker found the refund"
        );
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        use AttemptKind::*;
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (StaleWriteRejected, 1),
                (ReconciledFound, 2)
            ]
        );
        assert_eq!(f.status(key.as_str()).await, Status::Done);
    }
);

both_backends!(
    async fn a_resolver_wins_against_a_worker_whose_lease_ran_out(db: TestDb) {
        let f = Fixture::new(&db);
        let app = builtin_app(&db.store, Arc::new(f.clock.clone())).await;
        let call_ = refund("A-32", 4500, "1");
        let key = call_.intent.key().unwrap();
        f.guard
            .run(&call_, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        // A retry hangs in its provider lookup past its lease.
        let (task, gate) = gated_retry(&f, &call_).await;
        f.clock.advance(TimeDelta::minutes(5));
        let uri = format!("/keys/{key}/resolve");
        let page = call(
            &app,
            Method::GET,
            &format!("/keys/{key}"),
            Who::Session("sam"),
            None,
        )
        .await;
        assert!(
            page.body.contains("name=\"expected_token\" value=\"2\""),
            "the form carries the token seen"
        );
        let confirm = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 2, true)),
        )
        .await;
        assert_eq!(confirm.status, StatusCode::SEE_OTHER, "{}", confirm.body);
        gate.notify_one();
        let late = task.await.unwrap().unwrap_err();
        assert!(matches!(late, GuardError::LeaseLost { .. }), "{late:?}");
        use AttemptKind::*;
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (Resolved, 3),
                (StaleWriteRejected, 2)
            ]
        );
        assert_eq!(f.status(key.as_str()).await, Status::Failed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
    }
);
