//! Resolve racing another person and a worker: one wins, the loser is refused cleanly, and
//! the attempt log shows both.

use super::{attempts, gated_retry, resolve_form, setup};
use crate::both_backends;
use crate::support::auth::*;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use axum::http::{Method, StatusCode};
use chrono::TimeDelta;
use idemwatch::guard::{AttemptKind, GuardError, Status};
use std::sync::Arc;

both_backends!(
    async fn two_resolvers_at_once_one_wins_and_the_log_shows_both(db: TestDb) {
        let (app, s) = setup(&db).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let (a, b) = tokio::join!(
            call(
                &app,
                Method::POST,
                &uri,
                Who::Session("sam"),
                Some(resolve_form("done", "rf_8XM1", 1, true))
            ),
            call(
                &app,
                Method::POST,
                &uri,
                Who::Session("root"),
                Some(resolve_form("failed", "", 1, true))
            ),
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
        let tail: Vec<_> = log[2..].iter().map(|a| (a.kind, a.fencing_token)).collect();
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
        let record = db.store.record(&s.unknown).await.unwrap().unwrap();
        let want = if winner == "sam" {
            Status::Done
        } else {
            Status::Failed
        };
        assert_eq!((record.status, record.fencing_token), (want, 2));
    }
);

both_backends!(
    async fn a_resolver_racing_a_workers_reconcile_loses_cleanly(db: TestDb) {
        let f = Fixture::new(&db);
        let app = builtin_app(&db.store, Arc::new(f.clock.clone())).await;
        let call_ = refund("A-31", 4500, "1");
        let key = call_.intent.key().unwrap();
        // The provider performed the refund; the answer was lost: UNKNOWN at token 1.
        f.guard
            .run(&call_, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        let uri = format!("/keys/{key}/resolve");
        // The person reviews at token 1 …
        let review = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 1, false)),
        )
        .await;
        assert_eq!(review.status, StatusCode::OK);
        // … a retry takes the key over (token 2) and is asking the provider …
        let (task, gate) = gated_retry(&f, &call_).await;
        // … and the person confirms what they saw.
        let confirm = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 1, true)),
        )
        .await;
        assert_eq!(confirm.status, StatusCode::CONFLICT, "{}", confirm.body);
        assert!(
            confirm.body.contains("A worker holds this key"),
            "{}",
            confirm.body
        );
        gate.notify_one();
        assert!(
            task.await.unwrap().unwrap().replayed,
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
        let app = builtin_app(&db.store, Arc::new(f.clock.clone())).await;
        let call_ = refund("A-32", 4500, "1");
        let key = call_.intent.key().unwrap();
        f.guard
            .run(&call_, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        // A retry hangs in its provider lookup past its lease.
        let (task, gate) = gated_retry(&f, &call_).await;
        f.clock.advance(TimeDelta::minutes(5));
        let uri = format!("/keys/{key}/resolve");
        let page = call(
            &app,
            Method::GET,
            &format!("/keys/{key}"),
            Who::Session("sam"),
            None,
        )
        .await;
        assert!(
            page.body.contains("name=\"expected_token\" value=\"2\""),
            "the form carries the token seen"
        );
        let confirm = call(
            &app,
            Method::POST,
            &uri,
            Who::Session("sam"),
            Some(resolve_form("failed", "", 2, true)),
        )
        .await;
        assert_eq!(confirm.status, StatusCode::SEE_OTHER, "{}", confirm.body);
        gate.notify_one();
        let late = task.await.unwrap().unwrap_err();
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
