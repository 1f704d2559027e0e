//! The values the guard derives from a tool call: the key (from the intent) and the
//! fingerprint (from the business arguments).

use crate::base::canonical::{CanonicalError, Members, canonical_json};
use crate::base::hash::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// What the caller meant to do, stable across every retry of that intent.
///
/// The key is derived from these five strings and nothing else: no attempt counter,
/// no clock, no random value. An orchestrator that persists them with the run
/// reproduces the key after a crash and resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub tenant: String,
    pub tool: String,
    pub workflow_id: String,
    pub step_id: String,
    pub intent_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is longer than {max} bytes")]
    TooLong { field: &'static str, max: usize },
    #[error("key must be 64 lowercase hex characters (SHA-256), got {0:?}")]
    MalformedKey(String),
    #[error("business arguments must be a JSON object")]
    ArgsNotObject,
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

const MAX_FIELD_BYTES: usize = 512;

impl Intent {
    pub(crate) fn validate(&self) -> Result<(), KeyError> {
        for (field, value) in [
            ("tenant", &self.tenant),
            ("tool", &self.tool),
            ("workflow_id", &self.workflow_id),
            ("step_id", &self.step_id),
            ("intent_id", &self.intent_id),
        ] {
            if value.is_empty() {
                return Err(KeyError::Empty { field });
            }
            if value.len() > MAX_FIELD_BYTES {
                return Err(KeyError::TooLong {
                    field,
                    max: MAX_FIELD_BYTES,
                });
            }
        }
        Ok(())
    }

    /// key = lowercase hex SHA-256 of the JCS form of
    /// `{"intent_id","step_id","tenant","tool","workflow_id"}`.
    pub fn key(&self) -> Result<IdempotencyKey, KeyError> {
        self.validate()?;
        Ok(IdempotencyKey(sha256_hex(self.key_material().as_bytes())))
    }

    /// The JCS form the key hashes, written member by member (the guard derives a key on
    /// each call).
    fn key_material(&self) -> String {
        let mut out = String::with_capacity(128);
        let mut intent = Members::open(&mut out);
        intent.string("intent_id", &self.intent_id);
        intent.string("step_id", &self.step_id);
        intent.string("tenant", &self.tenant);
        intent.string("tool", &self.tool);
        intent.string("workflow_id", &self.workflow_id);
        intent.close();
        out
    }
}

/// Lowercase hex SHA-256 of an intent. Construct with [`Intent::key`] or parse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let ok = text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(Self(text.to_string()))
        } else {
            Err(KeyError::MalformedKey(text.chars().take(80).collect()))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::parse(s)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        Self::parse(&s)
    }
}
impl From<IdempotencyKey> for String {
    fn from(k: IdempotencyKey) -> String {
        k.0
    }
}
impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The business arguments with the tool's free-text fields removed, in canonical
/// form, and their SHA-256. Free text ("reason") is what a model rephrases on a retry;
/// it must not turn a retry into a payload mismatch, and it is never sent to the
/// provider either.
#[derive(Debug, Clone, PartialEq)]
pub struct BusinessArgs {
    pub value: Value,
    pub canonical: String,
    pub fingerprint: Fingerprint,
}

impl BusinessArgs {
    /// Removes top-level `exclude` fields, canonicalises and hashes.
    pub fn new(args: &Value, exclude: &[impl AsRef<str>]) -> Result<Self, KeyError> {
        let Value::Object(map) = args else {
            return Err(KeyError::ArgsNotObject);
        };
        let kept: Map<String, Value> = map
            .iter()
            .filter(|(name, _)| !exclude.iter().any(|x| x.as_ref() == name.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let value = Value::Object(kept);
        let canonical = canonical_json(&value)?;
        let fingerprint = Fingerprint(sha256_hex(canonical.as_bytes()));
        Ok(Self {
            value,
            canonical,
            fingerprint,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint(pub String);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Monotonic per key. Every write after the claim names the token it holds; a
/// takeover increments it, so a worker that lost its lease cannot overwrite anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub i64);

impl FencingToken {
    /// The claim's token.
    pub const FIRST: FencingToken = FencingToken(1);

    /// The token a takeover or a resolution moves the key to.
    pub fn next(self) -> FencingToken {
        FencingToken(self.0 + 1)
    }
}

impl std::str::FromStr for FencingToken {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(FencingToken)
    }
}

/// A stored token as the store reads it (the column is a plain integer).
impl From<i64> for FencingToken {
    fn from(n: i64) -> FencingToken {
        FencingToken(n)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn intent() -> Intent {
        Intent {
            tenant: "acme".into(),
            tool: "issue_refund".into(),
            workflow_id: "run-7f3a".into(),
            step_id: "4".into(),
            intent_id: "refund:order-A-88214:ticket-5521".into(),
        }
    }

    #[test]
    fn the_key_is_the_sha256_of_the_canonical_intent() {
        let material = r#"{"intent_id":"refund:order-A-88214:ticket-5521","step_id":"4","tenant":"acme","tool":"issue_refund","workflow_id":"run-7f3a"}"#;
        assert_eq!(
            intent().key().unwrap().as_str(),
            sha256_hex(material.as_bytes())
        );
    }

    /// The member-by-member material is the JCS form of the intent as a JSON object,
    /// for text that needs escaping and non-ASCII too.
    #[test]
    fn the_key_material_is_the_intents_jcs_form() {
        let odd = [
            "acme \"q\"",
            "tab\there\n",
            "ünï€😀",
            "back\\slash",
            "\u{1}",
        ];
        for (i, text) in odd.iter().enumerate() {
            let mut intent = intent();
            match i % 5 {
                0 => intent.tenant = text.to_string(),
                1 => intent.tool = text.to_string(),
                2 => intent.workflow_id = text.to_string(),
                3 => intent.step_id = text.to_string(),
                _ => intent.intent_id = text.to_string(),
            }
            let value = serde_json::to_value(&intent).unwrap();
            assert_eq!(intent.key_material(), canonical_json(&value).unwrap());
        }
    }

    #[test]
    fn the_same_intent_always_gives_the_same_key() {
        assert_eq!(intent().key().unwrap(), intent().key().unwrap());
        let mut other = intent();
        other.step_id = "5".into();
        assert_ne!(intent().key().unwrap(), other.key().unwrap());
    }

    #[test]
    fn an_empty_intent_field_is_refused_by_name() {
        let mut i = intent();
        i.workflow_id.clear();
        assert_eq!(
            i.key().unwrap_err().to_string(),
            "workflow_id must not be empty"
        );
    }

    #[test]
    fn a_key_must_be_64_lowercase_hex_characters() {
        assert!(IdempotencyKey::parse(&"a".repeat(64)).is_ok());
        assert!(IdempotencyKey::parse(&"A".repeat(64)).is_err());
        assert!(IdempotencyKey::parse("abc").is_err());
    }

    #[test]
    fn free_text_fields_do_not_change_the_fingerprint() {
        let a = BusinessArgs::new(
            &json!({"order":"A-88214","amount_p":4500,"reason":"late"}),
            &["reason"],
        )
        .unwrap();
        let b = BusinessArgs::new(
            &json!({"amount_p":4500.0,"reason":"The parcel was late","order":"A-88214"}),
            &["reason"],
        )
        .unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_eq!(a.canonical, r#"{"amount_p":4500,"order":"A-88214"}"#);
        let c =
            BusinessArgs::new(&json!({"order":"A-88214","amount_p":4000}), &["reason"]).unwrap();
        assert_ne!(a.fingerprint, c.fingerprint);
    }

    #[test]
    fn non_ascii_text_is_hashed_as_utf8() {
        let a = BusinessArgs::new(&json!({"name":"Zoë"}), &[] as &[&str]).unwrap();
        assert_eq!(a.fingerprint.0, sha256_hex("{\"name\":\"Zoë\"}".as_bytes()));
    }

    #[test]
    fn business_args_must_be_an_object() {
        assert_eq!(
            BusinessArgs::new(&json!([1]), &[] as &[&str]).unwrap_err(),
            KeyError::ArgsNotObject
        );
    }
}
