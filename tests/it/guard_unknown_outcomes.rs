//! Issue 51: two ways a key ended badly under faults, now decided.
//!
//! 1. A key whose first call (with wrong arguments) ended UNKNOWN, retried with other
//!    arguments: the retry is refused (422) with the stored status, the key is escalated
//!    to a person (`awaiting_person`), and the retrying caller may look the effect up by
//!    key, never resend: `found` settles the key DONE with the effect.
//! 2. A provider that does not deduplicate by key (`provider_dedupes = false`): after an
//!    ambiguous outcome nothing is ever resent; a lookup settles it or a person does.

use crate::both_backends;
use crate::support::fixture::refund;
use crate::support::guard_api::{GuardApi, tools};
use chrono::TimeDelta;
use idemwatch::guard::{
    AttemptKind, ErrorClass, GuardError, IdempotencyKey, Operation, Status, ToolCall, ToolPolicies,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

both_backends!(
    async fn other_arguments_on_an_unknown_key_reach_a_person_or_a_lookup(db: TestDb) {
        let api = GuardApi::new(&db);
        // The first call carries pounds read as pence, and its outcome is unknown.
        let wrong = refund("U-1", 450_000, "1");
        let key = api.admit_then_unknown(&wrong, "timeout after 10 s").await;
        let right = refund("U-1", 4500, "1");
        let mut lookup_token = 0;
        for _ in 0..3 {
            let r = api.admit(&right).await;
            assert_eq!(r.status.as_u16(), 422, "{:?}", r.json);
            assert_eq!(r.json["code"], "payload_mismatch");
            assert_eq!(r.json["stored_status"], "UNKNOWN");
            assert_eq!(r.json["awaiting_person"], true);
            assert_eq!(r.json["differing_fields"], json!(["amount_p"]));
            let detail = r.json["detail"].as_str().unwrap();
            assert!(detail.contains("may or may not have happened; it is being checked"));
            lookup_token = r.json["lookup_token"].as_i64().unwrap();
        }
        let state = api.key_state(&key, "").await;
        assert_eq!(state.json["status"], "UNKNOWN");
        assert_eq!(state.json["awaiting_person"], true, "{:?}", state.json);
        let attempts = db.store.attempts(&key).await.unwrap();
        let count = |kind| attempts.iter().filter(|a| a.kind == kind).count();
        assert_eq!(
            count(AttemptKind::Escalated),
            1,
            "one escalation for the run"
        );
        assert_eq!(
            count(AttemptKind::Resent) + count(AttemptKind::TakenOver),
            0
        );

        // The retrying caller looks the effect up by key: the provider had it.
        let found = json!({"refund_id": "rf_450000"});
        let r = api
            .reconcile(
                &key,
                lookup_token,
                json!({"lookup": "found", "result": found}),
            )
            .await;
        assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Done);
        assert_eq!(record.result, Some(found));
        let r = api.admit(&right).await;
        assert_eq!(
            (r.json["code"].as_str(), r.json["stored_status"].as_str()),
            (Some("payload_mismatch"), Some("DONE"))
        );
        assert!(r.json.get("lookup_token").is_none());
    }
);

both_backends!(
    async fn a_lookup_offered_to_other_arguments_never_resends(db: TestDb) {
        let api = GuardApi::new(&db);
        let key = api
            .admit_then_unknown(&refund("U-2", 450_000, "1"), "502 from provider")
            .await;
        let r = api.admit(&refund("U-2", 4500, "1")).await;
        let token = r.json["lookup_token"].as_i64().unwrap();
        // The provider still remembers the key, yet nothing is resent for this caller.
        let r = api
            .reconcile(&key, token, json!({"lookup": "not_found"}))
            .await;
        assert_eq!(r.json["code"], "needs_human_review", "{:?}", r.json);
        let state = api.key_state(&key, "").await;
        assert_eq!(state.json["awaiting_person"], true);
        let attempts = db.store.attempts(&key).await.unwrap();
        assert!(!attempts.iter().any(|a| a.kind == AttemptKind::Resent));
        // The first caller's own retry, with the stored arguments, reconciles as ever.
        let r = api.admit(&refund("U-2", 450_000, "1")).await;
        assert_eq!(r.json["decision"], "reconcile", "{:?}", r.json);
    }
);

/// The tools file of the tests plus `send_email`, whose provider ignores keys.
fn email_tools() -> ToolPolicies {
    let mut t = tools();
    let email = ToolPolicies::parse(
        "[tools.send_email]\nprovider_dedupes = false\ncall_timeout = \"1s\"\n",
    )
    .unwrap();
    t.tools.extend(email.tools);
    t
}

both_backends!(
    async fn a_key_ignoring_provider_is_never_resent_to(db: TestDb) {
        let api = GuardApi::with_tools(&db, None, email_tools());
        let mut call = refund("E-1", 1, "1");
        call.intent.tool = "send_email".into();
        let d = api.admit(&call).await;
        assert_eq!(d.json["policy"]["provider_dedupes"], false, "{:?}", d.json);
        let key = d.key();
        // A gateway's 502 at +34 ms, while the backend still acts.
        api.f.clock.advance(TimeDelta::milliseconds(34));
        api.settle(
            &key,
            1,
            json!({"outcome": "unknown", "reason": "502 from gateway"}),
        )
        .await;
        api.f.clock.advance(TimeDelta::milliseconds(111));
        let r = api.admit(&call).await;
        assert_eq!(r.json["decision"], "reconcile");
        assert_eq!(r.json["resend_allowed"], false);
        let r = api
            .reconcile(&key, r.token(), json!({"lookup": "not_found"}))
            .await;
        assert_eq!(r.json["code"], "needs_human_review", "{:?}", r.json);
        assert!(r.json["detail"].as_str().is_some());
        let attempts = db.store.attempts(&key).await.unwrap();
        assert!(!attempts.iter().any(|a| a.kind == AttemptKind::Resent));
        assert_eq!(api.key_state(&key, "").await.json["awaiting_person"], true);
    }
);

/// An email provider that ignores idempotency keys: every `execute` that reaches it
/// sends one more email, tagged with the key. Faults: the first send of each intent
/// times out at the client and lands at the provider only after the next lookup has
/// run (`late`), or lands and then times out (`early`).
#[derive(Clone, Default)]
struct Mailer {
    sent: Arc<Mutex<HashMap<String, u32>>>,
    calls: Arc<Mutex<HashMap<String, u32>>>,
    landing: Arc<Mutex<Vec<String>>>,
}

impl Operation for Mailer {
    type Error = String;

    fn provider_dedupes(&self) -> bool {
        false
    }
    fn key_retention(&self) -> TimeDelta {
        TimeDelta::hours(24)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_millis(200)
    }
    fn classify(&self, _: &String) -> ErrorClass {
        ErrorClass::Ambiguous
    }

    async fn execute(&self, key: &IdempotencyKey, args: &Value) -> Result<Value, String> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(key.to_string()).or_default();
            *n += 1;
            *n
        };
        let early = args["n"].as_i64().unwrap() % 2 == 0;
        match (n, early) {
            (1, true) => {
                *self
                    .sent
                    .lock()
                    .unwrap()
                    .entry(key.to_string())
                    .or_default() += 1;
                Err("timed out after the send".into())
            }
            (1, false) => {
                // Lands after the lookup that follows.
                self.landing.lock().unwrap().push(key.to_string());
                Err("502 from gateway".into())
            }
            _ => {
                *self
                    .sent
                    .lock()
                    .unwrap()
                    .entry(key.to_string())
                    .or_default() += 1;
                Ok(json!({"message_id": format!("m-{key}")}))
            }
        }
    }

    async fn find_by_key(&self, key: &IdempotencyKey) -> Result<Option<Value>, String> {
        let found = self
            .sent
            .lock()
            .unwrap()
            .get(key.as_str())
            .copied()
            .unwrap_or(0)
            > 0;
        // The late sends land now, after this lookup has looked.
        for late in self.landing.lock().unwrap().drain(..) {
            *self.sent.lock().unwrap().entry(late).or_default() += 1;
        }
        Ok(found.then(|| json!({"message_id": format!("m-{key}")})))
    }
}

both_backends!(
    async fn a_key_ignoring_provider_under_faults_sends_no_email_twice(db: TestDb) {
        let f = crate::support::fixture::Fixture::new(&db);
        let mailer = Mailer::default();
        let mut escalated = 0;
        for n in 0..12 {
            let call = ToolCall {
                intent: idemwatch::guard::Intent {
                    tenant: "acme".into(),
                    tool: "send_email".into(),
                    workflow_id: "w".into(),
                    step_id: "1".into(),
                    intent_id: format!("email-{n}"),
                },
                business_ref: None,
                args: json!({"n": n, "to": "a@example.com"}),
                actor: "worker-1".into(),
            };
            // The worker retries each intent until it gets an answer that is not
            // "unknown", as the clients do.
            for _ in 0..4 {
                match f.guard.run(&call, &mailer).await {
                    Err(GuardError::OutcomeUnknown { .. }) => continue,
                    Err(GuardError::NeedsHumanReview { .. }) => {
                        escalated += 1;
                        break;
                    }
                    Ok(_) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let sent = mailer.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 12, "every email was sent once: {sent:?}");
        assert!(sent.values().all(|n| *n == 1), "no email twice: {sent:?}");
        let calls = mailer.calls.lock().unwrap().clone();
        assert!(calls.values().all(|n| *n == 1), "never resent: {calls:?}");
        // The late sends were not found by the lookup: a person decides those.
        assert_eq!(escalated, 6);
    }
);
