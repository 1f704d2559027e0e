//! The record's state, bound into the chain: every sealed attempt row carries, in
//! `detail.state`, digests of what the record says after that row (status,
//! fingerprint, business arguments and ref, result, error). The newest row is the
//! record's head (`log_seq`, `log_hash`), so a record edited without a new row no
//! longer matches its head's `state`, and the head's hash covers `state`.
//!
//! Rows written before this binding existed have no `state`: they are "not bound",
//! reported as such and never as a break.

use super::record::Record;
use super::status::Status;
use crate::base::canonical::canonical_json;
use crate::base::hash::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The member of `detail` that holds the binding.
pub(crate) const STATE_MEMBER: &str = "state";

/// Digests of a record's state. Texts and JSON values are hashed (lowercase hex
/// SHA-256 of the UTF-8 text, or of the JCS form of the value); `None` is "absent".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateBinding {
    pub status: String,
    pub fingerprint: String,
    pub business_args_sha256: String,
    pub business_ref_sha256: Option<String>,
    pub result_sha256: Option<String>,
    pub error_sha256: Option<String>,
}

/// The record columns a binding is compared with (a record, or an export row's context).
#[derive(Debug, Clone, Copy)]
pub struct RecordState<'a> {
    pub status: Status,
    pub fingerprint: &'a str,
    pub business_args: &'a Value,
    pub business_ref: Option<&'a str>,
    pub result: Option<&'a Value>,
    pub error: Option<&'a str>,
}

/// One column whose stored value is not the one the chain recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMismatch {
    pub column: &'static str,
    pub bound: String,
    pub stored: String,
}

/// SHA-256 of a JSON value's JCS form (its plain text if it is not canonicalisable,
/// which then never matches what the guard bound).
pub(crate) fn value_sha256(value: &Value) -> String {
    let text = canonical_json(value).unwrap_or_else(|_| value.to_string());
    sha256_hex(text.as_bytes())
}

fn text_sha256(text: &str) -> String {
    sha256_hex(text.as_bytes())
}

impl StateBinding {
    pub fn of(state: RecordState<'_>) -> Self {
        StateBinding {
            status: state.status.as_str().to_string(),
            fingerprint: state.fingerprint.to_string(),
            business_args_sha256: value_sha256(state.business_args),
            business_ref_sha256: state.business_ref.map(text_sha256),
            result_sha256: state.result.map(value_sha256),
            error_sha256: state.error.map(text_sha256),
        }
    }

    /// The binding a row's detail carries, if it was written with one.
    pub(crate) fn from_detail(detail: &Value) -> Option<Result<Self, String>> {
        let state = detail.get(STATE_MEMBER)?;
        Some(serde_json::from_value(state.clone()).map_err(|e| e.to_string()))
    }

    /// The columns of `state` that differ from this binding.
    pub fn mismatches(&self, state: RecordState<'_>) -> Vec<StateMismatch> {
        let now = StateBinding::of(state);
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        let pairs = [
            ("status", self.status.clone(), now.status),
            ("fingerprint", self.fingerprint.clone(), now.fingerprint),
            (
                "business_args",
                self.business_args_sha256.clone(),
                now.business_args_sha256,
            ),
            (
                "business_ref",
                show(&self.business_ref_sha256),
                show(&now.business_ref_sha256),
            ),
            (
                "result",
                show(&self.result_sha256),
                show(&now.result_sha256),
            ),
            ("error", show(&self.error_sha256), show(&now.error_sha256)),
        ];
        pairs
            .into_iter()
            .filter(|(_, bound, stored)| bound != stored)
            .map(|(column, bound, stored)| StateMismatch {
                column,
                bound,
                stored,
            })
            .collect()
    }
}

impl Record {
    pub fn state(&self) -> RecordState<'_> {
        RecordState {
            status: self.status,
            fingerprint: &self.fingerprint,
            business_args: &self.business_args,
            business_ref: self.business_ref.as_deref(),
            result: self.result.as_ref(),
            error: self.error.as_deref(),
        }
    }
}

/// `detail` with the record's state bound into it. A detail that is not an object
/// (no writer makes one) is wrapped so the binding is never lost.
pub(crate) fn bind_state(detail: Value, record: &Record) -> Value {
    let binding =
        serde_json::to_value(StateBinding::of(record.state())).expect("a binding serialises");
    let mut map = match detail {
        Value::Object(map) => map,
        other => {
            let mut map = serde_json::Map::new();
            map.insert("value".into(), other);
            map
        }
    };
    map.insert(STATE_MEMBER.into(), binding);
    Value::Object(map)
}

/// Whether `fingerprint` is the guard's fingerprint of `business_args` (stored
/// already stripped of free text, so the hash of their JCS form).
pub(crate) fn fingerprint_matches(fingerprint: &str, business_args: &Value) -> bool {
    value_sha256(business_args) == fingerprint
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(result: &Value) -> RecordState<'_> {
        RecordState {
            status: Status::Done,
            fingerprint: "f",
            business_args: &Value::Null,
            business_ref: Some("order:A-1"),
            result: Some(result),
            error: None,
        }
    }

    #[test]
    fn a_changed_result_is_named_by_its_column() {
        let paid = json!({"amount": 4500});
        let binding = StateBinding::of(state(&paid));
        assert!(binding.mismatches(state(&paid)).is_empty());
        let edited = json!({"amount": 1});
        let found = binding.mismatches(state(&edited));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].column, "result");
    }

    #[test]
    fn a_detail_without_state_is_not_bound() {
        assert!(StateBinding::from_detail(&json!({"reason": "x"})).is_none());
        let bound = bind_state(
            json!({"reason": "x"}),
            &crate::guard::record::tests::record(),
        );
        assert_eq!(bound["reason"], "x");
        assert!(StateBinding::from_detail(&bound).unwrap().is_ok());
    }

    #[test]
    fn the_fingerprint_is_the_hash_of_the_stored_arguments() {
        let args =
            crate::guard::BusinessArgs::new(&json!({"amount_p": 4500, "note": "x"}), &["note"])
                .unwrap();
        assert!(fingerprint_matches(&args.fingerprint.0, &args.value));
        assert!(!fingerprint_matches(
            &args.fingerprint.0,
            &json!({"amount_p": 1})
        ));
    }
}
