//! One key: the key page and the JSON view of its record and attempts.

use crate::both_backends;
use crate::support::app::{TestApp, linked_keys};
use axum::http::{StatusCode, header};

both_backends!(
    async fn the_key_page_tells_what_happened(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let p = app.get(&format!("/keys/{}", s.replayed)).await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(p.body.contains("data-kind=\"replayed\""), "{}", p.body);
        assert!(
            p.body
                .contains("<span class=\"badge badge-replay\">Retry answered</span>")
        );
        // Plain words first; the engineer's terms one click away.
        assert!(p.body.contains(
            "The agent&#39;s retry was answered from the first call&#39;s result: nothing was sent twice."
        ), "{}", p.body);
        assert!(
            p.body
                .contains("<details class=\"engineering\"><summary>Engineering detail</summary>")
        );
        assert!(
            p.body
                .contains("A retry got the stored result; the provider was not called again.")
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

        let p = app.get(&format!("/keys/{}", s.mismatch)).await;
        assert!(
            p.body
                .contains("<span class=\"badge badge-mismatch\">Changed retry refused</span>")
        );
        assert!(p.body.contains("<tr class=\"change-changed\"><th scope=\"row\"><code>amount_p</code></th><td><code>4500</code></td><td><code>4000</code></td><td>changed</td></tr>"), "{}", p.body);

        let p = app.get(&format!("/keys/{}", s.escalated)).await;
        assert!(
            p.body
                .contains("<span class=\"badge badge-takeover\">Checking the provider</span>")
        );
        assert!(p.body.contains("fencing token 1 → 2"), "{}", p.body);
        assert!(
            p.body
                .contains("<span class=\"badge badge-escalation\">Needs a person</span>")
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

        // A DONE key the provider has since forgotten: no news, no alarm.
        let p = app.get(&format!("/keys/{}", s.message)).await;
        assert!(
            p.body
                .contains("no longer matters: the outcome is recorded"),
            "{}",
            p.body
        );
        assert!(!p.body.contains("class=\"alert\""), "{}", p.body);
        assert!(!p.body.contains("the provider forgot this key"));

        let p = app.get(&format!("/keys/{}", s.unknown)).await;
        assert!(p.body.contains("Not decided yet") && p.body.contains("id=\"resolve\""));
        assert!(
            p.body
                .contains("the provider remembers this key for 23 h 19 min more"),
            "{}",
            p.body
        );

        let p = app.get(&format!("/keys/{}", s.expired)).await;
        assert!(p.body.contains("IN_PROGRESS · lease expired"));

        let p = app.get(&format!("/keys/{}", s.failed)).await;
        assert!(p.body.contains("402 card_declined"));

        // A prefix or an upper-case key leads to the key list / the key.
        let p = app.get(&format!("/keys/{}", &s.failed[..10])).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER);
        assert_eq!(
            p.headers[header::LOCATION],
            format!("/keys?key={}", &s.failed[..10])
        );
        let p = app.get(&format!("/keys/{}", s.failed.to_uppercase())).await;
        assert_eq!(p.headers[header::LOCATION], format!("/keys/{}", s.failed));
    }
);

both_backends!(
    async fn the_api_returns_the_record_and_its_attempts(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let p = app.get(&format!("/api/v1/keys/{}", s.replayed)).await;
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
    async fn money_shows_as_money_where_the_tools_file_names_it(db: TestDb) {
        let tools = "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"10s\"\n\
                     amount = { field = \"amount_p\", currency = \"GBP\", minor_unit = 2 }\n";
        let (app, s) = TestApp::open_with_tools(&db, tools).await;
        let p = app.get(&format!("/keys/{}", s.mismatch)).await;
        assert!(
            p.body
                .contains("issue_refund</a> of <strong class=\"amount\">£45.00</strong>"),
            "{}",
            p.body
        );
        assert!(
            p.body
                .contains("<dt>Amount</dt><dd class=\"amount\">£45.00</dd>")
        );
        // The refused retry's change, in money too.
        assert!(
            p.body
                .contains("<td><code>£45.00</code></td><td><code>£40.00</code></td>"),
            "{}",
            p.body
        );
        // A tool the file gives no money field keeps its raw arguments only.
        let p = app.get(&format!("/keys/{}", s.message)).await;
        assert!(!p.body.contains("<dt>Amount</dt>"));
    }
);
