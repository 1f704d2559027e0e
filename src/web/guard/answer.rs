//! The guard routes' 200 answers: a `decision` and what the caller needs to act on it,
//! with the `Idempotency-Key` header, and `Idempotent-Replayed: true` on a replay.
//!
//! Each decision is a struct serialized straight to the response body (no `Value` tree
//! built first and walked again: this is the hot path of every guarded call). Members
//! are declared in alphabetical order, the order the `Value` maps wrote them in
//! before, so the bytes a worker receives did not change.

use crate::guard::{Admission, FencingToken, IdempotencyKey, Record, Status, ToolPolicy, rfc3339};
use axum::Json;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

/// A decision for the caller, as a response.
pub struct Answer {
    key: String,
    body: Decision,
    replayed: bool,
}

/// The body of each kind of answer (docs/GUARD.md, docs/openapi.json).
#[derive(Serialize)]
#[serde(untagged)]
enum Decision {
    Execute(Execute),
    Reconcile(Reconcile),
    Replay(Replay),
    Failed(Failed),
    Settled(Settled),
    Unknown(Unknown),
    State(KeyAnswer),
}

/// `execute`: call the provider now with `key` and `args`, then settle. Also the start
/// of `reconcile`.
#[derive(Serialize)]
struct Execute {
    args: Value,
    decision: &'static str,
    fencing_token: i64,
    key: String,
    lease_until: String,
    policy: Value,
}

#[derive(Serialize)]
struct Reconcile {
    #[serde(flatten)]
    execute: Execute,
    previous_status: Status,
    resend_allowed: bool,
    resend_safe_until: String,
}

#[derive(Serialize)]
struct Replay {
    decision: &'static str,
    key: String,
    replayed: bool,
    result: Value,
}

#[derive(Serialize)]
struct Failed {
    decision: &'static str,
    error: String,
    key: String,
    replayed: bool,
}

#[derive(Serialize)]
struct Settled {
    decision: &'static str,
    key: String,
    status: Status,
}

#[derive(Serialize)]
struct Unknown {
    decision: &'static str,
    key: String,
    reason: String,
}

/// A page of a key's attempts, with the URL of the next one (null at the end).
#[derive(Serialize)]
pub(crate) struct AttemptsAnswer {
    pub attempts: Vec<crate::guard::Attempt>,
    pub next: Option<String>,
}

#[derive(Serialize)]
struct KeyAnswer {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    attempts: Option<AttemptsAnswer>,
    awaiting_person: bool,
    changed: bool,
    error: Option<String>,
    fencing_token: FencingToken,
    key: IdempotencyKey,
    provider_retention_until: String,
    /// Refusals answered without a row (docs/GUARD.md, "What the attempt log records").
    refusals_not_logged: i64,
    release_approved: bool,
    resend_safe_until: String,
    result: Option<Value>,
    status: Status,
}

impl Answer {
    fn new(key: &str, body: Decision) -> Self {
        Self {
            key: key.to_string(),
            body,
            replayed: false,
        }
    }

    fn execute_body(
        decision: &'static str,
        key: &str,
        token: i64,
        lease_until: DateTime<Utc>,
        args: Value,
        policy: &ToolPolicy,
        tool: &str,
    ) -> Execute {
        Execute {
            args,
            decision,
            fencing_token: token,
            key: key.to_string(),
            lease_until: rfc3339(lease_until),
            policy: policy.to_json(tool),
        }
    }

    /// Call the provider now with `key` and `args`, then settle.
    pub fn execute(
        key: &str,
        token: i64,
        lease_until: DateTime<Utc>,
        args: Value,
        policy: &ToolPolicy,
        tool: &str,
    ) -> Self {
        let body = Self::execute_body("execute", key, token, lease_until, args, policy, tool);
        Self::new(key, Decision::Execute(body))
    }

    /// The stored (or found) result of an earlier attempt.
    pub fn replay(key: &str, result: Value) -> Self {
        Self {
            replayed: true,
            ..Self::new(
                key,
                Decision::Replay(Replay {
                    decision: "replay",
                    key: key.to_string(),
                    replayed: true,
                    result,
                }),
            )
        }
    }

    /// The stored definitive failure.
    pub fn failed(key: &str, error: String) -> Self {
        Self {
            replayed: true,
            ..Self::new(
                key,
                Decision::Failed(Failed {
                    decision: "failed",
                    error,
                    key: key.to_string(),
                    replayed: true,
                }),
            )
        }
    }

    /// A takeover: look the effect up at the provider, then report it.
    pub fn reconcile(
        key: &str,
        token: i64,
        lease_until: DateTime<Utc>,
        before: Record,
        policy: &ToolPolicy,
        now: DateTime<Utc>,
    ) -> Self {
        let reconcile = Reconcile {
            previous_status: before.status,
            resend_allowed: before.resend_safe(now),
            resend_safe_until: rfc3339(before.resend_safe_until),
            execute: Self::execute_body(
                "reconcile",
                key,
                token,
                lease_until,
                before.business_args,
                policy,
                &before.intent.tool,
            ),
        };
        Self::new(key, Decision::Reconcile(reconcile))
    }

    pub fn settled(key: &str, status: Status) -> Self {
        Self::new(
            key,
            Decision::Settled(Settled {
                decision: "settled",
                key: key.to_string(),
                status,
            }),
        )
    }

    /// The lookup failed: the key is UNKNOWN; retry later with the same intent.
    pub fn unknown(key: &str, reason: String) -> Self {
        Self::new(
            key,
            Decision::Unknown(Unknown {
                decision: "unknown",
                key: key.to_string(),
                reason,
            }),
        )
    }

    /// The state of a key, for `GET /api/v1/guard/keys/{key}`.
    pub fn state(
        record: Record,
        changed: bool,
        awaiting_person: bool,
        attempts: Option<AttemptsAnswer>,
    ) -> Self {
        let key = record.key.to_string();
        let body = KeyAnswer {
            attempts,
            awaiting_person,
            changed,
            error: record.error,
            fencing_token: record.fencing_token,
            key: record.key,
            provider_retention_until: rfc3339(record.provider_retention_until),
            refusals_not_logged: record.refusals_not_logged,
            release_approved: record.release_approved,
            resend_safe_until: rfc3339(record.resend_safe_until),
            result: record.result,
            status: record.status,
        };
        Self::new(&key, Decision::State(body))
    }

    /// An admission that is not a refusal (those are errors, see `Admitted::refuse`).
    pub fn admitted(
        key: &str,
        admission: Admission,
        args: Value,
        policy: &ToolPolicy,
        tool: &str,
        now: DateTime<Utc>,
    ) -> Self {
        match admission {
            Admission::New { token, lease_until } => {
                Self::execute(key, token.0, lease_until, args, policy, tool)
            }
            Admission::Replay { result } => Self::replay(key, result),
            Admission::ReplayFailure { error } => Self::failed(key, error),
            Admission::TakeOver {
                token,
                lease_until,
                before,
            } => Self::reconcile(key, token.0, lease_until, *before, policy, now),
            Admission::InFlight { .. } | Admission::Mismatch { .. } => {
                unreachable!("refused by Admitted::refuse")
            }
        }
    }
}

/// The answer's headers, as constants: `HeaderName::from_static` on a `&str` checks the
/// name again on every call, and this runs twice per guarded call.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Headers an answer ends up with: its own two, then `Cache-Control` (auth.rs), the
/// security headers and HSTS (`web::every_request`) and `Content-Length`. A map made
/// for them up front is not grown and rehashed on the way out (that growth was the
/// largest single cost of `security_headers` in a profile of the guard's routes).
const ANSWER_HEADERS: usize = 10;

/// Room for an `execute` answer with its policy and arguments (~400 bytes), so the
/// body is written without growing its buffer (`Json` starts at 128 bytes).
const BODY_CAPACITY: usize = 512;

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(BODY_CAPACITY);
        let mut response = match serde_json::to_writer(&mut body, &self.body) {
            Ok(()) => {
                let mut response = Response::new(body.into());
                *response.headers_mut() = HeaderMap::with_capacity(ANSWER_HEADERS);
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, APPLICATION_JSON);
                response
            }
            // What `Json` answers when a body cannot be written (none of these fails).
            Err(_) => Json(self.body).into_response(),
        };
        let headers = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&self.key) {
            headers.insert(IDEMPOTENCY_KEY, v);
        }
        if self.replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bytes of a typed answer are the bytes of the `Value` it replaced (members
    /// sorted, as serde_json's map writes them), so no worker sees a change.
    #[test]
    fn typed_answers_write_the_same_bytes_as_the_json_objects_they_replaced() {
        let policy = ToolPolicy {
            key_retention: chrono::TimeDelta::hours(24),
            call_timeout: std::time::Duration::from_millis(1500),
            free_text_fields: vec!["reason".into()],
            natural_key: vec![],
            duplicate_window: chrono::TimeDelta::hours(24),
        };
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:00:00.5Z")
            .unwrap()
            .to_utc();
        let args = json!({"order": "A-1", "amount": 4500});
        let body = |a: Answer| serde_json::to_string(&a.body).unwrap();
        let cases = [
            (
                body(Answer::execute("k", 3, at, args.clone(), &policy, "refund")),
                json!({
                    "decision": "execute", "key": "k", "fencing_token": 3,
                    "lease_until": rfc3339(at), "args": args,
                    "policy": policy.to_json("refund"),
                }),
            ),
            (
                body(Answer::replay("k", json!({"id": 1}))),
                json!({"decision": "replay", "key": "k", "result": {"id": 1}, "replayed": true}),
            ),
            (
                body(Answer::failed("k", "declined".into())),
                json!({"decision": "failed", "key": "k", "error": "declined", "replayed": true}),
            ),
            (
                body(Answer::settled("k", Status::Done)),
                json!({"decision": "settled", "key": "k", "status": Status::Done}),
            ),
            (
                body(Answer::unknown("k", "timeout".into())),
                json!({"decision": "unknown", "key": "k", "reason": "timeout"}),
            ),
        ];
        for (typed, value) in cases {
            assert_eq!(typed, value.to_string());
        }
    }

    /// The response written straight from the struct carries what `Json` wrote: the
    /// same body bytes, `Content-Type: application/json` first, then the key headers.
    #[tokio::test]
    async fn an_answer_is_the_response_json_would_have_made_with_its_headers() {
        use http_body_util::BodyExt;
        for (answer, replayed) in [
            (Answer::replay("k-1", json!({"id": 1})), Some("true")),
            (Answer::settled("k-2", Status::Done), None),
        ] {
            let expected = Json(&answer.body).into_response();
            let expected_body = expected.into_body().collect().await.unwrap().to_bytes();
            let key = answer.key.clone();
            let response = answer.into_response();
            let names: Vec<_> = response.headers().keys().map(|n| n.as_str()).collect();
            assert_eq!(names[0], "content-type");
            assert_eq!(response.headers()["content-type"], "application/json");
            assert_eq!(response.headers()["idempotency-key"], key.as_str());
            assert_eq!(
                response
                    .headers()
                    .get("idempotent-replayed")
                    .map(|v| v.to_str().unwrap()),
                replayed
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, expected_body);
        }
    }
}
