//! Resolve racing another person and a worker: one wins, the loser is refused cleanly, and
//! the attempt log shows both.

use super::attempts;
use crate::both_backends;
use crate::support::app::{Step, TestApp};
use crate::support::as_key;
use crate::support::auth::*;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use axum::http::StatusCode;
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, GuardError, Status};

both_backends!(
    async fn two_resolvers_at_once_one_wins_and_the_log_shows_both(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let root = app.as_(Who::Session("root"));
        let (a, b) = tokio::join!(
            app.resolve(&s.unknown, "done", "rf_8XM1", 1, Step::Confirm),
            root.resolve(&s.unknown, "failed", "", 1, Step::Confirm),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::SEE_OTHER, StatusCode::CONFLICT],
            "{}\n{}",
            a.body,
            b.body
        );
        let log = attempts(&db.store, &s.unknown).await;
        let tail: Vec<_> = log[2..]
            .iter()
            .map(|a| (a.kind, a.fencing_token.0))
            .collect();
        assert_eq!(
            tail,
            [
                (AttemptKind::Resolved, 2),
                (AttemptKind::StaleWriteRejected, 1)
            ]
        );
        let winner = if a.status == StatusCode::SEE_OTHER {
            "sam"
        } else {
            "root"
        };
        let loser = if winner == "sam" { "root" } else { "sam" };
        assert_eq!(
            (log[2].actor.as_str(), log[3].actor.as_str()),
            (winner, loser)
        );
        let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
        let want = if winner == "sam" {
            Status::Done
        } else {
            Status::Failed
        };
        assert_eq!((record.status, record.fencing_token.0), (want, 2));
    }
);

both_backends!(
    async fn a_resolver_racing_a_workers_reconcile_loses_cleanly(db: TestDb) {
        let f = Fixture::new(&db);
        let app = TestApp::builtin_on(&db, &f.clock).await;
        let call_ = refund("A-31", 4500, "1");
        let key = call_.intent.key().unwrap();
        // The provider performed the refund; the answer was lost: UNKNOWN at token 1.
        f.guard
            .run(&call_, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        // The person reviews at token 1 …
        let review = app
            .resolve(key.as_str(), "failed", "", 1, Step::Review)
            .await;
        assert_eq!(review.status, StatusCode::OK);
        // … a retry takes the key over (token 2) and is asking the provider …
        let retry = f.retry_with_gated_lookup(&call_).await;
        // … and the person confirms what they saw.
        let confirm = app
            .resolve(key.as_str(), "failed", "", 1, Step::Confirm)
            .await;
        assert_eq!(confirm.status, StatusCode::CONFLICT, "{}", confirm.body);
        assert!(
            confirm.body.contains("A worker holds this key"),
            "{}",
            confirm.body
        );
        assert!(
            retry.finish().await.unwrap().replayed,
            "the worker found the refund"
        );
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        use AttemptKind::*;
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (StaleWriteRejected, 1),
                (ReconciledFound, 2)
            ]
        );
        assert_eq!(f.status(key.as_str()).await, Status::Done);
    }
);

both_backends!(
    async fn a_resolver_wins_against_a_worker_whose_lease_ran_out(db: TestDb) {
        let f = Fixture::new(&db);
        let app = TestApp::builtin_on(&db, &f.clock).await;
        let call_ = refund("A-32", 4500, "1");
        let key = call_.intent.key().unwrap();
        f.guard
            .run(&call_, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        // A retry hangs in its provider lookup past its lease.
        let retry = f.retry_with_gated_lookup(&call_).await;
        f.clock.advance(TimeDelta::minutes(5));
        let page = app.get(&format!("/keys/{key}")).await;
        assert!(
            page.body.contains("name=\"expected_token\" value=\"2\""),
            "the form carries the token seen"
        );
        let confirm = app
            .resolve(key.as_str(), "failed", "", 2, Step::Confirm)
            .await;
        assert_eq!(confirm.status, StatusCode::SEE_OTHER, "{}", confirm.body);
        let late = retry.finish().await.unwrap_err();
        assert!(matches!(late, GuardError::LeaseLost { .. }), "{late:?}");
        use AttemptKind::*;
        assert_eq!(
            f.log(key.as_str()).await,
            [
                (Claimed, 1),
                (MarkedUnknown, 1),
                (TakenOver, 2),
                (Resolved, 3),
                (StaleWriteRejected, 2)
            ]
        );
        assert_eq!(f.status(key.as_str()).await, Status::Failed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
    }
);
