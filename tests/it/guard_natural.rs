//! Natural keys (issue 15, docs/GUARD.md): a second intent for the same business action
//! (same tenant, tool and natural-key values, another intent key) replays the first or
//! is refused with 422: never a second effect. Through the Rust guard and over HTTP,
//! on both backends.

use crate::both_backends;
use crate::support::effects::Effects;
use crate::support::fixture::{Fixture, assert_one_fresh, refund};
use crate::support::guard_api::{GuardApi, tools};
use crate::support::provider::{Client, Fault, ProviderError};
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::{
    AttemptKind, ErrorClass, GuardError, IdempotencyKey, Operation, ToolCall, ToolPolicy,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The fixture's provider client, with `order` as the tool's natural key.
struct ByOrder(Client);

impl Operation for ByOrder {
    type Error = ProviderError;
    fn free_text_fields(&self) -> &[&str] {
        self.0.free_text_fields()
    }
    fn natural_key_fields(&self) -> &[&str] {
        &["order"]
    }
    fn key_retention(&self) -> TimeDelta {
        self.0.key_retention()
    }
    fn call_timeout(&self) -> Duration {
        self.0.call_timeout()
    }
    fn classify(&self, e: &ProviderError) -> ErrorClass {
        self.0.classify(e)
    }
    async fn execute(&self, key: &IdempotencyKey, args: &Value) -> Result<Value, ProviderError> {
        self.0.execute(key, args).await
    }
    async fn find_by_key(&self, key: &IdempotencyKey) -> Result<Option<Value>, ProviderError> {
        self.0.find_by_key(key).await
    }
}

/// The same refund planned twice: another step id, so another intent key.
fn replanned(call: &ToolCall) -> ToolCall {
    let mut c = call.clone();
    c.intent.step_id = format!("{}-replanned", c.intent.step_id);
    c
}

both_backends!(
    async fn a_second_intent_with_the_same_natural_key_replays_the_first(db: TestDb) {
        let f = Fixture::new(&db);
        let first = refund("N-1", 4500, "1");
        let second = replanned(&first);
        let (k1, k2) = (first.intent.key().unwrap(), second.intent.key().unwrap());
        assert_ne!(k1, k2);
        let done = f.guard.run(&first, &ByOrder(f.client([]))).await.unwrap();
        let again = f.guard.run(&second, &ByOrder(f.client([]))).await.unwrap();
        assert!(again.replayed);
        assert_eq!((again.key.clone(), again.result), (k1.clone(), done.result));
        assert_eq!(f.ledger.effects().len(), 1);
        // The second intent wrote no record of its own; the holder's log says who came.
        assert!(f.store.record(&k2).await.unwrap().is_none());
        let attempts = f.store.attempts(&k1).await.unwrap();
        let replay = attempts.last().unwrap();
        assert_eq!(replay.kind, AttemptKind::Replayed);
        assert_eq!(replay.detail["intent_key"], json!(k2.as_str()));
        assert_eq!(replay.detail["natural_key"], json!({"order": "N-1"}));
        assert_eq!(attempts[0].detail["natural_key"], json!({"order": "N-1"}));

        // Other arguments under the same natural key: refused, still one effect.
        let mut other = replanned(&second);
        other.args["amount_p"] = json!(9900);
        let e = f.guard.run(&other, &ByOrder(f.client([]))).await;
        assert!(
            matches!(&e, Err(GuardError::PayloadMismatch { key, differing_fields, intent_key, .. })
                if key == k1.as_str() && differing_fields == &["amount_p"]
                    && intent_key.as_deref() == Some(other.intent.key().unwrap().as_str())),
            "{e:?}"
        );
        // A new intent id is no way out here: the message must not advise one.
        let text = e.unwrap_err().to_string();
        assert!(text.contains("natural key"), "{text}");
        assert!(!text.contains("use a new intent id"), "{text}");
        assert_eq!(f.ledger.effects().len(), 1);
        assert_eq!(
            f.log(k1.as_str()).await.last().unwrap().0,
            AttemptKind::PayloadMismatch
        );

        // Another order is another action.
        let third = refund("N-2", 4500, "1");
        assert!(
            !f.guard
                .run(&third, &ByOrder(f.client([])))
                .await
                .unwrap()
                .replayed
        );
        assert_eq!(f.ledger.effects().len(), 2);
    }
);

both_backends!(
    async fn sixteen_workers_on_two_intents_of_one_natural_key_make_one_effect(db: TestDb) {
        let f = Fixture::new(&db);
        let first = refund("N-3", 4500, "1");
        let second = replanned(&first);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let guard = f.guard.clone();
            let mut c = if i % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            c.actor = format!("worker-{i}");
            let op = ByOrder(f.client([Fault::Ok {
                delay: Duration::from_millis(40),
            }]));
            set.spawn(async move { guard.run(&c, &op).await });
        }
        let results = set.join_all().await;
        assert_one_fresh(&results);
        assert_eq!(f.ledger.effects().len(), 1, "one effect for one invoice");
        // Exactly one of the two keys holds the natural key and has a record.
        let (k1, k2) = (first.intent.key().unwrap(), second.intent.key().unwrap());
        let r1 = f.store.record(&k1).await.unwrap();
        let r2 = f.store.record(&k2).await.unwrap();
        assert!(r1.is_some() != r2.is_some(), "{r1:?} {r2:?}");
        let holder = if r1.is_some() { k1 } else { k2 };
        let log = f.log(holder.as_str()).await;
        assert_eq!(log.len(), 17);
        assert_eq!(
            log.iter()
                .filter(|(k, _)| *k == AttemptKind::Claimed)
                .count(),
            1
        );
    }
);

both_backends!(
    async fn a_call_without_its_natural_key_field_is_refused_by_name(db: TestDb) {
        let f = Fixture::new(&db);
        let mut call = refund("N-4", 4500, "1");
        call.args.as_object_mut().unwrap().remove("order");
        let e = f
            .guard
            .run(&call, &ByOrder(f.client([])))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, GuardError::Invalid { field: "args", message } if message.contains("\"order\"")),
            "{e:?}"
        );
        assert!(f.ledger.effects().is_empty());
    }
);

/// The HTTP tests' tools file, with `order` as `issue_refund`'s natural key.
fn natural_tools() -> idemwatch::guard::ToolPolicies {
    let mut t = tools();
    let p: &mut ToolPolicy = t.tools.get_mut("issue_refund").unwrap();
    p.natural_key = vec!["order".into()];
    t
}

both_backends!(
    async fn over_http_two_intents_of_one_natural_key_race_to_one_effect(db: TestDb) {
        let api = GuardApi::with_tools(&db, None, natural_tools());
        let first = refund("N-5", 4500, "1");
        let second = replanned(&first);
        let effects = Arc::new(Effects::default());
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let http = api.http.clone();
            let effects = effects.clone();
            let mut c = if i % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            c.actor = format!("worker-{i}");
            set.spawn(async move {
                let r = http.admit(&c).await;
                if r.status == StatusCode::OK && r.json["decision"] == "execute" {
                    let key = r.key();
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    let result = effects.send(key.as_str());
                    let s = http
                        .settle(
                            &key,
                            r.token(),
                            json!({"outcome": "done", "result": result}),
                        )
                        .await;
                    assert_eq!(s.status, StatusCode::OK, "{:?}", s.json);
                }
                r
            });
        }
        let replies = set.join_all().await;
        let sent: usize = effects.snapshot().values().map(Vec::len).sum();
        assert_eq!(sent, 1, "one effect for one invoice: {replies:?}");
        for r in &replies {
            assert!(
                r.status == StatusCode::CONFLICT
                    || (r.status == StatusCode::OK
                        && matches!(r.json["decision"].as_str(), Some("execute" | "replay"))),
                "{:?} {:?}",
                r.status,
                r.json
            );
        }
        // Every answer names the one key holding the natural key.
        let holder = effects.snapshot().into_keys().next().unwrap();
        for r in replies.iter().filter(|r| r.status == StatusCode::OK) {
            assert_eq!(r.json["key"], json!(holder));
        }

        // Once done: the other intent replays; other arguments are a 422.
        let r = api.admit(&second).await;
        assert_eq!(
            (r.status, r.json["decision"].as_str()),
            (StatusCode::OK, Some("replay"))
        );
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        let mut other = replanned(&second);
        other.args["amount_p"] = json!(1);
        let r = api.admit(&other).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json);
        assert_eq!(r.json["differing_fields"], json!(["amount_p"]));
        assert_eq!(r.json["key"], json!(holder));
        assert_eq!(
            r.json["intent_key"],
            json!(other.intent.key().unwrap().as_str())
        );
        assert!(
            !r.json["detail"]
                .as_str()
                .unwrap()
                .contains("use a new intent id"),
            "{:?}",
            r.json
        );
        let sent: usize = effects.snapshot().values().map(Vec::len).sum();
        assert_eq!(sent, 1);
    }
);
