//! The guard on a manual clock against the fake provider: the fixture most guard,
//! export, metrics and resolve tests start from, and the refund call they guard.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::provider::{Client, Fault, Ledger};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{
    AttemptKind, GENESIS_HASH, Guard, GuardError, GuardSettings, Intent, ManualClock, Outcome,
    Status, ToolCall, chain_hash,
};
use idemwatch::store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The client deadline, scaled down: a 10 s deadline becomes 100 ms.
pub const DEADLINE: Duration = Duration::from_millis(100);

pub struct Fixture {
    pub guard: Guard<Store>,
    pub clock: ManualClock,
    pub ledger: Ledger,
    pub store: Store,
}

impl Fixture {
    pub fn new(db: &TestDb) -> Self {
        let clock = ManualClock::new(Utc::now());
        let ledger = Ledger::new(clock.clone(), TimeDelta::hours(24));
        let settings = GuardSettings {
            lease_margin: TimeDelta::seconds(30),
        };
        let guard = Guard::new(db.store.clone(), Arc::new(clock.clone()), settings);
        Self {
            guard,
            clock,
            ledger,
            store: db.store.clone(),
        }
    }

    pub fn client(&self, script: impl IntoIterator<Item = Fault>) -> Client {
        Client::new(&self.ledger, DEADLINE, script)
    }

    /// The attempt log of `key` as (kind, fencing token), after checking that seq runs
    /// 1, 2, 3 … without gaps and that every row's hash chains to the one before.
    pub async fn log(&self, key: &str) -> Vec<(AttemptKind, i64)> {
        let attempts = self.store.attempts(&as_key(key)).await.unwrap();
        let mut prev = GENESIS_HASH.to_string();
        for (i, a) in attempts.iter().enumerate() {
            assert_eq!(a.seq, i as i64 + 1, "seq must be contiguous: {attempts:#?}");
            assert_eq!(a.prev_hash, prev, "chain broken at seq {}", a.seq);
            assert_eq!(
                chain_hash(&a.prev_hash, a.chain_fields()),
                a.hash,
                "hash of seq {}",
                a.seq
            );
            prev = a.hash.clone();
        }
        let record = self.store.record(&as_key(key)).await.unwrap().unwrap();
        assert_eq!(record.log_seq, attempts.len() as i64);
        assert_eq!(record.log_hash, prev);
        attempts
            .into_iter()
            .map(|a| (a.kind, a.fencing_token.0))
            .collect()
    }

    /// Runs `call` with a worker that dies right after the provider performed the
    /// effect, before the guard could record it.
    pub async fn crash_after_effect(&self, call: &ToolCall) {
        let dying = self.client([Fault::CrashAfterEffect]);
        let crashed = dying.crashed.clone();
        let (guard, c) = (self.guard.clone(), call.clone());
        let task = tokio::spawn(async move { guard.run(&c, &dying).await });
        crashed.notified().await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
    }

    /// Starts a retry of `call` whose provider lookup waits until
    /// [`GatedRetry::finish`]; returns once the retry has taken the key over. Its deadline is long (30 s, not
    /// [`DEADLINE`]): what a test does while the gate is shut (HTTP steps, a person's
    /// resolve through PgBouncer) may take more than 100 ms on a busy machine.
    pub async fn retry_with_gated_lookup(&self, call: &ToolCall) -> GatedRetry {
        let worker = Client::new(&self.ledger, Duration::from_secs(30), [Fault::LookupGated]);
        let gate = worker.gate.clone();
        let (guard, c) = (self.guard.clone(), call.clone());
        let task = tokio::spawn(async move { guard.run(&c, &worker).await });
        let key = call.intent.key().unwrap();
        while self.status(key.as_str()).await != Status::InProgress {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        GatedRetry { task, gate }
    }

    pub async fn status(&self, key: &str) -> Status {
        self.store
            .record(&as_key(key))
            .await
            .unwrap()
            .unwrap()
            .status
    }
}

/// A retry waiting in its provider lookup ([`Fixture::retry_with_gated_lookup`]).
pub struct GatedRetry {
    task: tokio::task::JoinHandle<Result<Outcome, GuardError>>,
    gate: Arc<tokio::sync::Notify>,
}

impl GatedRetry {
    /// Opens the gate: the lookup answers and the retry runs to its end.
    pub async fn finish(self) -> Result<Outcome, GuardError> {
        self.gate.notify_one();
        self.task.await.unwrap()
    }
}

/// Concurrent runs of one intent: exactly one performed the effect; every other one
/// was refused with 409 (in flight) or got the replay.
pub fn assert_one_fresh(results: &[Result<Outcome, GuardError>]) {
    let fresh = results
        .iter()
        .filter(|r| matches!(r, Ok(o) if !o.replayed))
        .count();
    assert_eq!(fresh, 1, "{results:?}");
    for r in results {
        assert!(
            matches!(r, Ok(_) | Err(GuardError::InFlight { .. })),
            "losers get 409 or the replay: {r:?}"
        );
    }
}

pub fn refund(order: &str, amount_p: i64, step: &str) -> ToolCall {
    ToolCall {
        intent: Intent {
            tenant: "acme".into(),
            tool: "issue_refund".into(),
            workflow_id: "run-7f3a".into(),
            step_id: step.into(),
            intent_id: format!("refund:order-{order}"),
        },
        business_ref: Some(format!("order:{order}")),
        args: json!({ "order": order, "amount_p": amount_p, "reason": "customer says the parcel never came" }),
        actor: "worker-1".into(),
    }
}
