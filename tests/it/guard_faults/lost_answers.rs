//! Answers lost or late: the seed trace, a worker killed after the effect, an UNKNOWN key
//! inside and past the provider's retention, a panicking operation.

use crate::both_backends;
use crate::support::fixture::{DEADLINE, Fixture, refund};
use crate::support::provider::{Client, Fault};
use AttemptKind::*;
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, FencingToken, GuardError, Resolution, ResolveRequest, Status};
use std::time::Duration;

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
        let record = f.store.record(&key).await.unwrap().unwrap();
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
