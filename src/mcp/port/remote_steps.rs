//! The guard port over a remote `serve` ([`RemoteGuard`]'s [`GuardPort`]): its HTTP
//! steps as the proxy sends them (the bodies of docs/GUARD.md, as the
//! Python and TypeScript clients send them) and their answers read back into the
//! port's terms: a 200's `decision`, or an RFC 9457 problem's `code`, mapped in one
//! place ([`refusal`]) to the same errors the local engine returns.

use super::remote::{RemoteGuard, Reply};
use super::{
    AfterLookup, CallContext, Fenced, GuardCall, GuardPort, KeyState, NaturalRef, PortAdmission,
    PortAdmitted, PortError, Step,
};
use crate::guard::{
    CallOutcome, FencingToken, GuardError, IdempotencyKey, Lookup, StoreError, ToolCall, ToolPolicy,
};
use crate::mcp::intent::cut;
use chrono::Utc;
use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// The longest worker id `serve` accepts.
const MAX_WORKER: usize = 200;

/// `/keys?business_ref=…&tenant=…[&tool=…]&limit=1`.
pub fn keys_query(tenant: &str, tool: Option<&str>, reference: &str) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("business_ref", reference)
        .append_pair("tenant", tenant);
    if let Some(tool) = tool {
        q.append_pair("tool", tool);
    }
    q.append_pair("limit", "1");
    format!("/keys?{}", q.finish())
}

/// The start-up check's answer: anything but 200 is a reason not to start.
pub fn checked(guard: &RemoteGuard, reply: &Reply) -> Result<(), String> {
    match reply.status {
        200 => Ok(()),
        _ => Err(refusal(guard, reply, None).to_string()),
    }
}

pub fn key_state(
    guard: &RemoteGuard,
    key: &IdempotencyKey,
    reply: Reply,
) -> Result<Option<KeyState>, PortError> {
    match reply.status {
        404 => Ok(None),
        200 => {
            let status = reply
                .text("status")
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| guard.failed("its key state has no status this version knows"))?;
            let present = |v: &Value| (!v.is_null()).then(|| v.clone());
            Ok(Some(KeyState {
                key: key.clone(),
                tool: None,
                status,
                result: reply.body.get("result").and_then(present),
                error: reply.text("error").map(str::to_string),
                lease_until: None,
                awaiting_person: reply.body.get("awaiting_person") == Some(&Value::Bool(true)),
            }))
        }
        _ => Err(refusal(guard, &reply, Some(key))),
    }
}

pub fn holder(guard: &RemoteGuard, reply: Reply) -> Result<Option<IdempotencyKey>, PortError> {
    if reply.status != 200 {
        return Err(refusal(guard, &reply, None));
    }
    let first = reply.body.pointer("/keys/0/key").and_then(Value::as_str);
    Ok(first.and_then(|k| IdempotencyKey::parse(k).ok()))
}

/// One `tools/call`'s steps through the remote guard.
pub struct RemoteCall {
    guard: RemoteGuard,
    worker: String,
    /// Sent with each step, for the attempt log (`context` in docs/GUARD.md).
    context: Value,
}

impl RemoteCall {
    pub fn new(guard: RemoteGuard, context: CallContext) -> Self {
        Self {
            guard,
            worker: cut(&context.actor, MAX_WORKER).to_string(),
            context: context.detail,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Result<Reply, PortError> {
        self.guard.send(Method::POST, path, Some(&body)).await
    }

    fn decision<'r>(
        &self,
        reply: &'r Reply,
        key: Option<&IdempotencyKey>,
    ) -> Result<&'r str, PortError> {
        if reply.status != 200 {
            return Err(refusal(&self.guard, reply, key));
        }
        reply.text("decision").ok_or_else(|| {
            self.guard
                .failed(format!("answered 200 without a decision: {}", reply.body))
        })
    }
}

impl GuardCall for RemoteCall {
    // The policy is serve's (its tools file): it answers the call timeout with `execute`.
    fn admit<'a>(&'a self, call: &'a ToolCall, _: &'a ToolPolicy) -> Step<'a, PortAdmitted> {
        async move {
            let body = json!({
                "intent": call.intent,
                "business_ref": call.business_ref,
                "args": call.args,
                "worker": self.worker,
                "context": self.context,
            });
            let reply = self.post("/admit", body).await?;
            let key = reply
                .text("key")
                .and_then(|k| IdempotencyKey::parse(k).ok())
                .ok_or_else(|| refusal(&self.guard, &reply, None))?;
            let admission = match (reply.status, reply.text("code")) {
                (409, Some("in_flight")) => PortAdmission::InFlight {
                    lease_until: reply.time("lease_until").unwrap_or_else(Utc::now),
                },
                (422, Some("payload_mismatch")) => PortAdmission::Mismatch {
                    differing_fields: strings(reply.body.get("differing_fields")),
                    natural: reply.body.get("intent_key").is_some(),
                    lookup_token: reply
                        .body
                        .get("lookup_token")
                        .and_then(Value::as_i64)
                        .map(FencingToken),
                },
                _ => match self.decision(&reply, Some(&key))? {
                    "execute" => PortAdmission::Execute {
                        token: self.token(&reply)?,
                        call_timeout: call_timeout(&reply),
                    },
                    "reconcile" => PortAdmission::Reconcile {
                        token: self.token(&reply)?,
                        call_timeout: call_timeout(&reply),
                    },
                    "replay" => PortAdmission::Replay {
                        result: reply.body.get("result").cloned().unwrap_or(Value::Null),
                    },
                    "failed" => PortAdmission::Failed {
                        error: reply.text("error").unwrap_or_default().to_string(),
                    },
                    other => {
                        return Err(self
                            .guard
                            .failed(format!("answered an unknown decision {other:?}")));
                    }
                },
            };
            Ok(PortAdmitted { key, admission })
        }
        .boxed()
    }

    fn settle<'a>(&'a self, at: Fenced<'a>, outcome: CallOutcome) -> Step<'a, ()> {
        async move {
            let mut body = self.fenced(at);
            let (outcome, member, value) = match outcome {
                CallOutcome::Done { result } => ("done", "result", result),
                CallOutcome::Failed { error } => ("failed", "error", Value::String(error)),
                CallOutcome::Unknown { reason } => ("unknown", "reason", Value::String(reason)),
            };
            body["outcome"] = json!(outcome);
            body[member] = value;
            let reply = self.post("/settle", body).await?;
            self.decision(&reply, Some(at.key))
                .map(|_| ())
                .map_err(|e| with_token(e, at.token))
        }
        .boxed()
    }

    fn report_lookup<'a>(&'a self, at: Fenced<'a>, lookup: Lookup) -> Step<'a, AfterLookup> {
        async move {
            let mut body = self.fenced(at);
            match lookup {
                Lookup::Found(result) => {
                    body["lookup"] = json!("found");
                    body["result"] = result;
                }
                Lookup::NotFound => body["lookup"] = json!("not_found"),
                Lookup::Failed(error) => {
                    body["lookup"] = json!("failed");
                    body["error"] = json!(error);
                }
            }
            let reply = self.post("/reconcile", body).await?;
            match self
                .decision(&reply, Some(at.key))
                .map_err(|e| with_token(e, at.token))?
            {
                "replay" => Ok(AfterLookup::Found {
                    result: reply.body.get("result").cloned().unwrap_or(Value::Null),
                }),
                "execute" => Ok(AfterLookup::Resend),
                "unknown" => Ok(AfterLookup::Unknown {
                    reason: reply.text("reason").unwrap_or_default().to_string(),
                }),
                other => Err(self
                    .guard
                    .failed(format!("answered an unknown decision {other:?}"))),
            }
        }
        .boxed()
    }
}

impl RemoteCall {
    /// The members a settle and a lookup report share.
    fn fenced(&self, at: Fenced<'_>) -> Value {
        json!({
            "key": at.key, "fencing_token": at.token, "duration_ms": at.duration_ms,
            "worker": self.worker, "context": self.context,
        })
    }

    fn token(&self, reply: &Reply) -> Result<FencingToken, PortError> {
        reply.token("fencing_token").ok_or_else(|| {
            self.guard
                .failed("answered execute without a fencing_token")
        })
    }
}

/// A lost lease names the token this proxy wrote with (the answer names only the
/// current one).
fn with_token(e: PortError, token: FencingToken) -> PortError {
    match e {
        PortError::Guard(GuardError::LeaseLost { key, current, .. }) => {
            PortError::Guard(GuardError::LeaseLost {
                key,
                token,
                current,
            })
        }
        other => other,
    }
}

/// The lease's call timeout, from the policy `serve` applied (its tools file decides).
fn call_timeout(reply: &Reply) -> Duration {
    reply
        .body
        .pointer("/policy/call_timeout_seconds")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(10), Duration::from_secs_f64)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The one place a refusal of the remote guard becomes the port's error: the same
/// `GuardError` the local engine returns where there is one, else what went wrong
/// with the guard itself (the token, an answer this version does not know).
pub fn refusal(guard: &RemoteGuard, reply: &Reply, key: Option<&IdempotencyKey>) -> PortError {
    let key = reply
        .text("key")
        .map(str::to_string)
        .or_else(|| key.map(|k| k.to_string()))
        .unwrap_or_default();
    let detail = reply.text("detail").unwrap_or("(no detail)").to_string();
    let error = match (reply.status, reply.text("code")) {
        (_, Some("needs_human_review")) => GuardError::NeedsHumanReview {
            key,
            provider_retention_until: reply
                .time("provider_retention_until")
                .unwrap_or_else(Utc::now),
        },
        (_, Some("lease_lost")) => GuardError::LeaseLost {
            key,
            token: FencingToken(0),
            current: reply.token("current_token").unwrap_or(FencingToken(0)),
        },
        (_, Some("not_found")) => GuardError::NotFound(key),
        (_, Some("unavailable")) => GuardError::Store(StoreError::Unavailable(detail)),
        (400, _) => GuardError::Invalid {
            field: "call",
            message: match reply.text("field") {
                Some(field) => format!("{detail} (field {field})"),
                None => detail,
            },
        },
        (401, _) => {
            return guard.failed(format!(
                "refused the token (401 unauthorized: {detail}); give --guard-token (or --guard-token-file) a token from serve's auth file with the worker role"
            ));
        }
        (403, _) => {
            return guard.failed(format!(
                "the token may not call the guard (403 forbidden: {detail}); give --guard-token a token with the worker role, with this tenant and these tools in its scope"
            ));
        }
        (429, _) => {
            return guard.failed(format!(
                "is still too busy (429) after waiting out its Retry-After for {} s: {detail}",
                super::remote::RETRY_BUDGET.as_secs()
            ));
        }
        (status, _) => {
            return guard.failed(format!(
                "answered HTTP {status} this proxy does not understand: {}",
                if reply.body.is_null() {
                    "(no JSON body)".to_string()
                } else {
                    detail
                }
            ));
        }
    };
    PortError::Guard(error)
}

impl GuardPort for RemoteGuard {
    fn check<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            // A read that needs the worker role and writes nothing.
            let path = keys_query(tenant, None, "idemwatch-mcp-proxy-start-check");
            let reply = self.send(Method::GET, &path, None).await?;
            checked(self, &reply).map_err(anyhow::Error::msg)
        }
        .boxed()
    }

    fn call(&self, context: CallContext) -> Box<dyn GuardCall> {
        Box::new(RemoteCall::new(self.clone(), context))
    }

    fn key_state<'a>(&'a self, key: &'a IdempotencyKey) -> Step<'a, Option<KeyState>> {
        async move {
            let reply = self
                .send(Method::GET, &format!("/keys/{key}"), None)
                .await?;
            key_state(self, key, reply)
        }
        .boxed()
    }

    fn holder_of<'a>(&'a self, natural: NaturalRef<'a>) -> Step<'a, Option<IdempotencyKey>> {
        async move {
            let path = keys_query(natural.tenant, Some(natural.tool), natural.reference);
            let reply = self.send(Method::GET, &path, None).await?;
            holder(self, reply)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> RemoteGuard {
        RemoteGuard::new(&"http://127.0.0.1:9".parse().unwrap(), None, None).unwrap()
    }

    fn reply(status: u16, body: Value) -> Reply {
        Reply { status, body }
    }

    #[test]
    fn serves_refusals_become_the_errors_the_local_engine_returns() {
        let g = guard();
        let person = refusal(
            &g,
            &reply(
                409,
                json!({"code": "needs_human_review", "key": "k",
            "provider_retention_until": "2026-01-02T03:04:05Z", "detail": "d"}),
            ),
            None,
        );
        assert!(
            matches!(person, PortError::Guard(GuardError::NeedsHumanReview { ref key, .. }) if key == "k"),
            "{person:?}"
        );
        let down = refusal(
            &g,
            &reply(503, json!({"code": "unavailable", "detail": "db down"})),
            None,
        );
        assert!(
            matches!(
                down,
                PortError::Guard(GuardError::Store(StoreError::Unavailable(_)))
            ),
            "{down:?}"
        );
        let lost = with_token(
            refusal(
                &g,
                &reply(
                    409,
                    json!({"code": "lease_lost", "key": "k", "current_token": 3}),
                ),
                None,
            ),
            FencingToken(2),
        );
        assert!(
            matches!(
                lost,
                PortError::Guard(GuardError::LeaseLost {
                    token: FencingToken(2),
                    current: FencingToken(3),
                    ..
                })
            ),
            "{lost:?}"
        );
        let invalid = refusal(
            &g,
            &reply(
                400,
                json!({"code": "unknown_tool", "detail": "not in the tools file", "field": "intent.tool"}),
            ),
            None,
        );
        assert!(
            invalid
                .to_string()
                .contains("not in the tools file (field intent.tool)"),
            "{invalid}"
        );
    }

    #[test]
    fn a_refused_token_is_named_as_the_problem() {
        let g = guard();
        let unauthorized = refusal(
            &g,
            &reply(401, json!({"detail": "not in the auth file"})),
            None,
        )
        .to_string();
        assert!(
            unauthorized.contains("refused the token (401")
                && unauthorized.contains("--guard-token"),
            "{unauthorized}"
        );
        let forbidden = refusal(&g, &reply(403, json!({"detail": "no role"})), None).to_string();
        assert!(forbidden.contains("worker role"), "{forbidden}");
        let odd = refusal(&g, &reply(502, Value::Null), None).to_string();
        assert!(
            odd.contains("HTTP 502") && odd.contains("no JSON body"),
            "{odd}"
        );
    }

    #[test]
    fn the_call_timeout_is_the_policy_serve_applied() {
        let r = reply(200, json!({"policy": {"call_timeout_seconds": 2.5}}));
        assert_eq!(call_timeout(&r), Duration::from_millis(2500));
    }

    #[test]
    fn a_business_ref_is_query_encoded() {
        assert_eq!(
            keys_query("acme", Some("issue_refund"), "issue_refund order=A&B"),
            "/keys?business_ref=issue_refund+order%3DA%26B&tenant=acme&tool=issue_refund&limit=1"
        );
    }
}
