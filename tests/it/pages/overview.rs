//! The overview: counts per tool from the database, recounted after half a minute.

use super::card;
use crate::both_backends;
use crate::support::app::TestApp;
use axum::http::{StatusCode, header};
use std::sync::Arc;

/// The guard and a provider on the seed's clock, to add calls to the seeded database.
fn guard_on(
    db: &crate::support::TestDb,
    clock: &idemwatch::guard::ManualClock,
) -> (
    idemwatch::guard::Guard<idemwatch::store::Store>,
    crate::support::provider::Ledger,
) {
    let guard = idemwatch::guard::Guard::new(
        db.store.clone(),
        Arc::new(clock.clone()),
        idemwatch::guard::GuardSettings::default(),
    );
    let ledger = crate::support::provider::Ledger::new(clock.clone(), chrono::TimeDelta::hours(1));
    (guard, ledger)
}

both_backends!(
    async fn the_overview_counts_each_tool_from_the_database(db: TestDb) {
        let (app, _s) = TestApp::open(&db).await;
        let p = app.get("/").await;
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
    async fn the_overview_is_recounted_after_half_a_minute(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let requests = |body: &str| {
            let c = card(body, "send_message");
            c.contains("<a href=\"/keys?tool=send_message&#38;from=now-1h\">1</a>")
        };
        let p = app.get("/").await;
        assert!(!requests(&p.body));
        // One more message in the last hour.
        let (guard, ledger) = guard_on(&db, &s.clock);
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
        let p = app.get("/").await;
        assert!(!requests(&p.body), "the same counts for 30 seconds");
        app.clock.advance(chrono::TimeDelta::seconds(31));
        let p = app.get("/").await;
        assert!(
            requests(&p.body),
            "recounted: {}",
            card(&p.body, "send_message")
        );
    }
);

both_backends!(
    async fn the_overview_leads_with_a_replay_spike_happening_now(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        // A tool named to sort last: 40 calls, each retried once and answered from its
        // stored result, in the last hour: 50% replays, 40 of them (the alert's 5% and 30).
        let (guard, ledger) = guard_on(&db, &s.clock);
        let client =
            crate::support::provider::Client::new(&ledger, crate::support::fixture::DEADLINE, []);
        for i in 0..40 {
            let call = crate::ui_seed::call(
                "acme",
                "zz_spiking",
                "run-spike",
                "1",
                &format!("spike:{i}"),
                &format!("order:S-{i}"),
                serde_json::json!({ "n": i }),
            );
            guard.run(&call, &client).await.unwrap();
            assert!(guard.run(&call, &client).await.unwrap().replayed);
        }
        let p = app.get("/").await;
        assert_eq!(p.status, StatusCode::OK);
        let now = p
            .body
            .split("<section class=\"totals\"")
            .next()
            .unwrap_or_default();
        assert!(
            now.contains("<section class=\"now\"")
                && now.contains("<strong>Replays are spiking on zz_spiking</strong>"),
            "the page leads with it: {now}"
        );
        assert!(
            now.contains("50.0% of its requests in the last hour</a> (40 of 80)"),
            "{now}"
        );
        assert!(
            p.body.contains("<div class=\"stat stat-alert\"><span class=\"stat-label\">Replay ratio, last hour</span>"),
            "the replay card is highlighted: {}",
            p.body
        );
        let first = p
            .body
            .split("<section class=\"card\"")
            .nth(1)
            .unwrap_or_default();
        assert!(first.contains(">zz_spiking</h2>"), "first card: {first}");
        let spiking = card(&p.body, "zz_spiking");
        assert!(
            spiking.contains("<tr class=\"alert\"><th scope=\"row\">Replay ratio</th>"),
            "{spiking}"
        );
        // The last hour is a chart of its own, 12 buckets wide, the spike a red band.
        let hour = spiking
            .split("<figure class=\"chart chart-hour\">")
            .nth(1)
            .and_then(|f| f.split("</figure>").next())
            .unwrap_or_else(|| panic!("no hour chart: {spiking}"));
        assert!(hour.contains("<svg viewBox=\"0 0 24 64\""), "{hour}");
        assert!(hour.contains("<rect class=\"spike\" x=\""), "{hour}");
        assert!(hour.contains("Replays above 5% for 5 minutes."), "{hour}");
        // A tool without a spike is not named in the lead.
        assert!(!now.contains("issue_refund"), "{now}");
    }
);
