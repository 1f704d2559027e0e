//! Drill-down on `/keys`: the keys where something happened within the time window
//! (`outcome=…`, `attempt_kind=…`), as the Grafana data links and alert links open them.

use crate::both_backends;
use crate::support::app::{TestApp, linked_keys, next_link};
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::rfc3339;
use std::collections::BTreeSet;

both_backends!(
    async fn outcomes_and_attempt_kinds_select_the_keys_they_happened_to(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
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
            let p = app.get(&format!("/keys?{query}")).await;
            assert_eq!(p.status, StatusCode::OK, "{query}: {}", p.body);
            let got: BTreeSet<String> = linked_keys(&p.body).into_iter().collect();
            assert_eq!(got, want, "{query}");
        }

        // The filter shows in the form, as a chip, and in the sentence over the list.
        let p = app.get("/keys?outcome=conflict&from=now-1d").await;
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
        let (app, s) = TestApp::open(&db).await;
        let pages = app
            .keys_page_by_page(
                "/keys?outcome=new&limit=3",
                "/keys?outcome=new&limit=3&after=",
                5,
            )
            .await;
        assert_eq!(pages.len(), 3);
        let seen = pages.concat();
        // Every key was claimed once: all of them, newest activity first.
        assert_eq!(seen, s.newest_first());
        // A comma list survives the round trip through the link, encoded.
        let p = app
            .get("/keys?attempt_kind=claimed,escalated&limit=1")
            .await;
        let next = next_link(&p.body).expect("a second page");
        assert!(
            next.starts_with("/keys?attempt_kind=claimed%2Cescalated&limit=1&after="),
            "{next}"
        );
    }
);

both_backends!(
    async fn a_bad_attempt_filter_is_a_400_naming_the_field(db: TestDb) {
        let (app, _s) = TestApp::open(&db).await;
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
            let p = app.get(uri).await;
            assert_eq!(p.status, StatusCode::BAD_REQUEST, "{uri}: {}", p.body);
            assert!(p.body.contains(text), "{uri}: want {text:?} in {}", p.body);
        }
    }
);

/// Every data link of every dashboard panel, with its panel's title: the panel's own
/// (`defaults`) and its series' (`overrides`).
fn dashboard_links() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/dashboards/idemwatch.json"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for panel in json["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap().to_string();
        let config = &panel["fieldConfig"];
        let mut lists = vec![&config["defaults"]["links"]];
        for o in config["overrides"].as_array().into_iter().flatten() {
            for p in o["properties"].as_array().unwrap() {
                if p["id"] == "links" {
                    lists.push(&p["value"]);
                }
            }
        }
        for link in lists.into_iter().filter_map(|l| l.as_array()).flatten() {
            out.push((title.clone(), link["url"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The `ui_url` of each alert, in file order.
fn alert_links() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/prometheus/idemwatch-rules.yml"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ui_url: '"))
        .map(|l| l.trim_end_matches('\'').to_string())
        .collect()
}

both_backends!(
    async fn every_grafana_and_alert_link_opens_the_keys_behind_it(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let window = |url: &str, tool: &str| {
            url.replace("${idemwatch_url}", "")
                .replace("${__field.labels.tool:percentencode}", tool)
                .replace("${__field.labels.resolution}", "release")
                .replace("${__from:date:iso}", &rfc3339(s.end - TimeDelta::hours(4)))
                .replace("${__to:date:iso}", &rfc3339(s.end))
                .replace(
                    "${__data.fields.alertname:percentencode}",
                    "IdempotencyReplaySpike",
                )
        };
        let links = dashboard_links();
        assert!(links.len() >= 15, "{links:?}");
        for (title, url) in &links {
            if url.contains("${__field.labels.tool") {
                assert!(
                    url.contains("tool=${__field.labels.tool:percentencode}"),
                    "{title}: the tool must be percent-encoded: {url}"
                );
            }
            // A window of a panel names what happened in it: never every key of the tool.
            if url.contains("/keys?") && url.contains("from=") {
                assert!(
                    url.contains("&outcome=")
                        || url.contains("&attempt_kind=")
                        || url.contains("&entered=")
                        || url.contains("&resolution="),
                    "{title}: {url}"
                );
            }
            if !url.starts_with("${idemwatch_url}/") {
                continue;
            }
            // Every link is a list the UI accepts, for every outcome a series can have,
            // and for a tool name that needs encoding.
            // The alert table's runbook link lands on the alert's own section, the
            // one its `runbook_url` names.
            if url.contains("/runbook?alert=") {
                let p = app.get(&window(url, "send%20sms")).await;
                assert_eq!(p.status, StatusCode::SEE_OTHER, "{title}: {url}");
                assert_eq!(p.location(), "/runbook#idempotencyreplayspike", "{title}");
                continue;
            }
            for outcome in idemwatch::guard::AdmissionOutcome::ALL {
                let uri = window(url, "send%20sms")
                    .replace("${__field.labels.outcome}", outcome.as_str());
                let p = app.get(&uri).await;
                assert_eq!(p.status, StatusCode::OK, "{title}: {uri}: {}", p.body);
            }
        }

        // Exactly the keys behind a panel, on the seeded keys.
        let set = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let opens = async |title: &str, nth: usize, tool: &str| {
            let (_, url) = links
                .iter()
                .filter(|(t, _)| t == title)
                .nth(nth)
                .unwrap_or_else(|| panic!("no link {nth} on {title}"));
            let uri = window(url, tool).replace("${__field.labels.outcome}", "replay");
            linked_keys(&app.get(&uri).await.body)
                .into_iter()
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(
            opens("Payload conflicts", 0, "issue_refund").await,
            set(&[&s.mismatch])
        );
        assert_eq!(
            opens("Replay ratio per tool", 0, "issue_refund").await,
            set(&[&s.replayed])
        );
        assert_eq!(
            opens("Admissions by outcome", 0, "issue_refund").await,
            set(&[&s.replayed])
        );
        let takeovers = "Takeovers, escalation events and manual resolutions";
        // The panel, then its series: takeovers, escalations, resolutions.
        assert_eq!(
            opens(takeovers, 0, "send_message").await,
            set(&[&s.escalated])
        );
        assert_eq!(
            opens(takeovers, 2, "send_message").await,
            set(&[&s.escalated])
        );
        assert_eq!(opens(takeovers, 3, "send_message").await, set(&[]));
        // The expired-leases panel: exactly the IN_PROGRESS keys whose lease ran out,
        // not the tool's UNKNOWN keys beside them in the backlog.
        assert_eq!(
            opens("Expired leases", 0, "issue_refund").await,
            set(&[&s.expired])
        );
        // The transitions panel's DONE and FAILED series: keys that entered the status,
        // not keys a person resolved another way.
        let transitions = "Transitions into DONE / FAILED / UNKNOWN";
        let done = opens(transitions, 1, "issue_refund").await;
        assert!(
            done.contains(&s.replayed) && !done.contains(&s.failed),
            "{done:?}"
        );
        assert_eq!(
            opens(transitions, 2, "issue_refund").await,
            set(&[&s.failed])
        );

        // The alerts' links: the keys behind a replay spike and a payload conflict.
        let alerts = alert_links();
        assert!(alerts.len() >= 7, "{alerts:?}");
        for link in &alerts {
            let path = link
                .strip_prefix("{{ $externalLabels.idemwatch_url }}")
                .unwrap_or_else(|| panic!("{link}: not under the idemwatch_url label"))
                .replace("{{ $labels.tool | urlquery }}", "issue_refund");
            let p = app.get(&path.replace("now-1h", "now-4h")).await;
            assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
            let keys: BTreeSet<String> = linked_keys(&p.body).into_iter().collect();
            if path.contains("outcome=conflict") {
                assert_eq!(keys, set(&[&s.mismatch]), "{path}");
            } else if path.contains("outcome=replay") {
                assert_eq!(keys, set(&[&s.replayed]), "{path}");
            }
        }
        let p = app.get("/backlog?tool=send+sms").await;
        assert_eq!(p.status, StatusCode::OK);
        // The alerts' runbook is served by idemwatch, one section per alert.
        let p = app.get("/runbook").await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(
            p.body.contains("id=\"idempotencyreplayspike\""),
            "{}",
            p.body
        );
        // Its links are links, and what they point at is served here.
        assert!(
            p.body.contains(
                "<a href=\"/docs/OPERATIONS.md#when-the-database-fails\">OPERATIONS.md, When the database fails</a>"
            ),
            "{}",
            p.body
        );
        let ops = app.get("/docs/OPERATIONS.md").await;
        assert_eq!(ops.status, StatusCode::OK);
        assert!(ops.body.contains("id=\"when-the-database-fails\""));
        assert_eq!(app.get("/docs/NOPE.md").await.status, StatusCode::NOT_FOUND);
    }
);
