//! The guard over HTTP refuses what it cannot read, naming the field, with a problem
//! document and nothing written; and its long poll returns when a person acts.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use axum::http::{Method, StatusCode};
use chrono::TimeDelta;
use idemwatch::guard::{Resolution, ResolveRequest};
use serde_json::json;
use std::time::{Duration, Instant};

const INTENT: &str =
    r#"{"tenant":"acme","tool":"issue_refund","workflow_id":"w","step_id":"1","intent_id":"i"}"#;

both_backends!(
    async fn each_malformed_request_is_a_400_naming_its_field(db: TestDb) {
        let api = GuardApi::new(&db);
        let key = "a".repeat(64);
        let json = Some("application/json");
        let cases: Vec<(&str, Option<&str>, String, &str)> = vec![
            ("admit", None, format!(r#"{{"intent":{INTENT},"args":{{}}}}"#), "content-type"),
            ("admit", Some("text/plain"), format!(r#"{{"intent":{INTENT},"args":{{}}}}"#), "content-type"),
            ("admit", json, "{\"intent\":".into(), "body"),
            ("admit", json, "[]".into(), "body"),
            ("admit", json, r#"{"args":{}}"#.into(), "intent"),
            ("admit", json, format!(r#"{{"intent":{INTENT}}}"#), "args"),
            ("admit", json, format!(r#"{{"intent":{INTENT},"args":[]}}"#), "args"),
            ("admit", json, format!(r#"{{"intent":{INTENT},"args":{{"n":9007199254740993}}}}"#), "args"),
            ("admit", json, r#"{"intent":{"tenant":"","tool":"issue_refund","workflow_id":"w","step_id":"1","intent_id":"i"},"args":{}}"#.into(), "intent.tenant"),
            ("admit", json, r#"{"intent":{"tenant":"a","tool":"issue_refund","workflow_id":"w","step_id":1,"intent_id":"i"},"args":{}}"#.into(), "intent.step_id"),
            ("admit", json, format!(r#"{{"intent":{INTENT},"args":{{}},"worker":""}}"#), "worker"),
            ("admit", json, format!(r#"{{"intent":{INTENT},"args":{{}},"fencing_token":1}}"#), "body"),
            ("settle", json, format!(r#"{{"key":"{key}","fencing_token":1}}"#), "outcome"),
            ("settle", json, format!(r#"{{"key":"{key}","fencing_token":"1","outcome":"done","result":1}}"#), "fencing_token"),
            ("settle", json, format!(r#"{{"key":"{key}","fencing_token":1,"outcome":"done"}}"#), "result"),
            ("settle", json, format!(r#"{{"key":"{key}","fencing_token":1,"outcome":"failed"}}"#), "error"),
            ("settle", json, format!(r#"{{"key":"{key}","fencing_token":1,"outcome":"unknown"}}"#), "reason"),
            ("settle", json, r#"{"key":"XYZ","fencing_token":1,"outcome":"unknown","reason":"r"}"#.into(), "key"),
            ("reconcile", json, format!(r#"{{"key":"{key}","fencing_token":2,"lookup":"maybe"}}"#), "lookup"),
            ("reconcile", json, format!(r#"{{"key":"{key}","fencing_token":2,"lookup":"found"}}"#), "result"),
        ];
        for (path, content_type, body, field) in cases {
            let r = api
                .raw(
                    Method::POST,
                    &format!("/api/v1/guard/{path}"),
                    content_type,
                    &body,
                )
                .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "{path} {body}: {:?}",
                r.json
            );
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
            assert_eq!(r.json["code"], "invalid", "{body}");
            assert_eq!(r.json["field"], field, "{path} {body}: {:?}", r.json);
            assert!(r.json["detail"].is_string());
        }
        let r = api
            .raw(Method::GET, "/api/v1/guard/keys/xyz", None, "")
            .await;
        assert_eq!(
            (r.status, r.json["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("key"))
        );
        let r = api
            .raw(
                Method::GET,
                &format!("/api/v1/guard/keys/{key}?wait=61"),
                None,
                "",
            )
            .await;
        assert_eq!(r.json["field"], "wait");
        // A wrong method is a problem document too, never plain text.
        let r = api.raw(Method::GET, "/api/v1/guard/admit", None, "").await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.json["code"], "method_not_allowed");
        let intent: idemwatch::guard::Intent = serde_json::from_str(INTENT).unwrap();
        let written = db.store.record(&intent.key().unwrap()).await.unwrap();
        assert!(written.is_none(), "nothing was written");
    }
);

both_backends!(
    async fn an_unknown_tool_is_refused_and_a_never_admitted_key_is_404(db: TestDb) {
        let api = GuardApi::new(&db);
        let mut call = refund("A-1", 4500, "1");
        call.intent.tool = "wire_transfer".into();
        let r = api.admit(&call).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.json["code"], "unknown_tool");
        assert_eq!(r.json["field"], "intent.tool");
        let key = refund("A-1", 4500, "1").intent.key().unwrap();
        let r = api
            .settle(&key, 1, json!({"outcome": "unknown", "reason": "r"}))
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(r.json["code"], "not_found");
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()));
        assert_eq!(api.key_state(&key, "").await.status, StatusCode::NOT_FOUND);
    }
);

/// An escalated key, parked on a person: (api, key, token).
async fn escalated(db: &TestDb) -> (GuardApi, idemwatch::guard::IdempotencyKey, i64) {
    let api = GuardApi::new(db);
    let call = refund("A-2", 4500, "1");
    let key = api.admit_then_unknown(&call, "timeout").await;
    api.f.clock.advance(TimeDelta::hours(25));
    let r = api.admit(&call).await;
    let e = api
        .reconcile(&key, r.token(), json!({"lookup": "not_found"}))
        .await;
    assert_eq!(e.json["code"], "needs_human_review");
    (api, key, r.token())
}

fn done_by_a_person() -> ResolveRequest {
    ResolveRequest {
        resolution: Resolution::Done,
        reason: "refund seen in the provider dashboard".into(),
        evidence: Some("rf_1".into()),
        result: None,
        actor: "sam".into(),
        expected_token: None,
    }
}

both_backends!(
    async fn the_long_poll_returns_when_a_person_resolves_the_key(db: TestDb) {
        let (api, key, token) = escalated(&db).await;
        // Without a change, the wait runs out and says so.
        let started = Instant::now();
        let idle = api
            .key_state(&key, &format!("?after_token={token}&wait=1"))
            .await;
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(
            (
                idle.json["changed"].clone(),
                idle.json["awaiting_person"].clone()
            ),
            (json!(false), json!(true))
        );

        // A resolve in this process wakes the waiter (the guard broadcasts the key).
        let mut changes = api.state.guard.subscribe();
        let waiter = {
            let (http, k, query) = (
                api.http.clone(),
                key.clone(),
                format!("?after_token={token}&wait=30"),
            );
            tokio::spawn(async move { http.key_state(&k, &query).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        api.state
            .guard
            .resolve(&key, &done_by_a_person())
            .await
            .unwrap();
        assert_eq!(
            changes.recv().await.unwrap(),
            key,
            "the resolve is broadcast"
        );
        let woke = waiter.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(woke.json["changed"], true);
        assert_eq!(woke.json["status"], "DONE");
        assert_eq!(woke.json["fencing_token"], token + 1);
        assert_eq!(woke.json["awaiting_person"], false);
        assert_eq!(woke.json["result"]["evidence"], "rf_1");
        // The parked run resumes: a new admit of the same intent replays the result.
        let again = api.admit(&refund("A-2", 4500, "1")).await;
        assert_eq!(again.json["decision"], "replay");
    }
);

both_backends!(
    async fn the_long_poll_sees_a_resolve_made_by_another_replica(db: TestDb) {
        let (api, key, token) = escalated(&db).await;
        let query = format!("?after_token={token}&wait=30");
        let started = Instant::now();
        let (woke, ()) = tokio::join!(api.key_state(&key, &query), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            // Another process's guard: same database, no broadcast to this one.
            api.f
                .guard
                .resolve(&key, &done_by_a_person())
                .await
                .unwrap();
        });
        assert_eq!(woke.json["changed"], true);
        assert_eq!(woke.json["status"], "DONE");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "re-read about every second"
        );
    }
);

// Found by Schemathesis (scripts/schemathesis/run.sh): a NUL character in the arguments
// was a 500 on PostgreSQL (text and jsonb cannot hold it) and stored on SQLite; and a
// token written `2.0`, a JSON Schema `integer`, was refused.
both_backends!(
    async fn a_nul_character_is_a_400_on_both_backends_and_a_whole_float_is_a_number(db: TestDb) {
        let api = GuardApi::new(&db);
        let json = Some("application/json");
        for body in [
            format!(r#"{{"intent":{INTENT},"args":{{"order":"A\u0000"}}}}"#),
            format!(r#"{{"intent":{INTENT},"args":{{"a\u0000":1}}}}"#),
            format!(r#"{{"intent":{INTENT},"args":{{}},"business_ref":"r\u0000"}}"#),
        ] {
            let r = api
                .raw(Method::POST, "/api/v1/guard/admit", json, &body)
                .await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.json);
            assert_eq!(r.json["code"], "invalid");
        }
        let key = idemwatch::guard::Intent {
            tenant: "acme".into(),
            tool: "issue_refund".into(),
            workflow_id: "w".into(),
            step_id: "1".into(),
            intent_id: "i".into(),
        }
        .key()
        .unwrap();
        let state = api.key_state(&key, "").await;
        assert_eq!(
            state.status,
            StatusCode::NOT_FOUND,
            "a refused admit writes nothing"
        );

        let admitted = api.admit(&refund("nul-1", 4500, "1")).await;
        assert_eq!(admitted.status, StatusCode::OK, "{:?}", admitted.json);
        let body = json!({
            "key": admitted.key().as_str(), "fencing_token": admitted.token() as f64,
            "outcome": "done", "result": {"refund_id": "rf_1"}, "duration_ms": 12.0,
        });
        let settled = api
            .raw(
                Method::POST,
                "/api/v1/guard/settle",
                json,
                &body.to_string(),
            )
            .await;
        assert_eq!(settled.status, StatusCode::OK, "{:?}", settled.json);
        assert_eq!(settled.json["status"], "DONE");
    }
);
