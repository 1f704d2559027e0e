//! A person resolving while workers act: stale views and stale writes refused, resolutions
//! validated first.

use crate::both_backends;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use AttemptKind::*;
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, FencingToken, GuardError, Resolution, ResolveRequest, Status};

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
        let seen = f.store.record(&key).await.unwrap().unwrap();
        assert_eq!((seen.status, seen.fencing_token.0), (Status::Unknown, 1));

        // A worker's retry takes the key over and is looking it up at the provider.
        let retry = f.retry_with_gated_lookup(&call).await;
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

        let outcome = retry.finish().await.unwrap();
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
        let retry = f.retry_with_gated_lookup(&call).await;
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
        let e = retry.finish().await.unwrap_err();
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
