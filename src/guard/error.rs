use chrono::{DateTime, Utc};
use thiserror::Error;

use super::key::{FencingToken, KeyError};
use super::port::StoreError;
use super::status::Status;

/// Everything the guard can answer other than a result. Each variant says what the
/// caller should do; the web layer maps them to statuses in one place.
#[derive(Debug, Error)]
pub enum GuardError {
    /// The call itself is malformed (an empty intent field, arguments that are not an
    /// object, a number that is not exact). HTTP 400.
    #[error("invalid tool call: {0}")]
    InvalidCall(#[from] KeyError),

    #[error("invalid {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },

    /// Same key, other business arguments: a client bug or an attack. Nothing was
    /// executed and the stored record is unchanged. HTTP 422. A genuinely new action
    /// needs a new intent id, unless the call reached `key` through its tool's natural
    /// key (`intent_key` is then the caller's own key): that action was already
    /// requested with other values, and a new intent id meets the same refusal.
    /// `differing_fields`: the top-level argument names whose values differ, sorted.
    /// `stored_status`: the key's status; UNKNOWN with a `lookup_token` when the first
    /// call's outcome is unknown: the key was escalated to a person, and this caller
    /// may report a lookup by key under the token (never a resend).
    #[error("{}", mismatch_text(key, intent_key.as_deref(), differing_fields, stored_fingerprint, fingerprint, lookup_token.is_some()))]
    PayloadMismatch {
        key: String,
        // Boxed: the error stays small (clippy's `result_large_err`).
        stored_fingerprint: Box<str>,
        fingerprint: Box<str>,
        differing_fields: Vec<String>,
        intent_key: Option<Box<str>>,
        stored_status: Status,
        lookup_token: Option<FencingToken>,
    },

    /// The original is still running under a live lease. HTTP 409: retry later,
    /// never wait on it.
    #[error("key {key} is in flight until {lease_until}; retry later with the same key")]
    InFlight {
        key: String,
        lease_until: DateTime<Utc>,
    },

    /// The provider refused definitively; stored as FAILED and returned on every retry.
    #[error("key {key} failed: {error}")]
    OperationFailed { key: String, error: String },

    /// Nobody knows whether the effect happened (timeout, reset, 5xx, panic). Stored
    /// as UNKNOWN; a retry with the same key reconciles with the provider first.
    #[error("outcome of key {key} is unknown ({reason}); retry with the same key to reconcile")]
    OutcomeUnknown { key: String, reason: String },

    /// The provider has forgotten the key and has no record of the effect: a resend
    /// could pay twice. A person must check and resolve the key.
    #[error(
        "key {key} needs human review: a resend is no longer safe (the provider forgets the key at {provider_retention_until}) and the provider shows no effect"
    )]
    NeedsHumanReview {
        key: String,
        provider_retention_until: DateTime<Utc>,
    },

    /// This worker's fencing token is stale: someone took the key over. Its write was
    /// rejected and recorded; the new owner decides.
    #[error(
        "key {key}: fencing token {token} is stale (current {current}); the write was rejected"
    )]
    LeaseLost {
        key: String,
        token: FencingToken,
        current: FencingToken,
    },

    #[error("key {0} not found")]
    NotFound(String),

    /// Someone else changed the key since the caller looked at it (a resolver's
    /// expected token no longer matches). HTTP 409.
    #[error(
        "key {key} changed since you looked at it: it is now {status} with fencing token {token}"
    )]
    Conflict {
        key: String,
        status: Status,
        token: FencingToken,
    },

    /// The key is not in a state this operation applies to. HTTP 422.
    #[error("key {key} cannot be resolved: {why}")]
    NotResolvable {
        key: String,
        status: Status,
        why: String,
    },

    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The payload-mismatch message, with the advice that fits how the call reached the key.
fn mismatch_text(
    key: &str,
    intent_key: Option<&str>,
    differing_fields: &[String],
    stored_fingerprint: &str,
    fingerprint: &str,
    unknown: bool,
) -> String {
    let differing = differing_fields.join(", ");
    if unknown {
        return format!(
            "key {key} was first used with other business arguments (differing: {differing}; stored fingerprint {stored_fingerprint}, this call {fingerprint}) and the outcome of that call is unknown: an earlier attempt with other values may or may not have happened; it is being checked (a lookup by key may settle it; otherwise a person decides). Nothing was sent; do not resend"
        );
    }
    match intent_key {
        None => format!(
            "key {key} was first used with other business arguments (differing: {differing}; stored fingerprint {stored_fingerprint}, this call {fingerprint}); use a new intent id for a new action"
        ),
        Some(own) => format!(
            "this call's natural key is held by key {key}, which was requested with other business arguments (differing: {differing}; stored fingerprint {stored_fingerprint}, this call {fingerprint}); the action was already requested with other values, so a new intent id is refused the same way: check with a person which values are right (this call's own key: {own})"
        ),
    }
}
