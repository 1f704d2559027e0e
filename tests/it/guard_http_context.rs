//! The guard API's optional `context` (docs/GUARD.md): the worker's own words about
//! its call, recorded as `detail.context` of each attempt row the request writes, so
//! the MCP proxy's session and request ids reach the log through `serve` as they do
//! through its in-process guard; and refused, naming the field, when it is not a small
//! JSON object.

use crate::both_backends;
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use axum::http::StatusCode;
use serde_json::{Value, json};

both_backends!(
    async fn a_context_is_recorded_in_each_attempt_row_its_request_writes(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("C-1", 4500, "1");
        let admit_context = json!({"session_id": "http-7", "request_id": "3", "client": "desk"});
        let mut body = admit_body(&call);
        body["context"] = admit_context.clone();
        let r = api.post("admit", body).await;
        assert_eq!(r.json["decision"], "execute", "{:?}", r.json);
        let settle_context = json!({"session_id": "http-7", "request_id": 4, "client": "desk"});
        let settled = api
            .settle(
                &r.key(),
                r.token(),
                json!({"outcome": "done", "result": {"id": 1}, "context": settle_context}),
            )
            .await;
        assert_eq!(settled.json["decision"], "settled", "{:?}", settled.json);
        // Without a context the row is as before: no `context` member.
        let replay = api.admit(&call).await;
        assert_eq!(replay.json["decision"], "replay");

        let attempts = api.key_state(&r.key(), "?attempts_after=0").await.json["attempts"]
            .as_array()
            .cloned()
            .expect("a page of attempts");
        let contexts: Vec<(String, Value)> = attempts
            .iter()
            .map(|a| {
                (
                    a["kind"].as_str().unwrap().to_string(),
                    a["detail"]["context"].clone(),
                )
            })
            .collect();
        assert_eq!(
            contexts,
            vec![
                ("claimed".to_string(), admit_context),
                ("completed".to_string(), settle_context),
                ("replayed".to_string(), Value::Null),
            ]
        );
    }
);

both_backends!(
    async fn a_context_that_is_not_a_small_object_is_a_400_naming_it(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("C-2", 4500, "1");
        let big = json!({"note": "x".repeat(1100)});
        for context in [
            json!([1]),
            json!("s-1"),
            json!(7),
            big,
            json!({"a": "\u{0}"}),
        ] {
            let mut body = admit_body(&call);
            body["context"] = context.clone();
            let r = api.post("admit", body).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{context}: {:?}", r.json);
            assert_eq!(
                (r.json["code"].as_str(), r.json["field"].as_str()),
                (Some("invalid"), Some("context"))
            );
        }
        let written = db.store.record(&call.intent.key().unwrap()).await.unwrap();
        assert!(written.is_none(), "nothing was written");
        // The fenced steps read it alike, before anything is written.
        let r = api.admit(&call).await;
        for (path, step) in [
            ("settle", json!({"outcome": "done", "result": 1})),
            ("reconcile", json!({"lookup": "not_found"})),
        ] {
            let mut body = json!({"key": r.key(), "fencing_token": r.token(), "context": [1]});
            body.as_object_mut()
                .unwrap()
                .extend(step.as_object().unwrap().clone());
            let refused = api.post(path, body).await;
            assert_eq!(
                refused.json["field"], "context",
                "{path}: {:?}",
                refused.json
            );
        }
        let state = api.key_state(&r.key(), "").await;
        assert_eq!(state.json["status"], "IN_PROGRESS");
    }
);

fn admit_body(call: &idemwatch::guard::ToolCall) -> Value {
    json!({"intent": call.intent, "business_ref": call.business_ref, "args": call.args, "worker": "w-1"})
}

both_backends!(
    async fn a_refusal_repeated_with_another_context_is_still_a_repeat(db: TestDb) {
        // A looping worker names each request anew (the MCP proxy: a new JSON-RPC id
        // per call); the refusal is the same, so the run stays one row and a count.
        let api = GuardApi::new(&db);
        let call = refund("C-3", 4500, "1");
        let r = api.admit(&call).await;
        api.settle(
            &r.key(),
            r.token(),
            json!({"outcome": "done", "result": {"id": 3}}),
        )
        .await;
        let mut other = call.clone();
        other.args["amount_p"] = json!(4600);
        for request in 0..3 {
            let mut body = admit_body(&other);
            body["context"] = json!({"session_id": "s", "request_id": request});
            let refused = api.post("admit", body).await;
            assert_eq!(
                refused.json["code"], "payload_mismatch",
                "{:?}",
                refused.json
            );
        }
        let attempts = db.store.attempts(&r.key()).await.unwrap();
        let mismatches: Vec<_> = attempts
            .iter()
            .filter(|a| a.kind == idemwatch::guard::AttemptKind::PayloadMismatch)
            .collect();
        assert_eq!(mismatches.len(), 1, "{attempts:#?}");
        assert_eq!(mismatches[0].detail["context"]["request_id"], 0);
        let record = db.store.record(&r.key()).await.unwrap().unwrap();
        assert_eq!(record.refusals_not_logged, 2);
    }
);
