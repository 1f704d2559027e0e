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

    /// The reconcile request of `worker` for the key of `decision` (an admit's
    /// `reconcile` decision), after looking the key up here.
    pub fn reconcile_request(&self, decision: &Value, worker: &str) -> Value {
        let key = decision["key"].as_str().expect("a key");
        let mut body = json!({
            "key": key,
            "fencing_token": decision["fencing_token"],
            "worker": worker,
            "lookup": "not_found",
        });
        if let Some(found) = self.lookup(key) {
            body["lookup"] = json!("found");
            body["result"] = found;
        }
        body
    }

    /// Every effect so far, by key.
    pub fn snapshot(&self) -> HashMap<String, Vec<String>> {
        self.by_key.lock().unwrap().clone()
    }
}
