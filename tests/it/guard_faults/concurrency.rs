//! Concurrent workers on one intent and concurrent retries of an UNKNOWN key.

use crate::both_backends;
use crate::support::fixture::{Fixture, assert_one_fresh, refund};
use crate::support::provider::{Client, Fault};
use AttemptKind::*;
use idemwatch::guard::{AttemptKind, GuardError};
use std::time::Duration;

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
        assert_one_fresh(&results);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        let log = f.log(key.as_str()).await;
        assert_eq!(log.len(), 17);
        assert_eq!(log.iter().filter(|(k, _)| *k == Claimed).count(), 1);
        assert_eq!(log.iter().filter(|(k, _)| *k == Completed).count(), 1);
        assert!(log.iter().all(
            |(k, t)| *t == 1 && matches!(k, Claimed | Completed | InFlightRejected | Replayed)
        ));
        assert_eq!(
            f.store.record(&key).await.unwrap().unwrap().attempt_count,
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
