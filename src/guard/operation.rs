//! The side effect the guard wraps. The caller implements this for each tool.

use super::key::IdempotencyKey;
use chrono::TimeDelta;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// The suspected-duplicate window of a tool that names none.
pub const DEFAULT_DUPLICATE_WINDOW: TimeDelta = TimeDelta::hours(24);

/// How an operation's error bears on the effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The provider said no and did nothing (card declined, 400, 422): FAILED.
    Definitive,
    /// Nobody knows (timeout, reset, 502/503, 5xx): UNKNOWN, reconciled before any resend.
    Ambiguous,
}

pub trait Operation: Send + Sync {
    type Error: std::fmt::Display + Send;

    /// Top-level argument fields the model may rephrase ("reason"). They are left out
    /// of the fingerprint and never sent to the provider.
    fn free_text_fields(&self) -> &[&str] {
        &[]
    }

    /// Top-level argument fields that identify the business action (`invoice_id`): at
    /// most one effect per tenant, tool and values of these fields, whatever intent key
    /// a caller mints (docs/GUARD.md, "Natural keys"). Empty: none.
    fn natural_key_fields(&self) -> &[&str] {
        &[]
    }

    /// How far back a claim looks for another key with the same business ref and
    /// fingerprint, to count it as a suspected duplicate.
    fn duplicate_window(&self) -> TimeDelta {
        DEFAULT_DUPLICATE_WINDOW
    }

    /// How long the provider remembers an idempotency key (30 minutes to 30 days,
    /// depending on the provider). Resending with the same key is safe only inside it.
    fn key_retention(&self) -> TimeDelta;

    /// Whether the provider deduplicates by the idempotency key at all. One that does
    /// not (an email API without idempotency) is never resent to after an ambiguous
    /// outcome: the guard reconciles by lookup (which must find the effect by the key
    /// it is tagged with) or asks a person. Its `key_retention` is then ignored.
    fn provider_dedupes(&self) -> bool {
        true
    }

    /// The client deadline for one provider call. The lease is this plus a margin.
    fn call_timeout(&self) -> Duration;

    /// Anything not known to be definitive is ambiguous: a timeout is never a failure.
    fn classify(&self, _error: &Self::Error) -> ErrorClass {
        ErrorClass::Ambiguous
    }

    /// Performs the effect, passing `key` to the provider (an `Idempotency-Key`
    /// header) and tagging what it creates with it.
    fn execute(
        &self,
        key: &IdempotencyKey,
        args: &Value,
    ) -> impl Future<Output = Result<Value, Self::Error>> + Send;

    /// Looks the effect up at the provider by key: the reconciliation query.
    fn find_by_key(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Value>, Self::Error>> + Send;
}
