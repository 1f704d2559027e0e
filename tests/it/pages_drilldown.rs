//! Drill-down on `/keys`: the keys where something happened within the time window
//! (`outcome=…`, `attempt_kind=…`), as the Grafana data links and alert links open them.

use crate::both_backends;
use crate::pages::{get, linked_keys, next_link, setup};
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::rfc3339;
use std::collections::BTreeSet;

both_backends!(
    async fn outcomes_and_attempt_kinds_select_the_keys_they_happened_to(db: TestDb) {
        let (app, s) = setup(&db).await;
        let at = |minutes_before: i64| rfc3339(s.end - TimeDelta::minutes(minutes_before));
        // Between the first claim (end−170 min) and its replay (end−169 min).
        let after_first_claim = rfc3339(s.end - TimeDelta::seconds(170 * 60 - 30));
        let set = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let cases: Vec<(String, BTreeSet<String>)> = vec![
            // The payload mismatch (end−148 min) and nothing else.
            ("outcome=conflict".into(), set(&[&s.mismatch])),
            (
                format!("outcome=conflict&from={}&to={}", at(149), at(147)),
                set(&[&s.mismatch]),
            ),
            ("attempt_kind=payload_mismatch".into(), set(&[&s.mismatch])),
            // Outside the window, an attempt does not count.
            (format!("outcome=conflict&from={}", at(147)), set(&[])),
            (format!("outcome=conflict&to={}", at(149)), set(&[])),
            // The escalation at end−80 min.
            ("attempt_kind=escalated".into(), set(&[&s.escalated])),
            (
                "attempt_kind=escalated&from=now-2h".into(),
                set(&[&s.escalated]),
            ),
            ("attempt_kind=escalated&from=now-1h".into(), set(&[])),
            (
                "attempt_kind=escalated&tool=send_message&status=UNKNOWN".into(),
                set(&[&s.escalated]),
            ),
            ("attempt_kind=escalated&tool=issue_refund".into(), set(&[])),
            (
                "attempt_kind=taken_over,escalated&tool=send_message".into(),
                set(&[&s.escalated]),
            ),
            // A replay, alone or behind a more selective filter.
            ("outcome=replay".into(), set(&[&s.replayed])),
            (
                "outcome=replay,replay_failure&tool=issue_refund".into(),
                set(&[&s.replayed]),
            ),
            (
                "business_ref=A-88214&outcome=replay".into(),
                set(&[&s.replayed]),
            ),
            ("business_ref=A-88214&outcome=conflict".into(), set(&[])),
            (
                "attempt_kind=replayed&outcome=replay".into(),
                set(&[&s.replayed]),
            ),
            // Claims after `mid`, whatever the keys did later.
            (
                format!("outcome=new&from={}", rfc3339(s.mid)),
                set(&[&s.escalated, &s.message, &s.unknown, &s.expired]),
            ),
            // The window bounds the attempt, not the last activity: the replayed key was
            // claimed inside the window and replayed after it.
            (
                format!("outcome=new&to={after_first_claim}"),
                set(&[&s.replayed]),
            ),
            (format!("to={after_first_claim}"), set(&[])),
        ];
        for (query, want) in cases {
            let p = get(&app, &format!("/keys?{query}")).await;
            assert_eq!(p.status, StatusCode::OK, "{query}: {}", p.body);
            let got: BTreeSet<String> = linked_keys(&p.body).into_iter().collect();
            assert_eq!(got, want, "{query}");
        }

        // The filter shows in the form, as a chip, and in the sentence over the list.
        let p = get(&app, "/keys?outcome=conflict&from=now-1d").await;
        assert!(
            p.body
                .contains("name=\"outcome\" type=\"text\" value=\"conflict\""),
            "{}",
            p.body
        );
        assert!(p.body.contains("name=\"attempt_kind\""), "{}", p.body);
        assert!(
            p.body
                .contains("Admission outcome: <strong>conflict</strong>"),
            "{}",
            p.body
        );
        assert!(
            p.body
                .contains("Showing keys with an attempt of kind payload_mismatch at or after "),
            "{}",
            p.body
        );
        assert!(
            p.body.contains("1 key, newest activity first"),
            "{}",
            p.body
        );
    }
);

both_backends!(
    async fn a_drill_down_pages_within_its_filter(db: TestDb) {
        let (app, s) = setup(&db).await;
        let mut uri = Some("/keys?outcome=new&limit=3".to_string());
        let mut seen = Vec::new();
        let mut pages = 0;
        while let Some(u) = uri {
            assert!(pages < 5, "too many pages: {u}");
            let p = get(&app, &u).await;
            assert_eq!(p.status, StatusCode::OK, "{u}");
            seen.extend(linked_keys(&p.body));
            uri = next_link(&p.body);
            if let Some(next) = &uri {
                assert!(
                    next.starts_with("/keys?outcome=new&limit=3&after="),
                    "{next}"
                );
            }
            pages += 1;
        }
        assert_eq!(pages, 3);
        // Every key was claimed once: all of them, newest activity first.
        assert_eq!(seen, s.newest_first());
        // A comma list survives the round trip through the link, encoded.
        let p = get(&app, "/keys?attempt_kind=claimed,escalated&limit=1").await;
        let next = next_link(&p.body).expect("a second page");
        assert!(
            next.starts_with("/keys?attempt_kind=claimed%2Cescalated&limit=1&after="),
            "{next}"
        );
    }
);

both_backends!(
    async fn a_bad_attempt_filter_is_a_400_naming_the_field(db: TestDb) {
        let (app, _s) = setup(&db).await;
        let cases = [
            (
                "/keys?attempt_kind=mismatch",
                "attempt_kind: &#34;mismatch&#34; is not an attempt kind; expected one or more of claimed, replayed,",
            ),
            (
                "/keys?attempt_kind=escalated,PAYLOAD",
                "attempt_kind: &#34;PAYLOAD&#34; is not an attempt kind",
            ),
            (
                "/keys?outcome=success",
                "outcome: &#34;success&#34; is not an admission outcome; expected one or more of new, replay, replay_failure, in_flight, conflict, takeover",
            ),
            (
                "/keys?attempt_kind=escalated&outcome=replay",
                "outcome: no attempt kind given in attempt_kind records these outcomes",
            ),
        ];
        for (uri, text) in cases {
            let p = get(&app, uri).await;
            assert_eq!(p.status, StatusCode::BAD_REQUEST, "{uri}: {}", p.body);
            assert!(p.body.contains(text), "{uri}: want {text:?} in {}", p.body);
        }
    }
);
