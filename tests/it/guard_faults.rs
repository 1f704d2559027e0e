//! The fault-injection suite: each scenario asserts exactly one business effect at the
//! provider, the final record, and the attempt rows (kinds, contiguous seq, tokens).
//! Real time is scaled down (a 10 s client deadline becomes 100 ms); leases and the
//! provider's key retention run on a manual clock the test moves.

use crate::both_backends;
use crate::support::fixture::{DEADLINE, Fixture, refund};
use crate::support::provider::{Client, Fault};
use chrono::TimeDelta;
use idemwatch::guard::{
    AttemptKind, FencingToken, GuardError, Resolution, ResolveRequest, Status, ToolCall,
};
use serde_json::json;
use std::time::Duration;

use AttemptKind::*;

both_backends!(
    async fn the_seed_trace_refunds_once(db: TestDb) {
        // 14:02:11 attempt 1; the provider settles the refund but answers after 11.4 s
        // against a 10 s deadline; the retry fires half a second later. Scaled to a
        // 1 s deadline: with 100 ms the 14 ms between deadline and answer is short
        // enough for a loaded machine to see both at once, and the answer wins.
        let deadline = Duration::from_secs(1);
        let f = Fixture::new(&db);
        let call = refund("A-88214", 4500, "4");
        let slow = Client::new(
            &f.ledger,
            deadline,
            [Fault::Ok {
                delay: deadline * 114 / 100,
            }],
        );
        let first = f.guard.run(&call, &slow).await;
        assert!(
            matches!(first, Err(GuardError::OutcomeUnknown { .. })),
            "{first:?}"
        );
        let key = call.intent.key().unwrap();
        assert_eq!(
            f.status(key.as_str()).await,
            Status::Unknown,
            "a timeout is never FAILED"
        );

        tokio::time::sleep(deadline / 20).await;
        let retry = f
            .guard
            .run(&call, &Client::new(&f.ledger, deadline, []))
            .await
            .unwrap();
        assert!(
            retry.replayed,
            "the retry must learn the result came from attempt 1"
        );
        assert_eq!(retry.result["refund_id"], "rf_1");
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(f.status(key.as_str()).await, Status::Done);
        assert_eq!(
            f.log(key.as_str()).await,
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
    async fn a_worker_killed_after_the_effect_is_reconciled_not_repeated(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-1", 4500, "1");
        let key = call.intent.key().unwrap();
        f.crash_after_effect(&call).await;
        assert_eq!(f.status(key.as_str()).await, Status::InProgress);

        // Before the lease runs out, the key still belongs to the dead worker.
        let early = f.guard.run(&call, &f.client([])).await;
        assert!(
            matches!(early, Err(GuardError::InFlight { .. })),
            "{early:?}"
        );

        f.clock
            .advance(TimeDelta::seconds(31) + TimeDelta::from_std(DEADLINE).unwrap());
        let outcome = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(outcome.replayed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        let record = f.store.record(key.as_str()).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.fencing_token.0, record.attempt_count),
            (Status::Done, 2, 3)
        );
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (InFlightRejected, 1),
                (TakenOver, 2),
                (ReconciledFound, 2)
            ]
        );
    }
);

both_backends!(
    async fn sixteen_concurrent_workers_on_one_intent_make_one_effect(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-2", 4500, "1");
        let key = call.intent.key().unwrap();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let guard = f.guard.clone();
            let mut c = call.clone();
            c.actor = format!("worker-{i}");
            let client = f.client([Fault::Ok {
                delay: Duration::from_millis(40),
            }]);
            set.spawn(async move { guard.run(&c, &client).await });
        }
        let results = set.join_all().await;
        let fresh = results
            .iter()
            .filter(|r| matches!(r, Ok(o) if !o.replayed))
            .count();
        assert_eq!(fresh, 1, "{results:?}");
        for r in &results {
            assert!(
                matches!(r, Ok(_) | Err(GuardError::InFlight { .. })),
                "losers get 409 or the replay: {r:?}"
            );
        }
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        let log = f.log(key.as_str()).await;
        assert_eq!(log.len(), 17);
        assert_eq!(log.iter().filter(|(k, _)| *k == Claimed).count(), 1);
        assert_eq!(log.iter().filter(|(k, _)| *k == Completed).count(), 1);
        assert!(log.iter().all(
            |(k, t)| *t == 1 && matches!(k, Claimed | Completed | InFlightRejected | Replayed)
        ));
        assert_eq!(
            f.store
                .record(key.as_str())
                .await
                .unwrap()
                .unwrap()
                .attempt_count,
            16
        );
    }
);

both_backends!(
    async fn concurrent_retries_of_an_unknown_key_let_exactly_one_take_over(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-3", 4500, "1");
        let key = call.intent.key().unwrap();
        let e = f.guard.run(&call, &f.client([Fault::DropResponse])).await;
        assert!(matches!(e, Err(GuardError::OutcomeUnknown { .. })));
        let mut set = tokio::task::JoinSet::new();
        // A long deadline here: the winner's lookup waits on the gate below.
        let gate_clients: Vec<Client> = (0..8)
            .map(|_| Client::new(&f.ledger, Duration::from_secs(10), [Fault::LookupGated]))
            .collect();
        for client in gate_clients.clone() {
            let guard = f.guard.clone();
            let c = call.clone();
            set.spawn(async move { guard.run(&c, &client).await });
        }
        // Let everyone reach the guard, then open the winner's lookup.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for c in &gate_clients {
            c.gate.notify_one();
        }
        let results = set.join_all().await;
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "{results:?}"
        );
        assert_eq!(
            results
                .iter()
                .filter(|r| matches!(r, Err(GuardError::InFlight { .. })))
                .count(),
            7
        );
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        let log = f.log(key.as_str()).await;
        assert_eq!(log.iter().filter(|(k, _)| *k == TakenOver).count(), 1);
        assert_eq!(log.last(), Some(&(ReconciledFound, 2)));
    }
);

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
        let before = f.store.record(key.as_str()).await.unwrap().unwrap();
        let mut changed = call.clone();
        changed.args["amount_p"] = json!(4000);
        let e = f.guard.run(&changed, &f.client([])).await.unwrap_err();
        assert!(matches!(e, GuardError::PayloadMismatch { .. }), "{e:?}");
        let after = f.store.record(key.as_str()).await.unwrap().unwrap();
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
        let mismatch = f.store.attempts(key.as_str()).await.unwrap().pop().unwrap();
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
    async fn an_unknown_key_inside_retention_is_resent_with_the_same_key(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-7", 4500, "1");
        let key = call.intent.key().unwrap();
        let e = f.guard.run(&call, &f.client([Fault::Unavailable])).await;
        assert!(matches!(e, Err(GuardError::OutcomeUnknown { .. })));
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
        let outcome = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(!outcome.replayed, "the effect happened on this resend");
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            f.log(key.as_str()).await,
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
    async fn past_the_providers_retention_nothing_is_resent_and_a_person_is_asked(db: TestDb) {
        let f = Fixture::new(&db);
        // The worker died after the refund; nobody retried for two days; the provider
        // forgot the key. A resend now would refund twice.
        let call = refund("A-8", 4500, "1");
        let key = call.intent.key().unwrap();
        f.crash_after_effect(&call).await;
        f.clock.advance(TimeDelta::days(2));
        let e = f.guard.run(&call, &f.client([])).await.unwrap_err();
        assert!(matches!(e, GuardError::NeedsHumanReview { .. }), "{e:?}");
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(f.status(key.as_str()).await, Status::Unknown);
        assert_eq!(
            f.log(key.as_str()).await,
            [(Claimed, 1), (TakenOver, 2), (Escalated, 2)]
        );

        // Release is refused once the provider has forgotten the key.
        let release = ResolveRequest {
            resolution: Resolution::Release,
            reason: "try again".into(),
            evidence: None,
            result: None,
            actor: "sam@support".into(),
            expected_token: Some(FencingToken(2)),
        };
        let refused = f.guard.resolve(&key, &release).await.unwrap_err();
        assert!(
            matches!(&refused, GuardError::NotResolvable { why, .. } if why.contains("no longer safe")),
            "{refused}"
        );

        // The person finds rf_1 in the provider's dashboard and records it.
        let found = f.ledger.dashboard_lookup(key.as_str()).unwrap();
        let done = ResolveRequest {
            resolution: Resolution::Done,
            evidence: Some(found.refund_id.clone()),
            reason: "refund found in the provider dashboard".into(),
            ..release
        };
        let record = f.guard.resolve(&key, &done).await.unwrap();
        assert_eq!((record.status, record.fencing_token.0), (Status::Done, 3));
        let replay = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(replay.replayed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (TakenOver, 2),
                (Escalated, 2),
                (StaleWriteRejected, 2),
                (Resolved, 3),
                (Replayed, 3)
            ]
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

both_backends!(
    async fn a_person_resolving_while_a_worker_reconciles_cannot_race_it(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-9", 4500, "1");
        let key = call.intent.key().unwrap();
        f.guard
            .run(&call, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        // The person opens the key page and sees UNKNOWN with token 1.
        let seen = f.store.record(key.as_str()).await.unwrap().unwrap();
        assert_eq!((seen.status, seen.fencing_token.0), (Status::Unknown, 1));

        // A worker's retry takes the key over and is looking it up at the provider.
        let (task, gate) = f.retry_with_gated_lookup(&call).await;
        let request = ResolveRequest {
            resolution: Resolution::Failed,
            reason: "provider shows nothing".into(),
            evidence: None,
            result: None,
            actor: "sam@support".into(),
            expected_token: Some(seen.fencing_token),
        };
        let refused = f.guard.resolve(&key, &request).await.unwrap_err();
        assert!(
            matches!(
                refused,
                GuardError::Conflict {
                    token: FencingToken(2),
                    ..
                }
            ),
            "{refused:?}"
        );
        // Without a stale view, the live lease still protects the worker.
        let refused = f
            .guard
            .resolve(
                &key,
                &ResolveRequest {
                    expected_token: None,
                    ..request.clone()
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(refused, GuardError::InFlight { .. }),
            "{refused:?}"
        );

        gate.notify_one();
        let outcome = task.await.unwrap().unwrap();
        assert!(outcome.replayed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (StaleWriteRejected, 1),
                (StaleWriteRejected, 2),
                (ReconciledFound, 2)
            ]
        );
    }
);

both_backends!(
    async fn a_stale_worker_cannot_complete_a_key_a_person_resolved(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-10", 4500, "1");
        let key = call.intent.key().unwrap();
        // A 503 (token 1), then a retry whose provider lookup fails (token 2): UNKNOWN.
        let e = f.guard.run(&call, &f.client([Fault::Unavailable])).await;
        assert!(matches!(e, Err(GuardError::OutcomeUnknown { .. })), "{e:?}");
        let e = f.guard.run(&call, &f.client([Fault::LookupFails])).await;
        assert!(
            matches!(&e, Err(GuardError::OutcomeUnknown { reason, .. }) if reason.contains("lookup failed")),
            "{e:?}"
        );
        // Retry hangs in lookup past its lease; the person resolves meanwhile.
        let (task, gate) = f.retry_with_gated_lookup(&call).await;
        f.clock.advance(TimeDelta::minutes(5));
        let request = ResolveRequest {
            resolution: Resolution::Failed,
            reason: "no refund at the provider; customer informed".into(),
            evidence: None,
            result: None,
            actor: "sam@support".into(),
            expected_token: None,
        };
        let record = f.guard.resolve(&key, &request).await.unwrap();
        assert_eq!(record.status, Status::Failed);
        gate.notify_one();
        let e = task.await.unwrap().unwrap_err();
        assert!(
            matches!(
                e,
                GuardError::LeaseLost {
                    token: FencingToken(3),
                    current: FencingToken(4),
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(f.status(key.as_str()).await, Status::Failed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
        let log = f.log(key.as_str()).await;
        assert_eq!(
            &log[log.len() - 2..],
            [(Resolved, 4), (StaleWriteRejected, 3)]
        );
    }
);

both_backends!(
    async fn a_panicking_operation_leaves_the_key_unknown(db: TestDb) {
        struct Panics;
        impl idemwatch::guard::Operation for Panics {
            type Error = String;
            fn key_retention(&self) -> TimeDelta {
                TimeDelta::hours(1)
            }
            fn call_timeout(&self) -> Duration {
                DEADLINE
            }
            async fn execute(
                &self,
                _: &idemwatch::guard::IdempotencyKey,
                _: &serde_json::Value,
            ) -> Result<serde_json::Value, String> {
                panic!("bug in the tool wrapper")
            }
            async fn find_by_key(
                &self,
                _: &idemwatch::guard::IdempotencyKey,
            ) -> Result<Option<serde_json::Value>, String> {
                Ok(None)
            }
        }
        let f = Fixture::new(&db);
        let call = refund("A-11", 4500, "1");
        let e = f.guard.run(&call, &Panics).await.unwrap_err();
        assert!(
            matches!(&e, GuardError::OutcomeUnknown { reason, .. } if reason.contains("panicked")),
            "{e:?}"
        );
        assert_eq!(
            f.status(call.intent.key().unwrap().as_str()).await,
            Status::Unknown
        );
    }
);

both_backends!(
    async fn resolutions_are_validated_before_anything_is_written(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("A-12", 4500, "1");
        let key = call.intent.key().unwrap();
        f.guard
            .run(&call, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        let mut req = ResolveRequest {
            resolution: Resolution::Done,
            reason: "found it".into(),
            evidence: None,
            result: None,
            actor: "sam".into(),
            expected_token: None,
        };
        let e = f.guard.resolve(&key, &req).await.unwrap_err();
        assert!(
            matches!(
                e,
                GuardError::Invalid {
                    field: "evidence",
                    ..
                }
            ),
            "{e:?}"
        );
        req.evidence = Some("rf_1".into());
        req.reason = "  ".into();
        let e = f.guard.resolve(&key, &req).await.unwrap_err();
        assert!(
            matches!(
                e,
                GuardError::Invalid {
                    field: "reason",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(f.log(key.as_str()).await.len(), 2, "nothing written");
        let missing = idemwatch::guard::IdempotencyKey::parse(&"0".repeat(64)).unwrap();
        req.reason = "x".into();
        assert!(matches!(
            f.guard.resolve(&missing, &req).await,
            Err(GuardError::NotFound(_))
        ));
    }
);
