//! The attempt log tells time truthfully under contention: the guard reads the clock
//! inside the locked section, so a row written after a wait for the row lock carries
//! the time it was written, and `occurred_at` never runs backwards along a key's `seq`.

use crate::both_backends;
use crate::support::fixture::refund;
use chrono::{DateTime, TimeDelta, Utc};
use idemwatch::guard::{
    AttemptKind, Clock, Guard, GuardSettings, IdempotencyKey, Operation, Resolution,
    ResolveRequest, SystemClock,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;

/// The system clock, dawdling after each reading: a caller that reads the clock and
/// then waits for a lock is overtaken by callers that read it later.
#[derive(Debug)]
struct DawdlingClock;

impl Clock for DawdlingClock {
    fn now(&self) -> DateTime<Utc> {
        let t = SystemClock.now();
        std::thread::sleep(Duration::from_micros(500));
        t
    }
}

/// A provider that answers ambiguously until its `succeed_from`th call, and never
/// finds the effect: every retry takes over, resends, and settles UNKNOWN again,
/// until the key is DONE and retries become replays.
struct Flaky {
    calls: AtomicU64,
    succeed_from: u64,
}

impl Operation for Flaky {
    type Error = String;
    fn key_retention(&self) -> TimeDelta {
        TimeDelta::hours(24)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_millis(200)
    }
    async fn execute(&self, _: &IdempotencyKey, _: &Value) -> Result<Value, String> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(n % 3)).await;
        if n >= self.succeed_from {
            Ok(json!({ "refund_id": format!("rf_{n}") }))
        } else {
            Err("502 bad gateway".into())
        }
    }
    async fn find_by_key(&self, _: &IdempotencyKey) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

both_backends!(
    async fn occurred_at_never_runs_backwards_along_a_keys_seq(db: TestDb) {
        let settings = GuardSettings {
            lease_margin: TimeDelta::zero(),
        };
        let guard = Guard::new(db.store.clone(), Arc::new(DawdlingClock), settings);
        let op = Arc::new(Flaky {
            calls: AtomicU64::new(0),
            succeed_from: 6,
        });
        let call = refund("A-31", 4500, "1");
        let key = call.intent.key().unwrap();
        let mut tasks = JoinSet::new();
        for w in 0..12 {
            let (guard, op, mut call) = (guard.clone(), op.clone(), call.clone());
            call.actor = format!("worker-{w}");
            tasks.spawn(async move {
                for _ in 0..12 {
                    // Every answer is fine here: in flight, unknown, done, replayed.
                    let _ = guard.run(&call, op.as_ref()).await;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            });
        }
        for r in 0..3 {
            let (guard, key) = (guard.clone(), key.clone());
            tasks.spawn(async move {
                for i in 0..8 {
                    let req = ResolveRequest {
                        resolution: Resolution::Release,
                        reason: format!("checked the provider dashboard ({i})"),
                        evidence: None,
                        result: None,
                        actor: format!("person-{r}"),
                        expected_token: None,
                    };
                    // Refused while a worker holds the key or once it is DONE.
                    let _ = guard.resolve(&key, &req).await;
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }

        let attempts = db.store.attempts(&key).await.unwrap();
        let kinds: Vec<AttemptKind> = attempts.iter().map(|a| a.kind).collect();
        for kind in [
            AttemptKind::Claimed,
            AttemptKind::TakenOver,
            AttemptKind::Resent,
            AttemptKind::MarkedUnknown,
            AttemptKind::Completed,
            AttemptKind::Replayed,
        ] {
            assert!(kinds.contains(&kind), "no {kind} row: {kinds:?}");
        }
        let backwards: Vec<String> = attempts
            .windows(2)
            .filter(|w| w[1].occurred_at < w[0].occurred_at)
            .map(|w| {
                format!(
                    "seq {} {} at {} after seq {} {} at {}",
                    w[1].seq, w[1].kind, w[1].occurred_at, w[0].seq, w[0].kind, w[0].occurred_at
                )
            })
            .collect();
        assert!(
            backwards.is_empty(),
            "occurred_at ran backwards {} times in {} rows:\n{}",
            backwards.len(),
            attempts.len(),
            backwards.join("\n")
        );
    }
);
