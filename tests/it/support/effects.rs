//! A provider without idempotency, for tests that drive the guard over HTTP: every send
//! is an effect, tagged with the key, so "exactly one effect per intent" is a count.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Effects {
    by_key: Mutex<HashMap<String, Vec<String>>>,
}

impl Effects {
    /// Performs the effect for `key` (again, if it was performed before).
    pub fn send(&self, key: &str) -> Value {
        let mut effects = self.by_key.lock().unwrap();
        let ids = effects.entry(key.to_string()).or_default();
        ids.push(format!("rf_{}_{}", &key[..8], ids.len() + 1));
        json!({ "refund_id": ids.last().unwrap() })
    }

    /// The reconciliation lookup: the first effect tagged with `key`.
    pub fn lookup(&self, key: &str) -> Option<Value> {
        let effects = self.by_key.lock().unwrap();
        effects
            .get(key)
            .and_then(|ids| ids.first())
            .map(|id| json!({ "refund_id": id }))
    }

    /// Every effect so far, by key.
    pub fn snapshot(&self) -> HashMap<String, Vec<String>> {
        self.by_key.lock().unwrap().clone()
    }
}
