//! Every admission outcome, transition, resolution and escalation the guard can
//! produce, driven through the guard with the fake provider, then read off /metrics.

use super::*;
use crate::both_backends;
use crate::support::fixture::{DEADLINE, Fixture, refund};
use chrono::TimeDelta;
use idemwatch::guard::Clock;
use idemwatch::guard::Resolution;
use idemwatch::metrics::{MetricsOptions, OTHER_TENANT, backlog};
use idemwatch::tail::TailSettings;
use serde_json::json;

fn small_batches() -> TailSettings {
    TailSettings {
        batch_size: 3,
        ..TailSettings::default()
    }
}

fn lease() -> TimeDelta {
    TimeDelta::seconds(31) + TimeDelta::from_std(DEADLINE).unwrap()
}

both_backends!(
    async fn metrics_match_the_attempt_rows_that_produced_them(db: TestDb) {
        let f = Fixture::new(&db);
        let store = &db.store;
        // A record from before the process started: its tool is exported at zero, its
        // rows are not counted.
        let mut earlier = refund("PRE-1", 100, "1");
        earlier.intent.tool = "send_message".into();
        f.guard.run(&earlier, &f.client([])).await.unwrap();
        let before = ids_now(store).await;

        let metrics = Arc::new(Metrics::default());
        let mut tailer = Tailer::new(metrics.clone(), small_batches());
        tailer.poll(store).await.unwrap();
        let s = scrape(store, &metrics).await;
        for outcome in ["new", "replay", "conflict", "takeover"] {
            let labels = [("tool", "send_message"), ("outcome", outcome)];
            assert_eq!(s.get("idempotency_requests_total", &labels), Some(0.0));
        }
        assert_eq!(s.value("idemwatch_tail_events_total", &[]), 0.0);

        let call = |order: &str| refund(order, 4500, "1");
        let key = |order: &str| call(order).intent.key().unwrap();
        // new, then replay, then conflict.
        f.guard.run(&call("A"), &f.client([])).await.unwrap();
        f.guard.run(&call("A"), &f.client([])).await.unwrap();
        let mut changed = call("A");
        changed.args["amount_p"] = json!(4000);
        f.guard.run(&changed, &f.client([])).await.unwrap_err();
        // A definitive failure and its replay.
        f.guard
            .run(&call("B"), &f.client([Fault::Decline]))
            .await
            .unwrap_err();
        f.guard.run(&call("B"), &f.client([])).await.unwrap_err();
        // UNKNOWN, taken over, resent and completed.
        f.guard
            .run(&call("C"), &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        f.guard.run(&call("C"), &f.client([])).await.unwrap();
        // P stays UNKNOWN until the provider forgets it.
        f.guard
            .run(&call("P"), &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        // D: the worker dies; a retry under the live lease is refused; after the lease
        // a takeover finds the refund.
        f.crash_after_effect(&call("D")).await;
        let in_flight = f.guard.run(&call("D"), &f.client([])).await;
        assert!(matches!(in_flight, Err(GuardError::InFlight { .. })));
        f.crash_after_effect(&call("E")).await;
        f.clock.advance(lease());
        assert!(
            f.guard
                .run(&call("D"), &f.client([]))
                .await
                .unwrap()
                .replayed
        );
        // E: nobody retries for two days; escalated, then resolved done by a person.
        f.clock.advance(TimeDelta::days(2));
        let escalated = f.guard.run(&call("E"), &f.client([])).await;
        assert!(matches!(
            escalated,
            Err(GuardError::NeedsHumanReview { .. })
        ));
        resolve(&f, &key("E"), Resolution::Done).await.unwrap();
        // F stays UNKNOWN inside retention; G is released for a resend (it was
        // UNKNOWN already: no new entry into UNKNOWN).
        f.guard
            .run(&call("F"), &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        f.guard
            .run(&call("G"), &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        resolve(&f, &key("G"), Resolution::Release).await.unwrap();
        // J's and H's workers die; after the lease J is resolved failed by a person
        // and H is left as an expired lease.
        f.crash_after_effect(&call("J")).await;
        f.crash_after_effect(&call("H")).await;
        f.clock.advance(lease());
        resolve(&f, &key("J"), Resolution::Failed).await.unwrap();
        // Another tool and tenant.
        let mut message = refund("M", 1, "1");
        message.intent.tool = "send_message".into();
        message.intent.tenant = "globex".into();
        f.guard.run(&message, &f.client([])).await.unwrap();

        catch_up_all(&mut tailer, store, &metrics, &before).await;
        backlog::refresh(store, &metrics, f.clock.now())
            .await
            .unwrap();
        let s = scrape(store, &metrics).await;
        let rows = attempt_rows(store).await;
        assert_counters_match_rows(&s, &rows, &before, &no_tenant);

        // The same numbers, spelled out.
        fn refund_tool<'a>(k: &'a str, v: &'a str) -> [(&'a str, &'a str); 2] {
            [("tool", "issue_refund"), (k, v)]
        }
        for (outcome, n) in [
            ("new", 10.0),
            ("replay", 1.0),
            ("replay_failure", 1.0),
            ("conflict", 1.0),
            ("in_flight", 1.0),
            ("takeover", 3.0),
        ] {
            let got = s.value(
                "idempotency_requests_total",
                &refund_tool("outcome", outcome),
            );
            assert_eq!(got, n, "{outcome}");
        }
        for (status, n) in [("DONE", 4.0), ("FAILED", 2.0), ("UNKNOWN", 5.0)] {
            let got = s.value(
                "idempotency_transitions_total",
                &refund_tool("status", status),
            );
            assert_eq!(got, n, "{status}");
        }
        for (resolution, n) in [("done", 1.0), ("failed", 1.0), ("release", 1.0)] {
            let labels = refund_tool("resolution", resolution);
            assert_eq!(s.value("idempotency_resolutions_total", &labels), n);
        }
        let refund_only = [("tool", "issue_refund")];
        assert_eq!(s.value("idempotency_escalations_total", &refund_only), 1.0);
        assert_eq!(
            s.value("idempotency_attempt_duration_seconds_count", &refund_only),
            7.0
        );
        let fast = [("tool", "issue_refund"), ("le", "0.05")];
        assert_eq!(
            s.value("idempotency_attempt_duration_seconds_bucket", &fast),
            7.0
        );
        let message_new = [("tool", "send_message"), ("outcome", "new")];
        assert_eq!(s.value("idempotency_requests_total", &message_new), 1.0);

        // Backlog: P (past retention), F and G are UNKNOWN; H's lease expired.
        let record = |order: &str| {
            let store = store.clone();
            let key = key(order);
            async move { store.record(&key).await.unwrap().unwrap() }
        };
        let (p, fr) = (record("P").await, record("F").await);
        let ts = |t: chrono::DateTime<chrono::Utc>| t.timestamp_millis() as f64 / 1000.0;
        let gauge = |name: &str| s.value(name, &refund_only);
        assert_eq!(gauge("idempotency_unknown_backlog"), 3.0);
        assert_eq!(gauge("idempotency_unknown_past_retention"), 1.0);
        assert_eq!(gauge("idempotency_expired_leases"), 1.0);
        assert_eq!(
            gauge("idempotency_unknown_oldest_created_timestamp_seconds"),
            ts(p.created_at)
        );
        assert_eq!(
            gauge("idempotency_unknown_earliest_retention_deadline_timestamp_seconds"),
            ts(fr.resend_safe_until)
        );
        let message_only = [("tool", "send_message")];
        assert_eq!(s.value("idempotency_unknown_backlog", &message_only), 0.0);
        assert_eq!(s.value("idemwatch_db_up", &[]), 1.0);
        assert!(s.value("idemwatch_tail_last_success_timestamp_seconds", &[]) > 1.7e9);
        promtool_check(&s.text);

        // People settle the backlog: every gauge goes back to 0, not stale.
        resolve(&f, &key("P"), Resolution::Done).await.unwrap();
        for order in ["F", "G", "H"] {
            resolve(&f, &key(order), Resolution::Failed).await.unwrap();
        }
        catch_up_all(&mut tailer, store, &metrics, &before).await;
        backlog::refresh(store, &metrics, f.clock.now())
            .await
            .unwrap();
        let s = scrape(store, &metrics).await;
        assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &no_tenant);
        for name in [
            "idempotency_unknown_backlog",
            "idempotency_unknown_past_retention",
            "idempotency_expired_leases",
            "idempotency_unknown_oldest_created_timestamp_seconds",
            "idempotency_unknown_earliest_retention_deadline_timestamp_seconds",
        ] {
            assert_eq!(s.value(name, &refund_only), 0.0, "{name}");
        }
        promtool_check(&s.text);
    }
);

both_backends!(
    async fn tenants_beyond_the_cap_are_counted_as_other(db: TestDb) {
        let f = Fixture::new(&db);
        let store = &db.store;
        let before = ids_now(store).await;
        let options = MetricsOptions {
            tenant_label: true,
            tenant_cap: 2,
            ..MetricsOptions::default()
        };
        let metrics = Arc::new(Metrics::new(options).unwrap());
        let mut tailer = Tailer::new(metrics.clone(), small_batches());
        tailer.poll(store).await.unwrap();
        for (i, tenant) in ["t1", "t2", "t3", "t4", "t1"].iter().enumerate() {
            let mut call = refund(&format!("T-{i}"), 100, "1");
            call.intent.tenant = tenant.to_string();
            f.guard.run(&call, &f.client([])).await.unwrap();
            f.guard.run(&call, &f.client([])).await.unwrap();
        }
        // A tenant stuck in UNKNOWN beyond the cap shows in the gauges as `other`.
        let mut stuck = refund("T-stuck", 100, "1");
        stuck.intent.tenant = "t5".into();
        f.guard
            .run(&stuck, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        catch_up_all(&mut tailer, store, &metrics, &before).await;
        backlog::refresh(store, &metrics, f.clock.now())
            .await
            .unwrap();
        let s = scrape(store, &metrics).await;
        let fold = |t: &str| {
            Some(if ["t1", "t2"].contains(&t) {
                t.to_string()
            } else {
                OTHER_TENANT.to_string()
            })
        };
        assert_counters_match_rows(&s, &attempt_rows(store).await, &before, &fold);
        let replays = |tenant| {
            let labels = [
                ("tool", "issue_refund"),
                ("tenant", tenant),
                ("outcome", "replay"),
            ];
            s.value("idempotency_requests_total", &labels)
        };
        assert_eq!(
            (replays("t1"), replays("t2"), replays(OTHER_TENANT)),
            (2.0, 1.0, 2.0)
        );
        assert!(!s.text.contains(r#"tenant="t3""#), "{}", s.text);
        let backlog_of = |tenant| {
            let labels = [("tool", "issue_refund"), ("tenant", tenant)];
            s.value("idempotency_unknown_backlog", &labels)
        };
        assert_eq!((backlog_of("t1"), backlog_of(OTHER_TENANT)), (0.0, 1.0));
        promtool_check(&s.text);
    }
);
