//! The HTML pages and the JSON view, driven through `web::app(state)` with `oneshot`
//! on both backends: each page, each filter, each error case.

use crate::both_backends;
use crate::support::app::{Page, get, linked_keys, next_link, setup};
use axum::http::{StatusCode, header};
use idemwatch::guard::rfc3339;
use std::collections::BTreeSet;
use std::sync::Arc;

fn card<'a>(body: &'a str, tool: &str) -> &'a str {
    body.split("<section class=\"card\"")
        .find(|c| c.contains(&format!(">{tool}</h2>")))
        .unwrap_or_else(|| panic!("no card for {tool}"))
}

fn assert_no_internals(p: &Page) {
    for leak in [
        "panicked",
        "backtrace",
        "sqlx",
        "relation ",
        "syntax error",
        "PoolClosed",
        "src/",
    ] {
        assert!(!p.body.contains(leak), "page shows {leak:?}: {}", p.body);
    }
}

both_backends!(
    async fn the_overview_counts_each_tool_from_the_database(db: TestDb) {
        let (app, _s) = setup(&db).await;
        let p = get(&app, "/").await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(
            p.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let refunds = card(&p.body, "issue_refund");
        // Last day: 8 requests (5 claims, 1 replay, 1 mismatch … see ui_seed), 1 replay.
        assert!(refunds.contains("<th scope=\"row\">Requests</th><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;from=now-1h\">2</a></td><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;from=now-1d\">8</a></td>"), "{refunds}");
        assert!(refunds.contains("<th scope=\"row\">Replay ratio</th><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;outcome=replay%2Creplay_failure&#38;from=now-1h\">0.0%</a></td><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;outcome=replay%2Creplay_failure&#38;from=now-1d\">12.5%</a></td>"), "{refunds}");
        // Each count links to the keys behind it.
        assert!(refunds.contains("<th scope=\"row\">Conflicts</th><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;outcome=conflict&#38;from=now-1h\">0</a></td><td class=\"num\"><a href=\"/keys?tool=issue_refund&#38;outcome=conflict&#38;from=now-1d\">1</a></td>"), "{refunds}");
        assert!(
            refunds
                .contains("<dt>UNKNOWN now</dt><dd><a href=\"/backlog?tool=issue_refund\">1</a>"),
            "{refunds}"
        );
        assert!(refunds.contains("<dt>Expired leases</dt><dd><a href=\"/keys?tool=issue_refund&#38;status=IN_PROGRESS\">1</a>"), "{refunds}");
        assert!(
            refunds.contains("12.5% overall (1 of 8 requests)"),
            "{refunds}"
        );
        let messages = card(&p.body, "send_message");
        assert!(messages.contains("<th scope=\"row\">Takeovers</th><td class=\"num\"><a href=\"/keys?tool=send_message&#38;outcome=takeover&#38;from=now-1h\">0</a></td><td class=\"num\"><a href=\"/keys?tool=send_message&#38;outcome=takeover&#38;from=now-1d\">1</a></td>"), "{messages}");
        assert!(messages.contains("<th scope=\"row\">Escalations</th><td class=\"num\"><a href=\"/keys?tool=send_message&#38;attempt_kind=escalated&#38;from=now-1h\">0</a></td><td class=\"num\"><a href=\"/keys?tool=send_message&#38;attempt_kind=escalated&#38;from=now-1d\">1</a></td>"), "{messages}");
        assert!(messages.contains("<dt>Past retention</dt><dd class=\"alert\"><a href=\"/backlog?tool=send_message\">1</a> · needs a person"), "{messages}");
        assert!(
            messages.contains("<svg viewBox=\"0 0 578 64\""),
            "one bar per 5 minutes of the day: {messages}"
        );
        // The totals across tools.
        assert!(p.body.contains("<span class=\"stat-label\">UNKNOWN now</span><span class=\"stat-value\"><a href=\"/backlog\">2</a></span>"), "{}", p.body);
    }
);

both_backends!(
    async fn each_filter_selects_its_keys(db: TestDb) {
        let (app, s) = setup(&db).await;
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
            let p = get(&app, &format!("/keys?{query}")).await;
            assert_eq!(p.status, StatusCode::OK, "{query}: {}", p.body);
            let got: BTreeSet<String> = linked_keys(&p.body).into_iter().collect();
            assert_eq!(got, want, "{query}");
        }
        let p = get(&app, "/keys?business_ref=A-88214").await;
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
        let p = get(&app, "/keys?tenant=acme").await;
        assert!(p.body.contains("Keys, newest activity first"), "{}", p.body);
        let p = get(&app, "/keys?business_ref=88214").await;
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
        let (app, s) = setup(&db).await;
        let mut uri = Some("/keys?limit=3".to_string());
        let mut seen = Vec::new();
        let mut pages = 0;
        while let Some(u) = uri {
            assert!(pages < 5, "too many pages: {u}");
            let p = get(&app, &u).await;
            assert_eq!(p.status, StatusCode::OK, "{u}");
            let keys = linked_keys(&p.body);
            assert!(keys.len() <= 3, "{u}");
            seen.extend(keys);
            uri = next_link(&p.body);
            pages += 1;
            if let Some(next) = &uri {
                assert!(
                    next.contains("limit=3") && next.contains("after="),
                    "{next}"
                );
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(seen, s.newest_first());
        // A filtered list pages within its filter.
        let p = get(&app, "/keys?tenant=acme&limit=5").await;
        let next = next_link(&p.body).expect("a second page");
        assert!(
            next.starts_with("/keys?tenant=acme&limit=5&after="),
            "{next}"
        );
        let p2 = get(&app, &next).await;
        assert_eq!(linked_keys(&p.body).len() + linked_keys(&p2.body).len(), 6);
        assert!(p2.body.contains("← Newest"));
    }
);

both_backends!(
    async fn the_key_page_tells_what_happened(db: TestDb) {
        let (app, s) = setup(&db).await;
        let p = get(&app, &format!("/keys/{}", s.replayed)).await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(p.body.contains("data-kind=\"replayed\""), "{}", p.body);
        assert!(
            p.body
                .contains("<span class=\"badge badge-replay\">Replay</span>")
        );
        assert!(p.body.contains(
            "Done: the effect happened once. One retry was answered from the stored result"
        ));
        assert!(
            p.body
                .contains("2 issue_refund calls on order:A-88214: this key and 1 other."),
            "{}",
            p.body
        );
        assert!(linked_keys(&p.body).contains(&s.second_refund));
        assert!(
            p.body
                .contains(" UTC (+00:00)</time> <span class=\"rel\">(")
        );
        assert!(
            !p.body.contains("id=\"resolve\""),
            "a DONE key needs no decision"
        );

        let p = get(&app, &format!("/keys/{}", s.mismatch)).await;
        assert!(
            p.body
                .contains("<span class=\"badge badge-mismatch\">Payload mismatch</span>")
        );
        assert!(p.body.contains("<tr class=\"change-changed\"><th scope=\"row\"><code>amount_p</code></th><td><code>4500</code></td><td><code>4000</code></td><td>changed</td></tr>"), "{}", p.body);

        let p = get(&app, &format!("/keys/{}", s.escalated)).await;
        assert!(
            p.body
                .contains("<span class=\"badge badge-takeover\">Takeover</span>")
        );
        assert!(p.body.contains("fencing token 1 → 2"), "{}", p.body);
        assert!(
            p.body
                .contains("<span class=\"badge badge-escalation\">Escalated to a person</span>")
        );
        assert!(p.body.contains("Needs a person"));
        assert!(
            !p.body.contains("RESOLVE"),
            "template comments stay out of the page"
        );
        assert!(
            p.body
                .contains("the provider forgot this key 1 h 30 min ago")
        );

        let p = get(&app, &format!("/keys/{}", s.unknown)).await;
        assert!(p.body.contains("Not decided yet") && p.body.contains("id=\"resolve\""));
        assert!(
            p.body
                .contains("the provider remembers this key for 23 h 19 min more"),
            "{}",
            p.body
        );

        let p = get(&app, &format!("/keys/{}", s.expired)).await;
        assert!(p.body.contains("IN_PROGRESS · lease expired"));

        let p = get(&app, &format!("/keys/{}", s.failed)).await;
        assert!(p.body.contains("402 card_declined"));

        // A prefix or an upper-case key leads to the key list / the key.
        let p = get(&app, &format!("/keys/{}", &s.failed[..10])).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER);
        assert_eq!(
            p.headers[header::LOCATION],
            format!("/keys?key={}", &s.failed[..10])
        );
        let p = get(&app, &format!("/keys/{}", s.failed.to_uppercase())).await;
        assert_eq!(p.headers[header::LOCATION], format!("/keys/{}", s.failed));
    }
);

both_backends!(
    async fn the_backlog_lists_undecided_keys_oldest_first(db: TestDb) {
        let (app, s) = setup(&db).await;
        let p = get(&app, "/backlog").await;
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

        let p = get(&app, "/backlog?tool=send_message").await;
        assert_eq!(linked_keys(&p.body), vec![s.escalated.clone()]);
        let p = get(&app, "/backlog?tool=issue_refund&limit=1").await;
        assert_eq!(linked_keys(&p.body), vec![s.unknown.clone()]);
        let p = get(&app, &next_link(&p.body).expect("a second page")).await;
        assert_eq!(linked_keys(&p.body), vec![s.expired.clone()]);
        assert!(next_link(&p.body).is_none());
    }
);

both_backends!(
    async fn bad_input_gets_a_page_that_names_the_field(db: TestDb) {
        let (app, _s) = setup(&db).await;
        let zeros = "0".repeat(64);
        let cases = [
            (format!("/keys/{zeros}"), 404, format!("No key {zeros} is recorded")),
            ("/keys?from=yesterday".into(), 400, "from: cannot read &#34;yesterday&#34; as a time; expected an RFC 3339 time".into()),
            ("/keys?to=now-1fortnight".into(), 400, "to: cannot read".into()),
            ("/keys?from=now&to=now-1h".into(), 400, "to: must be later than from".into()),
            ("/keys?status=finished".into(), 400, "status: &#34;finished&#34; is not a status; expected one of IN_PROGRESS, DONE, FAILED, UNKNOWN".into()),
            ("/keys?key=xyz".into(), 400, "key: expected 4 to 64 hexadecimal characters".into()),
            ("/keys?after=garbage".into(), 400, "after: expected a page position".into()),
            ("/keys?limit=0".into(), 400, "limit: expected a whole number from 1 to 200".into()),
            (format!("/keys?tenant={}", "x".repeat(600)), 400, "tenant: expected at most 512 bytes".into()),
            ("/keys/zz".into(), 400, "key: expected 4 to 64 hexadecimal characters".into()),
            ("/backlog?after=2026".into(), 400, "after: expected a page position".into()),
            ("/no/such/page".into(), 404, "There is no page at this address.".into()),
            ("/static/nope.css".into(), 404, "There is no static file".into()),
        ];
        for (uri, status, text) in cases {
            let p = get(&app, &uri).await;
            assert_eq!(p.status.as_u16(), status, "{uri}: {}", p.body);
            assert!(
                p.headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with("text/html"),
                "{uri}"
            );
            assert!(p.body.contains(&text), "{uri}: want {text:?} in {}", p.body);
            assert!(p.body.contains("<h1 id=\"error-h\">"), "{uri}");
            assert_no_internals(&p);
        }
        let json_cases = [
            (format!("/api/v1/keys/{zeros}"), 404, None),
            ("/api/v1/keys/xyz".to_string(), 400, Some("key")),
            ("/api/v1/no-such".to_string(), 404, None),
        ];
        for (uri, status, field) in json_cases {
            let p = get(&app, &uri).await;
            assert_eq!(p.status.as_u16(), status, "{uri}");
            assert_eq!(
                p.headers[header::CONTENT_TYPE],
                "application/problem+json",
                "{uri}"
            );
            let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
            assert_eq!(v["status"], status, "{uri}");
            assert_eq!(v["field"].as_str(), field, "{uri}");
        }
    }
);

both_backends!(
    async fn a_database_that_is_down_gets_a_503_page(db: TestDb) {
        let (app, s) = setup(&db).await;
        db.store.close().await;
        let uris = [
            "/".to_string(),
            "/keys".into(),
            "/keys?tool=issue_refund&from=now-1h".into(),
            format!("/keys/{}", s.replayed),
            "/backlog".into(),
            "/search?q=88214".into(),
        ];
        for uri in uris {
            let p = get(&app, &uri).await;
            assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
            assert!(p.body.contains("Database unavailable"), "{uri}: {}", p.body);
            assert!(p.body.contains("try again in a moment"));
            assert_eq!(p.headers[header::RETRY_AFTER], "5");
            assert_no_internals(&p);
        }
        let p = get(&app, &format!("/api/v1/keys/{}", s.replayed)).await;
        assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE);
        let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_eq!(v["title"], "Database unavailable");
        assert_eq!(v["code"], "unavailable");
    }
);

both_backends!(
    async fn the_api_returns_the_record_and_its_attempts(db: TestDb) {
        let (app, s) = setup(&db).await;
        let p = get(&app, &format!("/api/v1/keys/{}", s.replayed)).await;
        assert_eq!(p.status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_eq!(v["record"]["key"], s.replayed.as_str());
        assert_eq!(v["record"]["status"], "DONE");
        assert_eq!(v["record"]["business_ref"], "order:A-88214");
        let kinds: Vec<&str> = v["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["claimed", "completed", "replayed"]);
    }
);

both_backends!(
    async fn the_search_box_finds_orders_and_keys(db: TestDb) {
        let (app, s) = setup(&db).await;
        let cases = [
            (
                "A-88214".to_string(),
                "/keys?business_ref=A-88214".to_string(),
            ),
            (
                "order%3AA-88214".into(),
                "/keys?business_ref=order%3AA-88214".into(),
            ),
            (s.unknown.clone(), format!("/keys/{}", s.unknown)),
            (s.unknown.to_uppercase(), format!("/keys/{}", s.unknown)),
            (
                s.unknown[..8].to_string(),
                format!("/keys?key={}", &s.unknown[..8]),
            ),
            ("".into(), "/keys".into()),
        ];
        for (q, location) in cases {
            let p = get(&app, &format!("/search?q={q}")).await;
            assert_eq!(p.status, StatusCode::SEE_OTHER, "{q}");
            assert_eq!(p.headers[header::LOCATION], location.as_str(), "{q}");
        }
        let p = get(&app, "/keys?business_ref=A-88214").await;
        assert!(
            p.body.contains("value=\"A-88214\""),
            "the search box keeps the query"
        );
    }
);

both_backends!(
    async fn static_files_are_embedded_and_versioned(db: TestDb) {
        let (app, _s) = setup(&db).await;
        let page = get(&app, "/keys").await;
        let at = page.body.find("/static/app.css?v=").unwrap();
        let url = &page.body[at..at + "/static/app.css?v=".len() + 12];
        let p = get(&app, url).await;
        assert_eq!(p.status, StatusCode::OK);
        assert_eq!(p.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
        assert_eq!(
            p.headers[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert!(p.body.contains(":focus-visible"));
        let p = get(&app, "/static/app.css?v=old").await;
        assert_eq!(p.headers[header::CACHE_CONTROL], "no-cache");
        for page in ["/", "/keys", "/backlog"] {
            let p = get(&app, page).await;
            assert!(
                !p.body.contains(" style=")
                    && !p.body.contains("<style")
                    && !p.body.contains("onclick"),
                "{page}"
            );
            assert!(
                p.body.contains("<label for=\"q\">"),
                "{page}: the search box on every page"
            );
        }
    }
);

both_backends!(
    async fn the_overview_is_recounted_after_half_a_minute(db: TestDb) {
        let (app, s) = setup(&db).await;
        let requests = |body: &str| {
            let c = card(body, "send_message");
            c.contains("<a href=\"/keys?tool=send_message&#38;from=now-1h\">1</a>")
        };
        let p = get(&app, "/").await;
        assert!(!requests(&p.body));
        // One more message in the last hour.
        let guard = idemwatch::guard::Guard::new(
            db.store.clone(),
            Arc::new(s.clock.clone()),
            idemwatch::guard::GuardSettings::default(),
        );
        let ledger =
            crate::support::provider::Ledger::new(s.clock.clone(), chrono::TimeDelta::hours(1));
        let call = crate::ui_seed::call(
            "globex",
            "send_message",
            "run-msg",
            "9",
            "notify:refund-9",
            "ticket:T-9",
            serde_json::json!({ "to": "+44 7700 900123" }),
        );
        let client =
            crate::support::provider::Client::new(&ledger, crate::support::fixture::DEADLINE, []);
        guard.run(&call, &client).await.unwrap();
        let p = get(&app, "/").await;
        assert!(!requests(&p.body), "the same counts for 30 seconds");
        s.clock.advance(chrono::TimeDelta::seconds(31));
        let p = get(&app, "/").await;
        assert!(
            requests(&p.body),
            "recounted: {}",
            card(&p.body, "send_message")
        );
    }
);
