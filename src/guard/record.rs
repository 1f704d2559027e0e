//! The rows the guard reads and writes, as domain values (no sqlx types here); the
//! hash chain over them is in [`super::chain`].

use super::deadline::{self, LeaseState};
use super::key::{FencingToken, IdempotencyKey, Intent};
use super::status::{AttemptKind, Status};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

/// One row of `idempotency_records`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    pub key: IdempotencyKey,
    /// The five strings the key was derived from; flattened, so the record's JSON
    /// keeps its members (`tenant` … `intent_id`) at the top level.
    #[serde(flatten)]
    pub intent: Intent,
    pub business_ref: Option<String>,
    pub fingerprint: String,
    pub business_args: Value,
    pub status: Status,
    pub fencing_token: FencingToken,
    pub lease_until: DateTime<Utc>,
    pub attempt_count: i64,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// The provider's own deadline for the key: the first send plus its key retention.
    pub provider_retention_until: DateTime<Utc>,
    /// After this instant a resend is no longer safe ([`deadline::resend_safe_until`],
    /// computed at the claim).
    pub resend_safe_until: DateTime<Utc>,
    /// A person confirmed at the provider that the effect did not happen and allowed
    /// the next retry to resend even if the provider lookup fails.
    pub release_approved: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `seq` and `hash` of the newest attempt row: the chain continues from here.
    pub log_seq: i64,
    pub log_hash: String,
}

impl Record {
    pub(crate) fn lease_state(&self, now: DateTime<Utc>) -> LeaseState {
        LeaseState::of(self.status, self.lease_until, now)
    }

    /// IN_PROGRESS with a lease that ran out: the worker died or hung mid-call.
    pub(crate) fn lease_expired(&self, now: DateTime<Utc>) -> bool {
        self.lease_state(now) == LeaseState::Expired
    }

    /// Whether a person (or a takeover) may act on this key now.
    pub(crate) fn is_undecided(&self, now: DateTime<Utc>) -> bool {
        self.status == Status::Unknown || self.lease_expired(now)
    }

    /// Whether a resend with the same key is still safe ([`deadline::resend_safe`]).
    pub fn resend_safe(&self, now: DateTime<Utc>) -> bool {
        deadline::resend_safe(self.resend_safe_until, now)
    }
}

/// An attempt row before it is sealed into the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptDraft {
    pub kind: AttemptKind,
    pub fencing_token: FencingToken,
    pub actor: String,
    pub detail: Value,
    pub duration_ms: Option<i64>,
    pub occurred_at: DateTime<Utc>,
}

impl AttemptDraft {
    pub fn new(
        kind: AttemptKind,
        fencing_token: FencingToken,
        actor: &str,
        occurred_at: DateTime<Utc>,
    ) -> Self {
        Self {
            kind,
            fencing_token,
            actor: actor.to_string(),
            detail: json!({}),
            duration_ms: None,
            occurred_at,
        }
    }
    pub fn detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }
    /// Adds one member to the detail object (which it becomes if it was not one).
    pub fn with(mut self, name: &str, value: Value) -> Self {
        if !self.detail.is_object() {
            self.detail = Value::Object(Default::default());
        }
        if let Value::Object(map) = &mut self.detail {
            map.insert(name.to_string(), value);
        }
        self
    }
    pub fn duration_ms(mut self, ms: impl Into<Option<i64>>) -> Self {
        self.duration_ms = ms.into();
        self
    }
}

/// One row of `idempotency_attempts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    pub id: i64,
    pub key: IdempotencyKey,
    pub tenant: String,
    pub tool: String,
    pub seq: i64,
    pub kind: AttemptKind,
    pub fencing_token: FencingToken,
    pub actor: String,
    pub detail: Value,
    pub duration_ms: Option<i64>,
    pub occurred_at: DateTime<Utc>,
    pub prev_hash: String,
    pub hash: String,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::guard::chain::GENESIS_HASH;

    pub(crate) fn record() -> Record {
        let t = DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402Z")
            .unwrap()
            .to_utc();
        Record {
            key: IdempotencyKey::parse(&"a".repeat(64)).unwrap(),
            intent: Intent {
                tenant: "acme".into(),
                tool: "issue_refund".into(),
                workflow_id: "w".into(),
                step_id: "4".into(),
                intent_id: "i".into(),
            },
            business_ref: Some("order:A-88214".into()),
            fingerprint: "f".into(),
            business_args: json!({}),
            status: Status::InProgress,
            fencing_token: FencingToken::FIRST,
            lease_until: t,
            attempt_count: 1,
            result: None,
            error: None,
            provider_retention_until: t,
            resend_safe_until: t,
            release_approved: false,
            created_at: t,
            updated_at: t,
            log_seq: 0,
            log_hash: GENESIS_HASH.into(),
        }
    }

    #[test]
    fn an_expired_lease_makes_an_in_progress_key_undecided() {
        let r = record();
        assert!(!r.is_undecided(r.lease_until - chrono::TimeDelta::seconds(1)));
        assert!(r.is_undecided(r.lease_until));
    }
}
