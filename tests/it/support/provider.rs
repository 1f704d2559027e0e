//! A fake payments provider that honours idempotency keys the way real ones do: the
//! first request with a key performs the refund, later requests with that key get the
//! stored response, and the provider forgets keys after its retention. Each delivery
//! gets its own client with a script of faults; all clients share one ledger, which
//! counts the real effects.

use chrono::{DateTime, TimeDelta, Utc};
use idemwatch::guard::{Clock, ErrorClass, IdempotencyKey, ManualClock, Operation};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One refund the provider actually performed.
#[derive(Debug, Clone)]
pub struct Effect {
    pub key: String,
    pub refund_id: String,
    pub args: Value,
}

#[derive(Debug, Default)]
struct LedgerState {
    effects: Vec<Effect>,
    /// key → (index into effects, when the provider first saw the key)
    keys: HashMap<String, (usize, DateTime<Utc>)>,
}

/// The provider's books, shared by every client.
#[derive(Debug, Clone)]
pub struct Ledger {
    state: Arc<Mutex<LedgerState>>,
    clock: ManualClock,
    pub retention: TimeDelta,
}

impl Ledger {
    pub fn new(clock: ManualClock, retention: TimeDelta) -> Self {
        Self {
            state: Arc::default(),
            clock,
            retention,
        }
    }

    pub fn effects(&self) -> Vec<Effect> {
        self.state.lock().unwrap().effects.clone()
    }

    pub fn effects_for(&self, key: &str) -> usize {
        self.effects().iter().filter(|e| e.key == key).count()
    }

    /// Whether a refund tagged with `key` exists, whatever the provider remembers: what
    /// a person sees in the provider's dashboard.
    pub fn dashboard_lookup(&self, key: &str) -> Option<Effect> {
        self.effects().into_iter().find(|e| e.key == key)
    }

    fn remembered(&self, state: &LedgerState, key: &str) -> Option<usize> {
        let now = self.clock.now();
        state
            .keys
            .get(key)
            .filter(|(_, seen)| now < *seen + self.retention)
            .map(|(i, _)| *i)
    }

    /// Performs the refund unless the key is remembered; returns the response body.
    fn perform(&self, key: &str, args: &Value) -> Value {
        let mut state = self.state.lock().unwrap();
        if let Some(i) = self.remembered(&state, key) {
            return response(&state.effects[i]);
        }
        let effect = Effect {
            key: key.to_string(),
            refund_id: format!("rf_{}", state.effects.len() + 1),
            args: args.clone(),
        };
        state.effects.push(effect.clone());
        let i = state.effects.len() - 1;
        let now = self.clock.now();
        state.keys.insert(key.to_string(), (i, now));
        response(&effect)
    }

    fn lookup(&self, key: &str) -> Option<Value> {
        let state = self.state.lock().unwrap();
        self.remembered(&state, key)
            .map(|i| response(&state.effects[i]))
    }
}

fn response(e: &Effect) -> Value {
    json!({ "refund_id": e.refund_id, "amount_p": e.args.get("amount_p") })
}

/// What one provider call does.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Performs the effect and answers after `delay`.
    Ok { delay: Duration },
    /// Performs the effect, then the connection drops: an ambiguous error.
    DropResponse,
    /// A 503 before anything happened: ambiguous to the caller.
    Unavailable,
    /// A definitive refusal: nothing happened.
    Decline,
    /// Performs the effect, then the worker process dies: the call never returns
    /// and `crashed` is notified so the test can kill the task.
    CrashAfterEffect,
    /// The lookup endpoint fails.
    LookupFails,
    /// The lookup waits for `gate` before answering.
    LookupGated,
}

#[derive(Debug)]
pub struct ProviderError {
    pub message: String,
    pub definitive: bool,
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One delivery's view of the provider: its own fault script, the shared ledger.
#[derive(Debug, Clone)]
pub struct Client {
    pub ledger: Ledger,
    script: Arc<Mutex<VecDeque<Fault>>>,
    lookups: Arc<Mutex<VecDeque<Fault>>>,
    pub crashed: Arc<Notify>,
    pub gate: Arc<Notify>,
    pub call_timeout: Duration,
}

impl Client {
    pub fn new(
        ledger: &Ledger,
        call_timeout: Duration,
        script: impl IntoIterator<Item = Fault>,
    ) -> Self {
        // Lookup faults apply to successive `find_by_key` calls, the rest to `execute`.
        let (lookups, executes): (VecDeque<Fault>, VecDeque<Fault>) = script
            .into_iter()
            .partition(|f| matches!(f, Fault::LookupFails | Fault::LookupGated));
        Self {
            ledger: ledger.clone(),
            script: Arc::new(Mutex::new(executes)),
            lookups: Arc::new(Mutex::new(lookups)),
            crashed: Arc::default(),
            gate: Arc::default(),
            call_timeout,
        }
    }

    fn next(&self) -> Fault {
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::Ok {
                delay: Duration::ZERO,
            })
    }

    fn next_lookup(&self) -> Option<Fault> {
        self.lookups.lock().unwrap().pop_front()
    }
}

impl Operation for Client {
    type Error = ProviderError;

    fn free_text_fields(&self) -> &[&str] {
        &["reason"]
    }
    fn key_retention(&self) -> TimeDelta {
        self.ledger.retention
    }
    fn call_timeout(&self) -> Duration {
        self.call_timeout
    }
    fn classify(&self, error: &ProviderError) -> ErrorClass {
        if error.definitive {
            ErrorClass::Definitive
        } else {
            ErrorClass::Ambiguous
        }
    }

    async fn execute(&self, key: &IdempotencyKey, args: &Value) -> Result<Value, ProviderError> {
        assert!(
            args.get("reason").is_none(),
            "free text must never reach the provider"
        );
        match self.next() {
            Fault::Ok { delay } => {
                let body = self.ledger.perform(key.as_str(), args);
                tokio::time::sleep(delay).await;
                Ok(body)
            }
            Fault::DropResponse => {
                self.ledger.perform(key.as_str(), args);
                Err(ProviderError {
                    message: "connection reset by peer".into(),
                    definitive: false,
                })
            }
            Fault::Unavailable => Err(ProviderError {
                message: "503 Service Unavailable".into(),
                definitive: false,
            }),
            Fault::Decline => Err(ProviderError {
                message: "402 card_declined".into(),
                definitive: true,
            }),
            Fault::CrashAfterEffect => {
                self.ledger.perform(key.as_str(), args);
                self.crashed.notify_one();
                std::future::pending().await
            }
            Fault::LookupFails | Fault::LookupGated => {
                panic!("lookup fault scripted for an execute")
            }
        }
    }

    async fn find_by_key(&self, key: &IdempotencyKey) -> Result<Option<Value>, ProviderError> {
        match self.next_lookup() {
            Some(Fault::LookupFails) => Err(ProviderError {
                message: "lookup 500".into(),
                definitive: false,
            }),
            Some(Fault::LookupGated) => {
                self.gate.notified().await;
                Ok(self.ledger.lookup(key.as_str()))
            }
            _ => Ok(self.ledger.lookup(key.as_str())),
        }
    }
}
