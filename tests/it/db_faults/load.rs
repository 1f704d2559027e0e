//! Guard calls in flight while the database misbehaves: workers in this process run
//! refunds through the real guard against the fake provider (which counts effects per
//! intent), record every answer with its time, and retry what was cut off the way a
//! caller would. Afterwards [`Load::settle`] retries every unfinished intent past its
//! lease and checks the books: one effect per intent, every acknowledged success in
//! the log.

use crate::support::as_key;
use crate::support::fixture::refund;
use crate::support::provider::{Client, Fault, Ledger};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{Guard, GuardError, GuardSettings, ManualClock, Status, ToolCall};
use idemwatch::store::{Store, StoreError, StoreOptions};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The provider's deadline per call; the guard's lease is this plus 30 s.
const DEADLINE: Duration = Duration::from_millis(500);

/// What the callers saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// (key, result, when the guard answered) for every success.
    pub acked: Vec<(String, Value, Instant)>,
    /// Calls cut off by the database, as the callers saw them: (when, error text).
    pub cut_off: Vec<(Instant, String)>,
    /// Answers that are neither a success, a retryable database error nor a 409 for a
    /// key whose earlier call was cut off: each one is a defect.
    pub unexpected: Vec<String>,
    /// Intents not finished when the load stopped.
    pub pending: Vec<ToolCall>,
}

impl Tally {
    /// The first success at or after `t`.
    pub fn first_success_after(&self, t: Instant) -> Option<Instant> {
        self.acked.iter().map(|a| a.2).filter(|a| *a >= t).min()
    }
}

pub struct Load {
    pub store: Store,
    guard: Guard<Store>,
    clock: ManualClock,
    pub ledger: Ledger,
    tally: Arc<Mutex<Tally>>,
    stop: watch::Sender<bool>,
    workers: JoinSet<()>,
}

impl Load {
    /// Opens its own pool on `url` (a short acquire timeout, so a dead database
    /// answers quickly) and starts `workers` callers.
    pub async fn start(url: &str, workers: usize) -> Load {
        let options = StoreOptions {
            max_connections: workers as u32 + 2,
            acquire_timeout: Duration::from_secs(2),
        };
        let store = Store::connect(url, &options).await.expect("open the store");
        let clock = ManualClock::new(Utc::now());
        let ledger = Ledger::new(clock.clone(), TimeDelta::hours(24));
        let settings = GuardSettings {
            lease_margin: TimeDelta::seconds(30),
        };
        let guard = Guard::new(store.clone(), Arc::new(clock.clone()), settings);
        let (stop, stopped) = watch::channel(false);
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut set = JoinSet::new();
        for w in 0..workers {
            let (guard, ledger, tally, stopped) = (
                guard.clone(),
                ledger.clone(),
                tally.clone(),
                stopped.clone(),
            );
            set.spawn(worker(w, guard, ledger, tally, stopped));
        }
        Load {
            store,
            guard,
            clock,
            ledger,
            tally,
            stop,
            workers: set,
        }
    }

    /// Stops the callers (none may have panicked) and returns what they saw.
    pub async fn stop(mut self) -> (Tally, Finisher) {
        let _ = self.stop.send(true);
        while let Some(joined) = self.workers.join_next().await {
            joined.expect("a caller panicked");
        }
        let tally = std::mem::take(&mut *self.tally.lock().unwrap());
        let finisher = Finisher {
            store: self.store,
            guard: self.guard,
            clock: self.clock,
            ledger: self.ledger,
        };
        (tally, finisher)
    }
}

fn client(ledger: &Ledger) -> Client {
    Client::new(
        ledger,
        DEADLINE,
        [Fault::Ok {
            delay: Duration::from_millis(5),
        }],
    )
}

async fn worker(
    w: usize,
    guard: Guard<Store>,
    ledger: Ledger,
    tally: Arc<Mutex<Tally>>,
    stopped: watch::Receiver<bool>,
) {
    for n in 0.. {
        if *stopped.borrow() {
            return;
        }
        let call = refund(&format!("W{w}-{n}"), 100 + n, "1");
        let key = call.intent.key().unwrap().to_string();
        loop {
            let answer = guard.run(&call, &client(&ledger)).await;
            let now = Instant::now();
            let finished = {
                let mut t = tally.lock().unwrap();
                match answer {
                    Ok(outcome) => {
                        t.acked.push((key.clone(), outcome.result, now));
                        true
                    }
                    Err(GuardError::Store(e)) if e.is_unavailable() => {
                        t.cut_off.push((now, e.to_string()));
                        let stopping = *stopped.borrow();
                        if stopping {
                            t.pending.push(call.clone());
                        }
                        stopping
                    }
                    // A retry of a call cut off after its claim committed: the lease
                    // protects the key; it is finished after the load.
                    Err(GuardError::InFlight { .. }) => {
                        t.pending.push(call.clone());
                        true
                    }
                    Err(other) => {
                        t.unexpected.push(format!("{key}: {other:?}"));
                        t.pending.push(call.clone());
                        true
                    }
                }
            };
            if finished {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Finishes the load's unfinished intents once the database is back.
pub struct Finisher {
    pub store: Store,
    guard: Guard<Store>,
    clock: ManualClock,
    pub ledger: Ledger,
}

impl Finisher {
    /// Moves past every lease and retries each pending intent until it succeeds (the
    /// guard takes it over and reconciles with the provider); then checks the books.
    pub async fn settle_and_check(&self, tally: &Tally) {
        self.clock
            .advance(TimeDelta::seconds(31) + TimeDelta::from_std(DEADLINE).unwrap());
        for call in &tally.pending {
            let key = call.intent.key().unwrap().to_string();
            let started = Instant::now();
            loop {
                match self.guard.run(call, &client(&self.ledger)).await {
                    Ok(_) => break,
                    Err(GuardError::Store(e)) if e.is_unavailable() => {
                        assert!(started.elapsed() < Duration::from_secs(30), "{key}: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("finishing {key}: {e:?}"),
                }
            }
        }
        self.check(tally).await;
    }

    async fn check(&self, tally: &Tally) {
        assert!(tally.unexpected.is_empty(), "{:#?}", tally.unexpected);
        // Every success the guard answered is in the log, with the result it gave.
        for (key, result, _) in &tally.acked {
            let record = self.record(key).await;
            assert_eq!(record.status, Status::Done, "{key}");
            assert_eq!(record.result.as_ref(), Some(result), "{key}");
        }
        // One effect per intent, none for an intent nobody asked for.
        let intents = tally.acked.len() + tally.pending.len();
        let effects = self.ledger.effects();
        for (key, _, _) in &tally.acked {
            assert_eq!(self.ledger.effects_for(key), 1, "{key}");
        }
        for call in &tally.pending {
            let key = call.intent.key().unwrap().to_string();
            assert_eq!(self.ledger.effects_for(&key), 1, "{key}");
            assert_eq!(self.record(&key).await.status, Status::Done, "{key}");
        }
        assert_eq!(effects.len(), intents, "effects vs intents");
    }

    async fn record(&self, key: &str) -> idemwatch::guard::Record {
        self.store
            .record(&as_key(key))
            .await
            .unwrap_or_else(|e: StoreError| panic!("{key}: {e}"))
            .unwrap_or_else(|| panic!("{key}: acknowledged but not in the log"))
    }
}

/// The sum of every sample of a metric family in Prometheus text (0 when absent).
pub fn metric_sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
