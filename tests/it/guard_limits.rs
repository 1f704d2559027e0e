//! What one caller can hold of the guard (issue 47, docs/AUTH.md "What a worker token
//! can and cannot do"): a bounded body (413), a bounded number of requests in progress
//! and a rate (429 with `Retry-After`), tool names by a grammar, one row for a run of
//! identical refusals, and a key's attempts a page at a time.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::fixture::refund;
use crate::support::guard_api::{GuardApi, Http, tools};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, ToolPolicies};
use idemwatch::web::{self, GuardLimits};
use serde_json::json;
use tower::ServiceExt;

/// A guard API on `db` and an app like its own whose every caller has the default
/// bounds as `set` changes them.
fn limited(db: &TestDb, set: impl FnOnce(&mut GuardLimits)) -> (GuardApi, Http) {
    let api = GuardApi::new(db);
    let mut limits = GuardLimits::default();
    set(&mut limits);
    let app = web::app(api.state.clone().with_guard_limits(limits));
    (api, Http { app, bearer: None })
}

both_backends!(
    async fn a_caller_past_its_rate_gets_429_with_retry_after_and_nothing_is_written(db: TestDb) {
        let (_api, http) = limited(&db, |l| l.rate = 3);
        for n in 0..3 {
            let r = http.admit(&refund(&format!("R-{n}"), 100, "1")).await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        }
        let call = refund("R-over", 100, "1");
        let r = http.admit(&call).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", r.json);
        assert_eq!(r.json["code"], "too_many_requests");
        let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!(wait >= 1);
        assert_eq!(r.json["retry_after"], wait);
        let key = call.intent.key().unwrap();
        assert!(db.store.record(&key).await.unwrap().is_none());
    }
);

both_backends!(
    async fn the_listing_of_keys_is_under_the_callers_rate_too(db: TestDb) {
        let (_api, http) = limited(&db, |l| l.rate = 2);
        let list = || http.raw(Method::GET, "/api/v1/guard/keys?workflow_id=wf", None, "");
        for _ in 0..2 {
            let r = list().await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        }
        let r = list().await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", r.json);
        assert!(r.header("retry-after").is_some());
    }
);

both_backends!(
    async fn a_caller_with_all_its_requests_in_progress_gets_429_until_one_ends(db: TestDb) {
        let (_api, http) = limited(&db, |l| l.concurrency = 1);
        // A request whose body is still arriving holds the caller's one slot.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        let stream = tokio_stream_of(rx);
        let request = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/guard/admit")
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap();
        let app = http.app.clone();
        let slow = tokio::spawn(async move { app.oneshot(request).await.unwrap().status() });
        tx.send(Ok(b"{\"intent\":".to_vec())).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let r = http.admit(&refund("C-1", 100, "1")).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", r.json);
        assert_eq!(r.header("retry-after"), Some("1"));
        // The rest of the body: the intent object and the members after it.
        let rest = format!(
            r#"{},"args":{{"order":"C-0","amount_p":100}}}}"#,
            serde_json::to_string(&refund("C-0", 100, "1").intent).unwrap()
        );
        tx.send(Ok(rest.into_bytes())).await.unwrap();
        drop(tx);
        assert_eq!(slow.await.unwrap(), StatusCode::OK);
        let r = http.admit(&refund("C-1", 100, "1")).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    }
);

/// The receiver as a body stream.
fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

both_backends!(
    async fn a_body_past_the_limit_is_413_naming_the_limit(db: TestDb) {
        let api = GuardApi::new(&db);
        let limit = GuardLimits::default().max_body_bytes;
        let call = refund("big", 100, "1");
        let body = json!({
            "intent": call.intent,
            "args": {"order": "big", "blob": "x".repeat(limit as usize)},
        });
        let r = api
            .raw(
                Method::POST,
                "/api/v1/guard/admit",
                Some("application/json"),
                &body.to_string(),
            )
            .await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", r.json);
        assert_eq!(r.json["code"], "too_large");
        assert_eq!(r.json["limit_bytes"], limit);
        assert!(
            r.json["detail"]
                .as_str()
                .unwrap()
                .contains(&limit.to_string())
        );
        assert!(
            db.store
                .record(&call.intent.key().unwrap())
                .await
                .unwrap()
                .is_none()
        );
    }
);

both_backends!(
    async fn a_tool_name_outside_the_grammar_is_400_even_under_a_default_policy(db: TestDb) {
        let mut policies: ToolPolicies = tools();
        policies.default = policies.tools.get("issue_refund").cloned();
        let api = GuardApi::with_tools(&db, None, policies);
        for tool in [
            "[docs](https://attacker.example)",
            "refund now",
            &"t".repeat(129),
        ] {
            let mut call = refund("T-1", 100, "1");
            call.intent.tool = tool.to_string();
            let r = api.admit(&call).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{tool}: {:?}", r.json);
            assert_eq!(
                (r.json["code"].as_str(), r.json["field"].as_str()),
                (Some("invalid"), Some("intent.tool"))
            );
        }
        let mut call = refund("T-1", 100, "1");
        call.intent.tool = "billing.refund-v2".into();
        assert_eq!(api.admit(&call).await.status, StatusCode::OK);
    }
);

both_backends!(
    async fn a_run_of_identical_refusals_on_one_key_is_recorded_once(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("F-1", 4500, "1");
        let key = api.admit(&call).await.key();
        // Another worker takes the key over once the lease has run out.
        api.f.clock.advance(TimeDelta::seconds(31));
        assert_eq!(api.admit(&call).await.json["decision"], "reconcile");
        // The first worker, stuck, keeps settling under its stale token.
        for _ in 0..40 {
            let r = api
                .settle(&key, 1, json!({"outcome": "done", "result": {"id": 1}}))
                .await;
            assert_eq!(r.json["code"], "lease_lost");
        }
        // And a client with other arguments keeps admitting.
        let other = refund("F-1", 450_000, "1");
        for _ in 0..40 {
            assert_eq!(api.admit(&other).await.json["code"], "payload_mismatch");
        }
        let before = db.store.record(&key).await.unwrap().unwrap().attempt_count;
        // Something else: recorded, and the next refusal after it is recorded again.
        let third = refund("F-1", 7, "1");
        assert_eq!(api.admit(&third).await.json["code"], "payload_mismatch");
        assert_eq!(api.admit(&other).await.json["code"], "payload_mismatch");

        let attempts = db.store.attempts(&key).await.unwrap();
        let count = |kind| attempts.iter().filter(|a| a.kind == kind).count();
        assert_eq!(count(AttemptKind::StaleWriteRejected), 1, "{attempts:#?}");
        assert_eq!(count(AttemptKind::PayloadMismatch), 3);
        let record = db.store.record(&key).await.unwrap().unwrap();
        // Every admission counts: claim, takeover, 40 + 2 mismatches.
        assert_eq!(record.attempt_count, 44);
        assert_eq!(before, 42);
        // The chain is whole: each row follows the one before.
        assert!(
            attempts
                .windows(2)
                .all(|w| w[1].prev_hash == w[0].hash && w[1].seq == w[0].seq + 1)
        );
    }
);

both_backends!(
    async fn the_key_route_reads_one_page_of_attempts_and_names_the_next(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("P-1", 100, "1");
        let d = api.admit(&call).await;
        let key = d.key();
        api.settle(&key, 1, json!({"outcome": "done", "result": {"id": 1}}))
            .await;
        // 2 rows, then a replay each: 150 rows in all.
        for _ in 0..148 {
            assert_eq!(api.admit(&call).await.json["decision"], "replay");
        }
        let plain = api.key_state(&key, "").await;
        assert!(plain.json.get("attempts").is_none(), "only when asked");
        let first = api.key_state(&key, "?attempts_after=0").await;
        assert_eq!(first.status, StatusCode::OK, "{:?}", first.json);
        let page = first.json["attempts"].as_array().unwrap();
        assert_eq!(page.len(), 100);
        assert_eq!(page[0]["seq"], 1);
        let next = first.json["next"].as_str().unwrap();
        assert_eq!(next, format!("/api/v1/guard/keys/{key}?attempts_after=100"));
        let second = api.raw(Method::GET, next, None, "").await;
        let page = second.json["attempts"].as_array().unwrap();
        assert_eq!(page.len(), 50);
        assert_eq!(page[49]["seq"], 150);
        assert!(second.json["next"].is_null());
    }
);
