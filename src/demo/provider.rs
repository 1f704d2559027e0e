//! A simulated payments provider that behaves the way real ones do: the first request
//! with an idempotency key performs the effect, a later request with the same key gets
//! the stored response, and the provider forgets keys after its retention. Its
//! lookup-by-key endpoint (the guard's reconciliation query) only sees keys it still
//! remembers. It counts every real effect, which is how the demo proves that nothing
//! was done twice.

use super::latency::LatencyModel;
use crate::guard::{ErrorClass, IdempotencyKey, Operation};
use chrono::TimeDelta;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One effect the provider actually performed: money moved.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub key: String,
    pub tool: String,
    pub resource_id: String,
    pub order: Option<String>,
    pub amount_p: Option<i64>,
    /// When the provider performed it (wall-clock time, as the database's).
    pub performed_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Default)]
struct Books {
    effects: Vec<Effect>,
    /// Effects per idempotency key (= per intent): more than one is a duplicate.
    per_key: HashMap<String, u32>,
    /// Keys the provider still remembers: key → (index into effects, first seen).
    remembered: HashMap<String, (usize, Instant)>,
    duplicates: u64,
}

/// The provider's shared state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Provider {
    books: Arc<Mutex<Books>>,
    incident: Arc<AtomicBool>,
    retention: Duration,
    /// Real seconds per story second (1 / speed).
    scale: f64,
    normal: LatencyModel,
    degraded: LatencyModel,
}

impl Provider {
    /// `retention` is real time; latencies are drawn in story time and divided by `speed`.
    pub fn new(retention: Duration, speed: f64) -> Self {
        Self {
            books: Arc::default(),
            incident: Arc::default(),
            retention,
            scale: 1.0 / speed,
            normal: LatencyModel::NORMAL,
            degraded: LatencyModel::INCIDENT,
        }
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // The books are plain data updated in one step; a panic elsewhere cannot leave
        // them half-written, so a poisoned lock is still safe to read.
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_incident(&self, on: bool) {
        self.incident.store(on, Ordering::Relaxed);
    }

    pub fn incident(&self) -> bool {
        self.incident.load(Ordering::Relaxed)
    }

    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The latency model in force now.
    pub fn latency(&self) -> LatencyModel {
        if self.incident() {
            self.degraded
        } else {
            self.normal
        }
    }

    /// One response time, in real time.
    fn sample_latency(&self) -> Duration {
        self.real(self.latency().sample())
    }

    /// Story time to real time.
    pub fn real(&self, story: Duration) -> Duration {
        story.mul_f64(self.scale)
    }

    pub(crate) fn effect_count(&self) -> u64 {
        self.books().effects.len() as u64
    }

    /// Effects beyond the first for any one key: must stay 0.
    pub fn duplicates(&self) -> u64 {
        self.books().duplicates
    }

    pub fn effects(&self) -> Vec<Effect> {
        self.books().effects.clone()
    }

    pub fn effects_for_key(&self, key: &str) -> u32 {
        self.books().per_key.get(key).copied().unwrap_or(0)
    }

    /// The effects tagged with `key`, as the provider's dashboard finds them: every one
    /// it performed, also after it stopped deduplicating the key (its retention), which
    /// is what a person checks before resolving an escalated key.
    pub(crate) fn effects_tagged(&self, key: &str) -> Vec<Effect> {
        let books = self.books();
        books
            .effects
            .iter()
            .filter(|e| e.key == key)
            .cloned()
            .collect()
    }

    pub fn effects_for_order(&self, order: &str) -> Vec<Effect> {
        let books = self.books();
        books
            .effects
            .iter()
            .filter(|e| e.order.as_deref() == Some(order))
            .cloned()
            .collect()
    }

    /// Keys the provider still deduplicates. Expired ones are dropped here, so the
    /// table stays as small as the retention window.
    fn remembered(&self, books: &mut Books, key: &str) -> Option<usize> {
        let now = Instant::now();
        let retention = self.retention;
        match books.remembered.get(key) {
            Some((i, seen)) if now.duration_since(*seen) < retention => Some(*i),
            Some(_) => {
                books.remembered.remove(key);
                None
            }
            None => None,
        }
    }

    /// Performs the effect unless the key is remembered (never, for [`RECEIPTS`]: that
    /// provider ignores keys); returns the response body.
    fn perform(&self, key: &str, tool: &str, args: &Value) -> Value {
        let mut books = self.books();
        if tool != RECEIPTS
            && let Some(i) = self.remembered(&mut books, key)
        {
            return response(&books.effects[i]);
        }
        let prefix = match tool {
            "send_voucher" => "vc",
            RECEIPTS => "em",
            _ => "rf",
        };
        let effect = Effect {
            key: key.to_string(),
            tool: tool.to_string(),
            resource_id: format!("{prefix}_{:06}", books.effects.len() + 1),
            order: args.get("order").and_then(Value::as_str).map(String::from),
            amount_p: args.get("amount_p").and_then(Value::as_i64),
            performed_at: chrono::Utc::now(),
        };
        let body = response(&effect);
        books.effects.push(effect);
        let i = books.effects.len() - 1;
        let count = books.per_key.entry(key.to_string()).or_default();
        *count += 1;
        if *count > 1 {
            books.duplicates += 1;
            tracing::error!(
                key,
                "DUPLICATE EFFECT: the provider performed this key twice"
            );
        }
        books
            .remembered
            .insert(key.to_string(), (i, Instant::now()));
        if books.remembered.len() > 4096 && books.effects.len().is_multiple_of(1024) {
            let retention = self.retention;
            books
                .remembered
                .retain(|_, (_, seen)| seen.elapsed() < retention);
        }
        body
    }

    fn lookup(&self, key: &str) -> Option<Value> {
        let mut books = self.books();
        self.remembered(&mut books, key)
            .or_else(|| {
                // Receipts are found by the key each message is tagged with, however old.
                books
                    .effects
                    .iter()
                    .rposition(|e| e.tool == RECEIPTS && e.key == key)
            })
            .map(|i| response(&books.effects[i]))
    }
}

fn response(e: &Effect) -> Value {
    json!({ "id": e.resource_id, "amount_p": e.amount_p, "status": "succeeded" })
}

/// What goes wrong on one delivery's first provider call.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Nothing: the provider answers after a latency drawn from its current model.
    None,
    /// The provider answers after this much story time.
    Latency(Duration),
    /// The effect happens, then the connection drops: ambiguous.
    DropResponse,
    /// A 503 before anything happened: ambiguous to the caller all the same.
    Unavailable,
    /// The card is declined: definitive, nothing happened.
    Decline,
    /// The effect happens, then the worker process dies before it hears back.
    CrashAfterEffect,
}

#[derive(Debug)]
pub struct ProviderError {
    pub message: &'static str,
    pub definitive: bool,
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

/// The demo's tool whose provider (an email API) does not deduplicate by key.
pub(crate) const RECEIPTS: &str = "send_receipt";

/// One worker's connection to the provider for one tool, with the fault its first
/// call meets. Later calls (a resend after reconciliation) behave normally.
#[derive(Debug, Clone)]
pub struct ProviderClient {
    provider: Provider,
    tool: String,
    fault: Arc<Mutex<Fault>>,
    call_timeout: Duration,
    /// Notified when a `CrashAfterEffect` call has performed its effect.
    pub crashed: Arc<Notify>,
}

impl ProviderClient {
    pub fn new(provider: &Provider, tool: &str, call_timeout: Duration, fault: Fault) -> Self {
        Self {
            provider: provider.clone(),
            tool: tool.to_string(),
            fault: Arc::new(Mutex::new(fault)),
            call_timeout,
            crashed: Arc::default(),
        }
    }

    fn take_fault(&self) -> Fault {
        let mut fault = self.fault.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *fault, Fault::None)
    }
}

impl Operation for ProviderClient {
    type Error = ProviderError;

    fn free_text_fields(&self) -> &[&str] {
        &["reason"]
    }

    fn key_retention(&self) -> TimeDelta {
        TimeDelta::from_std(self.provider.retention).unwrap_or(TimeDelta::MAX)
    }

    fn provider_dedupes(&self) -> bool {
        self.tool != RECEIPTS
    }

    fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The story's 24 h, compressed as the provider's retention is: a genuine repeat
    /// "weeks later" comes after it (docs/DEMO.md).
    fn duplicate_window(&self) -> TimeDelta {
        self.key_retention()
    }

    fn classify(&self, error: &ProviderError) -> ErrorClass {
        if error.definitive {
            ErrorClass::Definitive
        } else {
            ErrorClass::Ambiguous
        }
    }

    async fn execute(&self, key: &IdempotencyKey, args: &Value) -> Result<Value, ProviderError> {
        let p = &self.provider;
        match self.take_fault() {
            Fault::None => {
                // The provider books the refund first; the answer takes its time.
                let body = p.perform(key.as_str(), &self.tool, args);
                tokio::time::sleep(p.sample_latency()).await;
                Ok(body)
            }
            Fault::Latency(story) => {
                let body = p.perform(key.as_str(), &self.tool, args);
                tokio::time::sleep(p.real(story)).await;
                Ok(body)
            }
            Fault::DropResponse => {
                p.perform(key.as_str(), &self.tool, args);
                tokio::time::sleep(p.sample_latency() / 2).await;
                Err(ProviderError {
                    message: "connection reset by peer",
                    definitive: false,
                })
            }
            Fault::Unavailable => {
                tokio::time::sleep(p.sample_latency() / 4).await;
                Err(ProviderError {
                    message: "503 Service Unavailable",
                    definitive: false,
                })
            }
            Fault::Decline => {
                tokio::time::sleep(p.sample_latency()).await;
                Err(ProviderError {
                    message: "402 card_declined",
                    definitive: true,
                })
            }
            Fault::CrashAfterEffect => {
                p.perform(key.as_str(), &self.tool, args);
                self.crashed.notify_one();
                std::future::pending().await
            }
        }
    }

    async fn find_by_key(&self, key: &IdempotencyKey) -> Result<Option<Value>, ProviderError> {
        let p = &self.provider;
        tokio::time::sleep(p.sample_latency() / 4).await;
        Ok(p.lookup(key.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> IdempotencyKey {
        IdempotencyKey::parse(&format!("{n:02x}").repeat(32)).unwrap()
    }

    #[tokio::test]
    async fn a_remembered_key_is_answered_from_the_books_not_performed_again() {
        let p = Provider::new(Duration::from_secs(60), 1000.0);
        let client = ProviderClient::new(&p, "issue_refund", Duration::from_secs(1), Fault::None);
        let args = json!({"order": "A-1", "amount_p": 4500});
        let a = client.execute(&key(1), &args).await.unwrap();
        let b = client.execute(&key(1), &args).await.unwrap();
        assert_eq!(a, b);
        assert_eq!((p.effect_count(), p.duplicates()), (1, 0));
        assert_eq!(client.find_by_key(&key(1)).await.unwrap(), Some(a));
        assert_eq!(client.find_by_key(&key(2)).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_forgotten_key_is_performed_again_and_counted_as_a_duplicate() {
        let p = Provider::new(Duration::from_millis(20), 1000.0);
        let client = ProviderClient::new(&p, "issue_refund", Duration::from_secs(1), Fault::None);
        let args = json!({"order": "A-1", "amount_p": 4500});
        client.execute(&key(1), &args).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(client.find_by_key(&key(1)).await.unwrap(), None);
        client.execute(&key(1), &args).await.unwrap();
        assert_eq!((p.effect_count(), p.duplicates()), (2, 1));
        assert_eq!(p.effects_for_order("A-1").len(), 2);
    }

    #[tokio::test]
    async fn only_the_first_call_meets_the_fault() {
        let p = Provider::new(Duration::from_secs(60), 1000.0);
        let client =
            ProviderClient::new(&p, "issue_refund", Duration::from_secs(1), Fault::Decline);
        let args = json!({"order": "A-1", "amount_p": 4500});
        let err = client.execute(&key(1), &args).await.unwrap_err();
        assert_eq!(client.classify(&err), ErrorClass::Definitive);
        assert_eq!(p.effect_count(), 0);
        client.execute(&key(1), &args).await.unwrap();
        assert_eq!(p.effect_count(), 1);
    }
}
