//! The guard on a manual clock against the fake provider: the fixture most guard,
//! export, metrics and resolve tests start from, and the refund call they guard.

use crate::support::TestDb;
use crate::support::provider::{Client, Fault, Ledger};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{
    AttemptKind, GENESIS_HASH, Guard, GuardError, GuardSettings, Intent, ManualClock, Status,
    ToolCall, chain_hash,
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
        let attempts = self.store.attempts(key).await.unwrap();
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
        let record = self.store.record(key).await.unwrap().unwrap();
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

    /// Starts a retry of `call` whose provider lookup waits for the returned gate;
    /// returns once the retry has taken the key over.
    pub async fn retry_with_gated_lookup(
        &self,
        call: &ToolCall,
    ) -> (
        tokio::task::JoinHandle<Result<idemwatch::guard::Outcome, GuardError>>,
        Arc<tokio::sync::Notify>,
    ) {
        let worker = self.client([Fault::LookupGated]);
        let gate = worker.gate.clone();
        let (guard, c) = (self.guard.clone(), call.clone());
        let task = tokio::spawn(async move { guard.run(&c, &worker).await });
        let key = call.intent.key().unwrap();
        while self.status(key.as_str()).await != Status::InProgress {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (task, gate)
    }

    pub async fn status(&self, key: &str) -> Status {
        self.store.record(key).await.unwrap().unwrap().status
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
