//! A worker that stalls between its claim and its provider call (a pause, a thread
//! starved on a loaded machine) for longer than its lease: it must not send. Once the
//! lease has run out, another worker may have taken the key over and resent, and the
//! provider may since have forgotten that send; a late send is then a second refund.
//! `guard_random` can reach this on a loaded machine (its schedules share one clock, so
//! another schedule's jump past the lease and the provider's retention can fall between
//! a worker's claim and its call); here the stall is a gate in the storage port, right
//! after the claim commits.

use crate::both_backends;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use chrono::TimeDelta;
use idemwatch::guard::{
    Attempt, AttemptDraft, AttemptKind, Claim, ClaimChecks, Guard, GuardError, GuardSettings,
    IdempotencyKey, PairReview, Record, Status, Storage, StoreError,
};
use idemwatch::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The store, with every claim held after it commits until `resume` is notified
/// (`claimed` tells that it has).
#[derive(Clone)]
struct StallAfterClaim {
    inner: Store,
    claimed: Arc<Notify>,
    resume: Arc<Notify>,
}

impl Storage for StallAfterClaim {
    async fn claim(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> Result<Claim, StoreError> {
        let claim = self.inner.claim(build, checks).await?;
        self.claimed.notify_one();
        self.resume.notified().await;
        Ok(claim)
    }

    async fn with_locked<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<T, StoreError> {
        self.inner.with_locked(key, decide).await
    }

    async fn write_if_unchanged<T: Send>(
        &self,
        expected: &Record,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<Option<T>, StoreError> {
        self.inner.write_if_unchanged(expected, decide).await
    }

    async fn review_duplicate(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (AttemptDraft, PairReview) + Send,
    ) -> Result<(), StoreError> {
        self.inner.review_duplicate(key, decide).await
    }

    async fn record(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Storage::record(&self.inner, key).await
    }

    async fn newest_attempt(&self, key: &IdempotencyKey) -> Result<Option<Attempt>, StoreError> {
        self.inner.newest_attempt(key).await
    }
}

/// Starts `order`'s refund on a worker that claims and then stalls; returns once the
/// claim is committed, with the gate that lets it go on.
async fn stalled_worker(
    f: &Fixture,
    order: &str,
) -> (
    tokio::task::JoinHandle<Result<idemwatch::guard::Outcome, GuardError>>,
    Arc<Notify>,
) {
    let store = StallAfterClaim {
        inner: f.store.clone(),
        claimed: Arc::default(),
        resume: Arc::default(),
    };
    let (claimed, resume) = (store.claimed.clone(), store.resume.clone());
    let guard = Guard::new(
        store,
        f.guard.clock().clone(),
        GuardSettings {
            lease_margin: TimeDelta::seconds(30),
        },
    );
    let (call, worker) = (
        refund(order, 700, "1"),
        f.client([Fault::Ok {
            delay: Duration::ZERO,
        }]),
    );
    let task = tokio::spawn(async move { guard.run(&call, &worker).await });
    claimed.notified().await;
    (task, resume)
}

both_backends!(
    async fn a_worker_stalled_past_its_lease_sends_nothing_after_another_took_over(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("S-1", 700, "1");
        let key = call.intent.key().unwrap();
        let (stalled, resume) = stalled_worker(&f, "S-1").await;
        // Its lease (the 100 ms call timeout + 30 s) runs out; a retry takes the key
        // over, finds nothing at the provider and resends: one refund.
        f.clock.advance(TimeDelta::seconds(31));
        let retry = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(!retry.replayed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        // A day later the provider has forgotten the key; the stalled worker goes on.
        f.clock.advance(TimeDelta::hours(25));
        resume.notify_one();
        let late = stalled.await.unwrap();
        assert_eq!(
            f.ledger.effects_for(key.as_str()),
            1,
            "the stalled worker sent after its lease: a second refund"
        );
        assert!(
            matches!(late, Err(GuardError::LeaseLost { .. })),
            "{late:?}"
        );
        assert_eq!(f.status(key.as_str()).await, Status::Done);
        let log = f.log(key.as_str()).await;
        assert_eq!(log.last(), Some(&(AttemptKind::StaleWriteRejected, 1)));
    }
);

both_backends!(
    async fn a_worker_stalled_past_its_lease_leaves_the_key_to_a_retrys_lookup(db: TestDb) {
        let f = Fixture::new(&db);
        let call = refund("S-2", 700, "1");
        let key = call.intent.key().unwrap();
        let (stalled, resume) = stalled_worker(&f, "S-2").await;
        f.clock.advance(TimeDelta::seconds(31));
        resume.notify_one();
        // Nobody took the key over, but the lease is gone: nothing is sent, and the key
        // is UNKNOWN with the reason.
        let late = stalled.await.unwrap();
        assert!(
            matches!(&late, Err(GuardError::OutcomeUnknown { reason, .. })
                if reason.contains("nothing was sent")),
            "{late:?}"
        );
        assert_eq!(f.ledger.effects_for(key.as_str()), 0);
        assert_eq!(f.status(key.as_str()).await, Status::Unknown);
        // A retry looks the key up, finds nothing, and sends: one refund.
        let retry = f.guard.run(&call, &f.client([])).await.unwrap();
        assert!(!retry.replayed);
        assert_eq!(f.ledger.effects_for(key.as_str()), 1);
        let kinds: Vec<AttemptKind> = f
            .log(key.as_str())
            .await
            .into_iter()
            .map(|(kind, _)| kind)
            .collect();
        use AttemptKind::*;
        assert_eq!(
            kinds,
            [Claimed, MarkedUnknown, TakenOver, Resent, Completed]
        );
    }
);
