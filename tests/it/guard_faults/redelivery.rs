//! The same intent again: a redelivered trigger, a modified payload, a definitive failure,
//! a crash and resume.

use crate::both_backends;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use AttemptKind::*;
use idemwatch::guard::{AttemptKind, GuardError, Status, ToolCall};
use serde_json::json;

both_backends!(
    async fn a_redelivered_trigger_gets_the_stored_result(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-4", 4500, "1");
        let key = call.intent.key().unwrap();
        let first = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(!first.replayed);
        let mut again = call.clone();
        again.args["reason"] = json!("The model rephrased this: the parcel was lost");
        let second = f.guard.run(&again, &f.client([])).await.unwrap();
        assert!(second.replayed);
        assert_eq!(first.result, second.result);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            f.log(key.as_str()).await,
            [(Claimed, 1), (Completed, 1), (Replayed, 1)]
        );
    }
);

both_backends!(
    async fn a_modified_payload_is_refused_and_the_record_kept(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-5", 4500, "1");
        let key = call.intent.key().unwrap();
        f.guard.run(&call, &f.client([])).await.unwrap();
        let before = f.store.record(&key).await.unwrap().unwrap();
        let mut changed = call.clone();
        changed.args["amount_p"] = json!(4000);
        let e = f.guard.run(&changed, &f.client([])).await.unwrap_err();
        assert!(matches!(e, GuardError::PayloadMismatch { .. }), "{e:?}");
        let after = f.store.record(&key).await.unwrap().unwrap();
        assert_eq!(
            (
                &after.fingerprint,
                &after.business_args,
                after.status,
                &after.result
            ),
            (
                &before.fingerprint,
                &before.business_args,
                before.status,
                &before.result
            )
        );
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            f.log(key.as_str()).await,
            [(Claimed, 1), (Completed, 1), (PayloadMismatch, 1)]
        );
        let mismatch = f.store.attempts(&key).await.unwrap().pop().unwrap();
        assert_eq!(
            mismatch.detail["business_args"],
            json!({"order": "A-5", "amount_p": 4000})
        );
    }
);

both_backends!(
    async fn a_definitive_failure_is_failed_and_replayed_as_such(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-6", 4500, "1");
        let key = call.intent.key().unwrap();
        let e = f
            .guard
            .run(&call, &f.client([Fault::Decline]))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, GuardError::OperationFailed { error, .. } if error.contains("card_declined"))
        );
        let again = f.guard.run(&call, &f.client([])).await.unwrap_err();
        assert!(matches!(again, GuardError::OperationFailed { .. }));
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
        assert_eq!(f.status(key.as_str()).await, Status::Failed);
        assert_eq!(
            f.log(key.as_str()).await,
            [(Claimed, 1), (Failed, 1), (ReplayedFailure, 1)]
        );
    }
);

both_backends!(
    async fn a_crash_and_resume_reproduces_identical_keys(db: TestDb) {
        let f = Fixture::new(&db);
        // The orchestrator persists run id and step index with the run; a resumed run
        // rebuilds its intents from that state, not from a new plan.
        let persisted = json!({"run": "run-7f3a", "steps": [
            {"step": "1", "order": "B-1", "amount_p": 100},
            {"step": "2", "order": "B-2", "amount_p": 200},
            {"step": "3", "order": "B-3", "amount_p": 300}
        ]});
        let calls = |state: &serde_json::Value| -> Vec<ToolCall> {
            state["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let mut c = refund(
                        s["order"].as_str().unwrap(),
                        s["amount_p"].as_i64().unwrap(),
                        s["step"].as_str().unwrap(),
                    );
                    c.intent.workflow_id = state["run"].as_str().unwrap().into();
                    c
                })
                .collect()
        };
        let before: Vec<_> = calls(&persisted);
        for c in &before[..2] {
            f.guard.run(c, &f.client([])).await.unwrap();
        }
        // Crash. The resumed worker reloads the state from storage.
        let reloaded: serde_json::Value = serde_json::from_str(&persisted.to_string()).unwrap();
        let after = calls(&reloaded);
        let keys = |cs: &[ToolCall]| {
            cs.iter()
                .map(|c| c.intent.key().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&before), keys(&after));
        let mut replayed = vec![];
        for c in &after {
            replayed.push(f.guard.run(c, &f.client([])).await.unwrap().replayed);
        }
        assert_eq!(replayed, [true, true, false]);
        assert_eq!(f.ledger.effects().len(), 3);
    }
);
