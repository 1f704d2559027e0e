//! Every answer of the guard over HTTP (docs/GUARD.md), through `web::app` on both
//! backends: execute, replay, failed, 409 in flight, 422 payload mismatch, the three
//! reconciliation reports, a stale settle, and keys shared with the Rust guard. The
//! worker here is the test: it calls the fake provider between the steps.

use crate::both_backends;
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use crate::support::provider::Fault;
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, Operation, Status};
use serde_json::json;

use AttemptKind::*;

/// Past the lease of a call under the test policy (100 ms + 30 s).
fn past_lease() -> TimeDelta {
    TimeDelta::seconds(31)
}

both_backends!(
    async fn execute_settle_then_replay(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-1", 4500, "1");
        let d = api.admit(&call).await;
        assert_eq!(d.status, StatusCode::OK, "{:?}", d.json);
        assert_eq!(d.json["decision"], "execute");
        assert_eq!(d.token(), 1);
        assert_eq!(
            d.header("idempotency-key"),
            Some(d.json["key"].as_str().unwrap())
        );
        assert_eq!(
            d.json["args"],
            json!({"order": "A-1", "amount_p": 4500}),
            "free text stripped"
        );
        assert_eq!(d.json["policy"]["call_timeout_seconds"], json!(0.1));
        assert_eq!(d.json["policy"]["free_text_fields"], json!(["reason"]));
        let key = d.key();
        assert_eq!(
            key,
            call.intent.key().unwrap(),
            "the server derives the same key"
        );

        let result = api.execute(&key, &d.json["args"]).await;
        let s = api
            .settle(
                &key,
                1,
                json!({"outcome": "done", "result": result, "duration_ms": 12}),
            )
            .await;
        assert_eq!(
            s.json,
            json!({"decision": "settled", "key": key, "status": "DONE"})
        );

        let r = api.admit(&call).await;
        assert_eq!(r.json["decision"], "replay");
        assert_eq!(r.json["replayed"], true);
        assert_eq!(r.json["result"], result);
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        assert_eq!(
            api.f.log(key.as_str()).await,
            [(Claimed, 1), (Completed, 1), (Replayed, 1)]
        );
        let attempts = db.store.attempts(&key).await.unwrap();
        assert_eq!(attempts[0].actor, "local/worker-1");
        assert_eq!(attempts[0].detail["policy"]["tool"], "issue_refund");
        assert_eq!(
            attempts[0].detail["policy"]["key_retention_seconds"],
            86_400
        );
        assert_eq!(attempts[1].duration_ms, Some(12));
        assert_eq!(api.f.ledger.effects_for(key.as_str()), 1);
    }
);

both_backends!(
    async fn a_definitive_failure_is_answered_as_failed_on_every_retry(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-2", 4500, "1");
        let d = api.admit(&call).await;
        let key = d.key();
        let s = api
            .settle(
                &key,
                1,
                json!({"outcome": "failed", "error": "402 card_declined"}),
            )
            .await;
        assert_eq!(s.json["status"], "FAILED");
        let r = api.admit(&call).await;
        assert_eq!(
            r.json,
            json!({"decision": "failed", "key": key, "error": "402 card_declined", "replayed": true})
        );
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
    }
);

both_backends!(
    async fn a_second_worker_gets_409_in_flight_with_retry_after(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-3", 4500, "1");
        let first = api.admit(&call).await;
        let second = api.admit(&call).await;
        assert_eq!(second.status, StatusCode::CONFLICT);
        assert_eq!(
            second.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(second.json["code"], "in_flight");
        assert_eq!(second.json["type"], "urn:idemwatch:problem:in_flight");
        assert_eq!(second.json["status"], 409);
        // 100 ms + 30 s, rounded up.
        assert_eq!(second.json["retry_after"], 31);
        assert_eq!(second.header("retry-after"), Some("31"));
        assert_eq!(second.header("idempotency-key"), first.json["key"].as_str());
        assert_eq!(second.json["lease_until"], first.json["lease_until"]);
        assert_eq!(
            api.f.log(first.key().as_str()).await,
            [(Claimed, 1), (InFlightRejected, 1)]
        );
    }
);

both_backends!(
    async fn a_changed_payload_is_422_naming_the_differing_fields(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-4", 4500, "1");
        let d = api.admit(&call).await;
        let mut changed = call.clone();
        changed.args =
            json!({"order": "A-4", "amount_p": 45, "reason": "rephrased", "currency": "GBP"});
        let m = api.admit(&changed).await;
        assert_eq!(m.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(m.json["code"], "payload_mismatch");
        assert_eq!(m.json["differing_fields"], json!(["amount_p", "currency"]));
        assert_ne!(m.json["stored_fingerprint"], m.json["fingerprint"]);
        // A rephrased reason alone is the same payload.
        let mut rephrased = call.clone();
        rephrased.args["reason"] = json!("something else entirely");
        assert_eq!(api.admit(&rephrased).await.json["code"], "in_flight");
        assert_eq!(
            api.f.log(d.key().as_str()).await,
            [(Claimed, 1), (PayloadMismatch, 1), (InFlightRejected, 1)]
        );
    }
);

both_backends!(
    async fn a_timeout_then_a_retry_that_finds_the_effect_replays_it(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-5", 4500, "1");
        let d = api.admit(&call).await;
        let key = d.key();
        // The provider acts, the answer is lost: the worker reports unknown.
        let lost = api
            .f
            .client([Fault::DropResponse])
            .execute(&key, &d.json["args"])
            .await;
        assert!(lost.is_err());
        let s = api
            .settle(
                &key,
                1,
                json!({"outcome": "unknown", "reason": "connection reset"}),
            )
            .await;
        assert_eq!(s.json["status"], "UNKNOWN");

        let r = api.admit(&call).await;
        assert_eq!(r.json["decision"], "reconcile", "{:?}", r.json);
        assert_eq!(r.token(), 2);
        assert_eq!(r.json["previous_status"], "UNKNOWN");
        assert_eq!(r.json["resend_allowed"], true);
        assert!(r.json["resend_safe_until"].is_string());
        let found = api.found(&key).await;
        let rep = api
            .reconcile(&key, 2, json!({"lookup": "found", "result": found}))
            .await;
        assert_eq!(rep.json["decision"], "replay");
        assert_eq!(rep.json["result"], found);
        assert_eq!(rep.header("idempotent-replayed"), Some("true"));
        assert_eq!(api.f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            api.f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (ReconciledFound, 2)
            ]
        );
    }
);

both_backends!(
    async fn not_found_while_the_provider_remembers_the_key_is_a_resend(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-6", 4500, "1");
        let key = api.admit_then_unknown(&call, "503 from provider").await;
        let r = api.admit(&call).await;
        let rep = api
            .reconcile(
                &key,
                r.token(),
                json!({"lookup": "not_found", "duration_ms": 5}),
            )
            .await;
        assert_eq!(rep.json["decision"], "execute", "{:?}", rep.json);
        assert_eq!(rep.token(), 2);
        assert_eq!(rep.json["args"], json!({"order": "A-6", "amount_p": 4500}));
        let result = api.execute(&key, &rep.json["args"]).await;
        let s = api
            .settle(&key, 2, json!({"outcome": "done", "result": result}))
            .await;
        assert_eq!(s.json["status"], "DONE");
        assert_eq!(api.f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            api.f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (Resent, 2),
                (Completed, 2)
            ]
        );
    }
);

both_backends!(
    async fn not_found_after_the_provider_forgot_the_key_needs_a_person(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-7", 4500, "1");
        let key = api.admit_then_unknown(&call, "worker crashed").await;
        api.f.clock.advance(TimeDelta::hours(25));
        let r = api.admit(&call).await;
        assert_eq!(r.json["resend_allowed"], false);
        let rep = api
            .reconcile(&key, r.token(), json!({"lookup": "not_found"}))
            .await;
        assert_eq!(rep.status, StatusCode::CONFLICT);
        assert_eq!(rep.json["code"], "needs_human_review");
        assert!(rep.json["provider_retention_until"].is_string());
        let state = api.key_state(&key, "").await;
        assert_eq!(state.json["status"], "UNKNOWN");
        assert_eq!(state.json["awaiting_person"], true);
        assert_eq!(state.json["fencing_token"], 2);
        assert_eq!(api.f.ledger.effects().len(), 0, "nothing was sent");
        assert_eq!(
            api.f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (Escalated, 2)
            ]
        );
    }
);

both_backends!(
    async fn a_failed_lookup_leaves_the_key_unknown(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-8", 4500, "1");
        let key = api.admit_then_unknown(&call, "timeout after 10 s").await;
        let r = api.admit(&call).await;
        let rep = api
            .reconcile(
                &key,
                r.token(),
                json!({"lookup": "failed", "error": "lookup 500"}),
            )
            .await;
        assert_eq!(rep.json["decision"], "unknown");
        assert_eq!(rep.json["reason"], "provider lookup failed: lookup 500");
        assert_eq!(api.f.status(key.as_str()).await, Status::Unknown);
        assert_eq!(
            api.f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (MarkedUnknown, 2)
            ]
        );
    }
);

both_backends!(
    async fn a_settle_with_a_stale_token_is_lease_lost_and_recorded(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-9", 4500, "1");
        let key = api.admit(&call).await.key();
        api.f.clock.advance(past_lease());
        let r = api.admit(&call).await;
        assert_eq!(r.json["decision"], "reconcile");
        assert_eq!(r.json["previous_status"], "IN_PROGRESS");
        let late = api
            .settle(
                &key,
                1,
                json!({"outcome": "done", "result": {"refund_id": "rf_x"}}),
            )
            .await;
        assert_eq!(late.status, StatusCode::CONFLICT);
        assert_eq!(late.json["code"], "lease_lost");
        assert_eq!(late.json["current_token"], 2);
        assert_eq!(api.f.status(key.as_str()).await, Status::InProgress);
        assert_eq!(
            api.f.log(key.as_str()).await,
            [(Claimed, 1), (TakenOver, 2), (StaleWriteRejected, 1)]
        );
    }
);

both_backends!(
    async fn a_key_started_over_http_is_finished_by_the_rust_guard_and_back(db: TestDb) {
        let api = GuardApi::new(&db);
        // HTTP worker: the provider acts, the answer is lost, the worker dies.
        let call = refund("A-10", 4500, "1");
        let d = api.admit(&call).await;
        let key = d.key();
        api.execute(&key, &d.json["args"]).await;
        api.f.clock.advance(past_lease());
        // Rust worker: takes over, finds the effect, replays it.
        let out = api.f.guard.run(&call, &api.f.client([])).await.unwrap();
        assert!(out.replayed);
        assert_eq!(api.f.ledger.effects_for(key.as_str()), 1);

        // Rust worker dies after the effect; the HTTP worker reconciles it.
        let call = refund("A-11", 700, "1");
        let key = call.intent.key().unwrap();
        api.f.crash_after_effect(&call).await;
        api.f.clock.advance(past_lease());
        let r = api.admit(&call).await;
        assert_eq!(r.json["decision"], "reconcile");
        let found = api.found(&key).await;
        let rep = api
            .reconcile(&key, r.token(), json!({"lookup": "found", "result": found}))
            .await;
        assert_eq!(rep.json["decision"], "replay");
        assert_eq!(api.f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            api.f.log(key.as_str()).await,
            [(Claimed, 1), (TakenOver, 2), (ReconciledFound, 2)]
        );
    }
);
