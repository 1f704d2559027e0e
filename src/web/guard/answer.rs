//! The guard routes' 200 answers: a `decision` and what the caller needs to act on it,
//! with the `Idempotency-Key` header, and `Idempotent-Replayed: true` on a replay.

use crate::guard::{Admission, Record, Status, ToolPolicy, rfc3339};
use axum::Json;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// A decision for the caller, as a response.
pub struct Answer {
    key: String,
    body: Value,
    replayed: bool,
}

impl Answer {
    fn new(key: &str, body: Value) -> Self {
        Self {
            key: key.to_string(),
            body,
            replayed: false,
        }
    }

    /// Call the provider now with `key` and `args`, then settle.
    pub fn execute(
        key: &str,
        token: i64,
        lease_until: DateTime<Utc>,
        args: &Value,
        policy: &ToolPolicy,
        tool: &str,
    ) -> Self {
        Self::new(
            key,
            json!({
                "decision": "execute",
                "key": key,
                "fencing_token": token,
                "lease_until": rfc3339(lease_until),
                "args": args,
                "policy": policy.to_json(tool),
            }),
        )
    }

    /// The stored (or found) result of an earlier attempt.
    pub fn replay(key: &str, result: Value) -> Self {
        Self {
            replayed: true,
            ..Self::new(
                key,
                json!({"decision": "replay", "key": key, "result": result, "replayed": true}),
            )
        }
    }

    /// The stored definitive failure.
    pub fn failed(key: &str, error: &str) -> Self {
        Self {
            replayed: true,
            ..Self::new(
                key,
                json!({"decision": "failed", "key": key, "error": error, "replayed": true}),
            )
        }
    }

    /// A takeover: look the effect up at the provider, then report it.
    pub fn reconcile(
        key: &str,
        token: i64,
        lease_until: DateTime<Utc>,
        before: &Record,
        policy: &ToolPolicy,
        now: DateTime<Utc>,
    ) -> Self {
        let Self { key, mut body, .. } = Self::execute(
            key,
            token,
            lease_until,
            &before.business_args,
            policy,
            &before.intent.tool,
        );
        let o = body.as_object_mut().expect("an answer is an object");
        o.insert("decision".into(), json!("reconcile"));
        o.insert("previous_status".into(), json!(before.status));
        o.insert("resend_allowed".into(), json!(before.resend_safe(now)));
        o.insert(
            "resend_safe_until".into(),
            json!(rfc3339(before.resend_safe_until)),
        );
        Self::new(&key, body)
    }

    pub fn settled(key: &str, status: Status) -> Self {
        Self::new(
            key,
            json!({"decision": "settled", "key": key, "status": status}),
        )
    }

    /// The lookup failed: the key is UNKNOWN; retry later with the same intent.
    pub fn unknown(key: &str, reason: &str) -> Self {
        Self::new(
            key,
            json!({"decision": "unknown", "key": key, "reason": reason}),
        )
    }

    /// The state of a key, for `GET /api/v1/guard/keys/{key}`.
    pub fn state(record: &Record, changed: bool, awaiting_person: bool) -> Self {
        Self::new(
            record.key.as_str(),
            json!({
                "key": record.key,
                "status": record.status,
                "fencing_token": record.fencing_token,
                "changed": changed,
                "awaiting_person": awaiting_person,
                "release_approved": record.release_approved,
                "result": record.result,
                "error": record.error,
                "provider_retention_until": rfc3339(record.provider_retention_until),
                "resend_safe_until": rfc3339(record.resend_safe_until),
            }),
        )
    }

    /// An admission that is not a refusal (those are errors, see `Admitted::refuse`).
    pub fn admitted(
        key: &str,
        admission: Admission,
        args: &Value,
        policy: &ToolPolicy,
        tool: &str,
        now: DateTime<Utc>,
    ) -> Self {
        match admission {
            Admission::New { token, lease_until } => {
                Self::execute(key, token.0, lease_until, args, policy, tool)
            }
            Admission::Replay { result } => Self::replay(key, result),
            Admission::ReplayFailure { error } => Self::failed(key, &error),
            Admission::TakeOver {
                token,
                lease_until,
                before,
            } => Self::reconcile(key, token.0, lease_until, &before, policy, now),
            Admission::InFlight { .. } | Admission::Mismatch { .. } => {
                unreachable!("refused by Admitted::refuse")
            }
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        let headers = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&self.key) {
            headers.insert("idempotency-key", v);
        }
        if self.replayed {
            headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        response
    }
}
