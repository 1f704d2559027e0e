//! The key list: each filter, paging newest first without gaps, the backlog, the search
//! box.

use crate::both_backends;
use crate::support::app::{TestApp, linked_keys, next_link};
use axum::http::{StatusCode, header};
use idemwatch::guard::rfc3339;
use std::collections::BTreeSet;

both_backends!(
    async fn each_filter_selects_its_keys(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let mid = rfc3339(s.mid);
        let mid_ms = s.mid.timestamp_millis().to_string();
        let set = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let cases: Vec<(String, BTreeSet<String>)> = vec![
            (
                "business_ref=order:A-88214".into(),
                set(&[&s.replayed, &s.second_refund]),
            ),
            (
                "business_ref=A-88214".into(),
                set(&[&s.replayed, &s.second_refund]),
            ),
            (format!("key={}", &s.replayed[..8]), set(&[&s.replayed])),
            (
                format!("key={}", s.mismatch.to_uppercase()),
                set(&[&s.mismatch]),
            ),
            ("intent_id=refund:order-A-1001".into(), set(&[&s.mismatch])),
            (
                "workflow_id=run-msg".into(),
                set(&[&s.escalated, &s.message]),
            ),
            ("tenant=globex".into(), set(&[&s.escalated, &s.message])),
            ("tool=send_message".into(), set(&[&s.escalated, &s.message])),
            ("status=UNKNOWN".into(), set(&[&s.unknown, &s.escalated])),
            (
                "status=unknown&tool=issue_refund".into(),
                set(&[&s.unknown]),
            ),
            ("status=IN_PROGRESS".into(), set(&[&s.expired])),
            ("status=FAILED".into(), set(&[&s.failed])),
            (
                "status=DONE&tenant=acme".into(),
                set(&[&s.replayed, &s.second_refund, &s.mismatch]),
            ),
            (
                format!("from={mid}"),
                set(&[&s.expired, &s.unknown, &s.message, &s.escalated]),
            ),
            (
                format!("to={mid}"),
                set(&[&s.failed, &s.mismatch, &s.second_refund, &s.replayed]),
            ),
            (
                format!("tool=issue_refund&from={mid}&to=now"),
                set(&[&s.unknown, &s.expired]),
            ),
            (
                "tool=issue_refund&from=now-1h".into(),
                set(&[&s.unknown, &s.expired]),
            ),
            (
                format!("tool=send_message&from={mid_ms}"),
                set(&[&s.escalated, &s.message]),
            ),
            ("business_ref=order:A-88214&key=ffff".into(), set(&[])),
            ("tool=no_such_tool".into(), set(&[])),
        ];
        for (query, want) in cases {
            let p = app.get(&format!("/keys?{query}")).await;
            assert_eq!(p.status, StatusCode::OK, "{query}: {}", p.body);
            let got: BTreeSet<String> = linked_keys(&p.body).into_iter().collect();
            assert_eq!(got, want, "{query}");
        }
        let p = app.get("/keys?business_ref=A-88214").await;
        assert!(
            p.body.contains("2 keys, newest activity first"),
            "{}",
            p.body
        );
        assert!(
            p.body
                .contains("aria-label=\"Remove the Business ref filter\"")
        );
        // A tenant filter off the driving index: no count rather than a scan.
        let p = app.get("/keys?tenant=acme").await;
        assert!(p.body.contains("Keys, newest activity first"), "{}", p.body);
        let p = app.get("/keys?business_ref=88214").await;
        assert!(
            p.body
                .contains("Did you mean <a href=\"/keys?key=88214\">keys starting with 88214</a>?"),
            "{}",
            p.body
        );
    }
);

both_backends!(
    async fn pages_follow_each_other_newest_first_without_gaps(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let pages = app
            .keys_page_by_page("/keys?limit=3", "/keys?limit=3&after=", 5)
            .await;
        assert_eq!(pages.len(), 3);
        assert!(pages.iter().all(|keys| keys.len() <= 3), "{pages:?}");
        let seen = pages.concat();
        assert_eq!(seen, s.newest_first());
        // A filtered list pages within its filter.
        let p = app.get("/keys?tenant=acme&limit=5").await;
        let next = next_link(&p.body).expect("a second page");
        assert!(
            next.starts_with("/keys?tenant=acme&limit=5&after="),
            "{next}"
        );
        let p2 = app.get(&next).await;
        assert_eq!(linked_keys(&p.body).len() + linked_keys(&p2.body).len(), 6);
        assert!(p2.body.contains("← Newest"));
    }
);

both_backends!(
    async fn the_backlog_lists_undecided_keys_oldest_first(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let p = app.get("/backlog").await;
        assert_eq!(p.status, StatusCode::OK);
        assert_eq!(
            linked_keys(&p.body),
            [s.escalated.clone(), s.unknown.clone(), s.expired.clone()]
        );
        let row = p
            .body
            .split("<tr")
            .find(|r| r.contains(&s.escalated))
            .unwrap();
        assert!(row.starts_with(" class=\"past-retention\""), "{row}");
        assert!(
            row.contains("Past retention</span> forgotten 1 h 30 min ago"),
            "{row}"
        );
        let row = p
            .body
            .split("<tr")
            .find(|r| r.contains(&s.unknown))
            .unwrap();
        assert!(
            row.contains("23 h 19 min left") && row.contains("UNKNOWN"),
            "{row}"
        );
        assert!(p.body.contains("<span class=\"stat-label\">UNKNOWN past retention</span><span class=\"stat-value\">1</span>"));
        assert!(
            p.body.contains("id=\"resolve\""),
            "the place for the resolve action"
        );

        let p = app.get("/backlog?tool=send_message").await;
        assert_eq!(linked_keys(&p.body), vec![s.escalated.clone()]);
        let p = app.get("/backlog?tool=issue_refund&limit=1").await;
        assert_eq!(linked_keys(&p.body), vec![s.unknown.clone()]);
        let p = app.get(&next_link(&p.body).expect("a second page")).await;
        assert_eq!(linked_keys(&p.body), vec![s.expired.clone()]);
        assert!(next_link(&p.body).is_none());
    }
);

both_backends!(
    async fn the_search_box_finds_orders_and_keys(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let cases = [
            // Two keys on the order: their list (tests/it/pages/search.rs: every id).
            ("A-88214".to_string(), "/keys?q=A-88214".to_string()),
            ("order%3AA-88214".into(), "/keys?q=order%3AA-88214".into()),
            (s.unknown.clone(), format!("/keys/{}", s.unknown)),
            (s.unknown.to_uppercase(), format!("/keys/{}", s.unknown)),
            (
                s.unknown[..8].to_string(),
                format!("/keys?key={}", &s.unknown[..8]),
            ),
            ("".into(), "/keys".into()),
        ];
        for (q, location) in cases {
            let p = app.get(&format!("/search?q={q}")).await;
            assert_eq!(p.status, StatusCode::SEE_OTHER, "{q}");
            assert_eq!(p.headers[header::LOCATION], location.as_str(), "{q}");
        }
        let p = app.get("/keys?business_ref=A-88214").await;
        assert!(
            p.body.contains("value=\"A-88214\""),
            "the search box keeps the query"
        );
    }
);
