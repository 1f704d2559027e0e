//! The one place a guard answer becomes an HTTP status, a problem code and its
//! members (docs/GUARD.md has the table): [`Error::guard`].

use super::Error;
use super::problem::Problem;
use crate::guard::{GuardError, KeyError, rfc3339};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};

/// A guard answer as an error, with the real clock for `retry_after` (handlers that
/// have the app's clock call [`Error::guard`]).
impl From<GuardError> for Error {
    fn from(e: GuardError) -> Self {
        Error::guard(e, Utc::now())
    }
}

impl Error {
    /// The one place a guard answer becomes an HTTP status, a problem code and its
    /// members (docs/GUARD.md has the table). `now` turns a lease into `retry_after`.
    pub fn guard(e: GuardError, now: DateTime<Utc>) -> Self {
        let problem = |status, code, title, detail: String, key: &str| {
            Problem::new(status, code, title, detail).member("key", key)
        };
        let detail = e.to_string();
        let p = match e {
            GuardError::Invalid { field, message } => {
                return Error::BadRequest { field, message };
            }
            GuardError::InvalidCall(k) => {
                return Error::bad_request(key_error_field(&k), k.to_string());
            }
            GuardError::Store(e) => return Error::from(e),
            GuardError::NotFound(key) => problem(
                StatusCode::NOT_FOUND,
                "not_found",
                "Not found",
                format!("No key {key} is recorded."),
                &key,
            ),
            GuardError::InFlight { key, lease_until } => {
                // Whole seconds, rounded up, at least 1: the lease has run out by then.
                let ms = (lease_until - now).num_milliseconds().max(0);
                let retry_after = ((ms + 999) / 1000).max(1);
                problem(StatusCode::CONFLICT, "in_flight", "In flight", detail, &key)
                    .member("retry_after", retry_after)
                    .member("lease_until", rfc3339(lease_until))
            }
            GuardError::NeedsHumanReview {
                key,
                provider_retention_until,
            } => problem(
                StatusCode::CONFLICT,
                "needs_human_review",
                "Needs human review",
                detail,
                &key,
            )
            .member(
                "provider_retention_until",
                rfc3339(provider_retention_until),
            ),
            GuardError::LeaseLost {
                key,
                token: _,
                current,
            } => problem(
                StatusCode::CONFLICT,
                "lease_lost",
                "Lease lost",
                detail,
                &key,
            )
            .member("current_token", current.0),
            GuardError::Conflict { key, status, token } => problem(
                StatusCode::CONFLICT,
                "conflict",
                "Someone else acted first",
                detail,
                &key,
            )
            .member("current_status", status.as_str())
            .member("current_token", token.0),
            GuardError::PayloadMismatch {
                key,
                stored_fingerprint,
                fingerprint,
                differing_fields,
                intent_key,
                stored_status,
                lookup_token,
            } => {
                let p = problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "payload_mismatch",
                    "Payload mismatch",
                    detail,
                    &key,
                )
                .member("stored_fingerprint", String::from(stored_fingerprint))
                .member("fingerprint", String::from(fingerprint))
                .member("differing_fields", differing_fields)
                .member("stored_status", stored_status.as_str());
                // The first call's outcome is unknown: a person is asked, and this caller
                // may report a lookup by key under `lookup_token` (POST …/reconcile).
                let p = match lookup_token {
                    Some(token) => p
                        .member("awaiting_person", true)
                        .member("lookup_token", token.0),
                    None => p,
                };
                match intent_key {
                    // Reached through the tool's natural key: the caller's own key.
                    Some(own) => p.member("intent_key", String::from(own)),
                    None => p,
                }
            }
            GuardError::NotResolvable { key, .. } => problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_resolvable",
                "Not possible for this key",
                detail,
                &key,
            ),
            // What the Rust guard returns after calling the provider; the HTTP steps
            // answer these as decisions, so they only arrive here from a misuse.
            GuardError::OperationFailed { key, .. } => problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "operation_failed",
                "Operation failed",
                detail,
                &key,
            ),
            GuardError::OutcomeUnknown { key, .. } => problem(
                StatusCode::BAD_GATEWAY,
                "outcome_unknown",
                "Outcome unknown",
                detail,
                &key,
            ),
        };
        Error::refused(p)
    }
}

/// The request field a malformed intent or argument object comes from.
fn key_error_field(e: &KeyError) -> &'static str {
    match e {
        KeyError::Empty { field } | KeyError::TooLong { field, .. } => match *field {
            "tenant" => "intent.tenant",
            "tool" => "intent.tool",
            "workflow_id" => "intent.workflow_id",
            "step_id" => "intent.step_id",
            "intent_id" => "intent.intent_id",
            other => other,
        },
        KeyError::MalformedKey(_) => "key",
        KeyError::ArgsNotObject | KeyError::Canonical(_) => "args",
    }
}
