//! Bulk resolve: what it will do, which keys were refused, and a filter taken exactly and
//! capped.

use super::{attempts, kinds, token_of};
use crate::both_backends;
use crate::support::app::TestApp;
use axum::http::StatusCode;
use idemwatch::guard::AttemptKind;

both_backends!(
    async fn bulk_resolve_lists_what_it_will_do_and_which_keys_were_refused(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let unknown = format!("{}.1", s.unknown);
        let escalated_token = token_of(&db.store, &s.escalated).await;
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
            ];
            if confirm {
                f.push(("confirm", "yes"));
            }
            f
        };
        let review = app.post_form("/backlog/resolve", &selected(false)).await;
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

        let result = app.post_form("/backlog/resolve", &selected(true)).await;
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
        let (app, s) = TestApp::builtin(&db).await;
        let review = app
            .post_form(
                "/backlog/resolve",
                &[
                    ("scope", "filter"),
                    ("tool", "issue_refund"),
                    ("resolution", "failed"),
                    ("reason", "r"),
                ],
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

        let a = app
            .post_form(
                "/backlog/resolve",
                &[("scope", "filter"), ("resolution", "done"), ("reason", "r")],
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
        ]);
        let a = app.post_form("/backlog/resolve", &pairs).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(
            a.body
                .contains("1001 keys selected; a batch is at most 1000"),
            "{}",
            a.body
        );
        let a = app
            .post_form(
                "/backlog/resolve",
                &[
                    ("scope", "selected"),
                    ("resolution", "failed"),
                    ("reason", "r"),
                ],
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.body.contains("tick at least one key"));
    }
);

both_backends!(
    async fn the_bulk_form_counts_one_key_in_the_singular(db: TestDb) {
        let (app, _) = TestApp::builtin(&db).await;
        let page = app.get("/backlog?tool=send_message").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.body.contains("The 1 key matching this filter"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("All 1 keys"));
    }
);
