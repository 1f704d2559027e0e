//! The call's types: what a caller hands the guard ([`ToolCall`]), what admission
//! decided ([`Admitted`]), how the provider call ended ([`CallOutcome`]), what a
//! lookup led to ([`Reconciled`]) and what a whole guarded call returns
//! ([`Outcome`]). The engine and its steps both speak them, so they live below both.

use super::decide::Admission;
use super::error::GuardError;
use super::key::{BusinessArgs, IdempotencyKey, Intent};
use super::record::Record;
use serde_json::Value;

/// One call of a tool, as the orchestrator recorded the intent.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub intent: Intent,
    /// What support staff search by, e.g. `order:A-88214`.
    pub business_ref: Option<String>,
    /// All arguments, free text included; the guard strips the tool's free-text fields.
    pub args: Value,
    /// Who is calling: a worker id.
    pub actor: String,
}

/// A successful call. `replayed` is true when the result comes from an earlier
/// attempt (a stored DONE, or an effect found at the provider by reconciliation), so
/// an agent that never sees HTTP headers still learns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub key: IdempotencyKey,
    pub result: Value,
    pub replayed: bool,
}

/// What admission decided, with the key and the business arguments it derived.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The key the caller acts on: its intent's key, or the key holding the call's
    /// natural key (then `intent_key` is the caller's own).
    pub key: IdempotencyKey,
    /// The caller's intent key, when its natural key led to another key.
    pub intent_key: Option<IdempotencyKey>,
    /// The arguments without free text: what the fingerprint covers and what is sent.
    pub args: BusinessArgs,
    pub admission: Admission,
}

impl Admitted {
    /// In flight and payload mismatch refuse every caller alike: as errors. What is
    /// left is for the caller to act on.
    pub fn refuse(self) -> Result<Admitted, GuardError> {
        match self.admission {
            Admission::InFlight { lease_until } => Err(GuardError::InFlight {
                key: self.key.to_string(),
                lease_until,
            }),
            Admission::Mismatch {
                stored_fingerprint,
                differing_fields,
                stored_status,
                lookup_token,
            } => Err(GuardError::PayloadMismatch {
                key: self.key.to_string(),
                stored_fingerprint: stored_fingerprint.into(),
                fingerprint: self.args.fingerprint.0.into(),
                differing_fields,
                intent_key: self.intent_key.map(|k| k.as_str().into()),
                stored_status,
                lookup_token,
            }),
            _ => Ok(self),
        }
    }
}

/// How a provider call ended, as its worker reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The provider answered: the effect happened.
    Done { result: Value },
    /// The provider refused definitively (a decline, a 400/422): nothing happened.
    Failed { error: String },
    /// Nobody knows (timeout, reset, 5xx, crash): why.
    Unknown { reason: String },
}

/// What a reported lookup led to (a forgotten key with no effect is
/// [`GuardError::NeedsHumanReview`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// The provider had the effect: the key is DONE with it, a replay.
    Found { result: Value },
    /// Not found and the provider still remembers the key (or a person released it):
    /// `resent` is recorded; call the provider again with the same key and token and
    /// settle. `record` is the key as written.
    Resend { record: Box<Record> },
    /// The lookup failed: the key is UNKNOWN again; a later retry reconciles.
    Unknown { reason: String },
}
