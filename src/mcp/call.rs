//! One guarded `tools/call`: admit through the guard (the same steps as
//! `/api/v1/guard/*`, through [`GuardPort`]: the engine here or a remote `serve`),
//! call the upstream under the claimed key, settle what happened, and reconcile an
//! UNKNOWN key through the tool's lookup before any resend.

use super::answer::{self, KeyPages};
use super::classify::Guarded;
use super::intent::Session;
use super::port::{
    AfterLookup, CallContext, Fenced, GuardCall, GuardPort, PortAdmission, PortError,
};
use super::upstream::{Upstream, UpstreamError};
use crate::guard::{
    BusinessArgs, CallOutcome, Clock, FencingToken, GuardError, IdempotencyKey, Lookup, NaturalKey,
    Status, ToolCall,
};
use chrono::{DateTime, Utc};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What every guarded call shares.
#[derive(Clone)]
pub struct Calls {
    pub guard: Arc<dyn GuardPort>,
    pub clock: Arc<dyn Clock>,
    pub upstream: Arc<Upstream>,
    pub pages: KeyPages,
}

/// One call as the client sent it.
pub struct Request<'a> {
    pub caller: &'a Session,
    pub tool: &'a str,
    pub arguments: JsonObject,
    /// SEP-3182's `idempotencyKey`, if the client sent one.
    pub client_key: Option<String>,
    /// The JSON-RPC request id, for the attempt log.
    pub request_id: String,
}

/// What the guard holds while the upstream is called, and the call it holds it for.
struct Lease<'a> {
    guard: &'a dyn GuardCall,
    key: IdempotencyKey,
    token: FencingToken,
    /// The deadline of the upstream call: the call timeout of the lease's policy.
    call_timeout: Duration,
    name: &'a str,
    /// The arguments as the model sent them (free text included), without the key
    /// argument.
    arguments: &'a JsonObject,
    tool: &'a Guarded,
}

impl Lease<'_> {
    fn fenced(&self, duration_ms: Option<i64>) -> Fenced<'_> {
        Fenced {
            key: &self.key,
            token: self.token,
            duration_ms,
        }
    }
}

impl Calls {
    pub async fn call(&self, req: Request<'_>, tool: &Guarded) -> CallToolResult {
        let name = req.tool;
        // The key argument is the proxy's to fill: a value the model put there is
        // neither fingerprinted nor sent.
        let mut arguments = req.arguments.clone();
        if let Some(arg) = &tool.key_argument {
            arguments.remove(arg);
        }
        let args = Value::Object(arguments.clone());
        let business = match BusinessArgs::new(&args, &tool.policy.free_text_fields) {
            Ok(b) => b,
            Err(e) => return answer::guard_error(name, &GuardError::InvalidCall(e)),
        };
        let business_ref = match NaturalKey::of(&business, &tool.policy.natural_key) {
            Ok(natural) => natural.and_then(|n| business_ref(name, &n.fields)),
            Err(e) => return answer::guard_error(name, &e),
        };
        let guard = self.guard.call(CallContext {
            actor: req.caller.actor(),
            detail: req.caller.context(&req.request_id),
        });
        let call = ToolCall {
            intent: req
                .caller
                .intent(name, req.client_key.as_deref(), &business.fingerprint),
            business_ref,
            args,
            actor: req.caller.actor(),
        };
        // A call in flight elsewhere is waited for up to this tool's call timeout.
        let deadline = Instant::now() + tool.policy.call_timeout;
        loop {
            let admitted = match guard.admit(&call, &tool.policy).await {
                Ok(a) => a,
                Err(e) => return answer::guard_error(name, &e),
            };
            let key = admitted.key;
            let held = |token, call_timeout| Lease {
                guard: guard.as_ref(),
                key: key.clone(),
                token,
                call_timeout,
                name,
                arguments: &arguments,
                tool,
            };
            return match admitted.admission {
                PortAdmission::Execute {
                    token,
                    call_timeout,
                } => self.execute(&held(token, call_timeout)).await,
                PortAdmission::Reconcile {
                    token,
                    call_timeout,
                } => self.reconcile(&held(token, call_timeout)).await,
                PortAdmission::Replay { result } => answer::replayed(key.as_str(), &result),
                PortAdmission::Failed { error } => {
                    answer::failed_before(name, key.as_str(), &error)
                }
                // Other arguments on a key whose outcome is unknown (issue 51): the
                // guard offers a lookup by key (harmless whatever the arguments),
                // never a resend; a person decides the rest.
                PortAdmission::Mismatch {
                    differing_fields,
                    lookup_token: Some(token),
                    ..
                } => {
                    let held = held(token, tool.policy.call_timeout);
                    self.check_earlier(&held, &differing_fields).await
                }
                PortAdmission::Mismatch {
                    differing_fields,
                    natural,
                    ..
                } => answer::mismatch(name, key.as_str(), &differing_fields, natural),
                PortAdmission::InFlight { lease_until } => {
                    if Instant::now() < deadline
                        && self.wait_settled(&key, lease_until, deadline).await
                    {
                        continue;
                    }
                    answer::in_flight(name, key.as_str(), lease_until)
                }
            };
        }
    }

    /// Waits, reading the key's state, until it is no longer in progress, its lease
    /// (`lease_until`, as the admission saw it) has run out, or `deadline` passes; true
    /// if it changed. Reads only: another admission would log an `in_flight_rejected`
    /// row per poll.
    async fn wait_settled(
        &self,
        key: &IdempotencyKey,
        lease_until: DateTime<Utc>,
        deadline: Instant,
    ) -> bool {
        let mut pause = Duration::from_millis(20);
        while Instant::now() < deadline {
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_millis(500));
            match self.guard.key_state(key).await {
                Ok(Some(state)) => {
                    let lease = state.lease_until.unwrap_or(lease_until);
                    if state.status != Status::InProgress || lease <= self.clock.now() {
                        return true;
                    }
                }
                // Pruned, or the database is away: let the admission say which.
                Ok(None) | Err(_) => return true,
            }
        }
        false
    }

    /// Calls the upstream under the held key and settles the outcome.
    async fn execute(&self, held: &Lease<'_>) -> CallToolResult {
        let Lease { name, tool, .. } = *held;
        let mut sent = held.arguments.clone();
        if let Some(arg) = &tool.key_argument {
            sent.insert(arg.clone(), json!(held.key.as_str()));
        }
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(sent);
        let started = Instant::now();
        let answer = self.upstream.call(params, held.call_timeout).await;
        let duration_ms = i64::try_from(started.elapsed().as_millis()).ok();
        let key = held.key.as_str();
        let (outcome, reply) = match answer {
            Ok(result) if result.is_error != Some(true) => {
                let stored = serde_json::to_value(&result).unwrap_or(Value::Null);
                (CallOutcome::Done { result: stored }, result)
            }
            // The tool ran and said it failed: the server's own definitive answer.
            Ok(result) => (
                CallOutcome::Failed {
                    error: super::lookup::text_of(&result),
                },
                result,
            ),
            Err(UpstreamError::Refused(why)) => (
                CallOutcome::Failed { error: why.clone() },
                answer::refused(&format!("the upstream server refused {name}: {why}")),
            ),
            Err(e) => {
                let reason = format!("the upstream server: {e}");
                let reply = answer::unknown(name, key, &reason, &self.pages, tool.lookup.is_some());
                (CallOutcome::Unknown { reason }, reply)
            }
        };
        match held.guard.settle(held.fenced(duration_ms), outcome).await {
            Ok(_) => reply,
            Err(e) => answer::guard_error(name, &e),
        }
    }

    /// After a takeover: the lookup first; then what the guard decides on it (a
    /// replay of the effect found, a resend with the same key while the server still
    /// remembers it, UNKNOWN again, or a person).
    async fn reconcile(&self, held: &Lease<'_>) -> CallToolResult {
        let Lease { name, tool, .. } = *held;
        let key = held.key.as_str();
        let (found, duration_ms) = self.look_up(held).await;
        match held
            .guard
            .report_lookup(held.fenced(duration_ms), found)
            .await
        {
            Ok(AfterLookup::Found { result }) => answer::replayed(key, &result),
            Ok(AfterLookup::Resend) => self.execute(held).await,
            Ok(AfterLookup::Unknown { reason }) => {
                answer::unknown(name, key, &reason, &self.pages, tool.lookup.is_some())
            }
            Err(PortError::Guard(GuardError::NeedsHumanReview { .. })) => {
                answer::needs_person(name, key, &self.pages)
            }
            Err(e) => answer::guard_error(name, &e),
        }
    }

    /// A call with other arguments than the UNKNOWN key's first call: the earlier
    /// call's effect is looked up by key under the token the guard offered (the guard
    /// never resends on it), and the model is told this call was not run.
    async fn check_earlier(&self, held: &Lease<'_>, differing: &[String]) -> CallToolResult {
        let Lease { name, tool, .. } = *held;
        let key = held.key.as_str();
        if tool.lookup.is_none() {
            return answer::earlier_unknown(name, key, differing, &self.pages);
        }
        let (found, duration_ms) = self.look_up(held).await;
        match held
            .guard
            .report_lookup(held.fenced(duration_ms), found)
            .await
        {
            Ok(AfterLookup::Found { .. }) => answer::earlier_found(name, key, differing),
            Ok(_) | Err(PortError::Guard(GuardError::NeedsHumanReview { .. })) => {
                answer::earlier_unknown(name, key, differing, &self.pages)
            }
            Err(e) => answer::guard_error(name, &e),
        }
    }

    /// The tool's lookup by key at the upstream, and how long it took.
    async fn look_up(&self, held: &Lease<'_>) -> (Lookup, Option<i64>) {
        let Lease { name, tool, .. } = *held;
        let started = Instant::now();
        let found = match &tool.lookup {
            None => Lookup::Failed(format!(
                "no lookup is configured for {name}: a person must check the server"
            )),
            Some(spec) => {
                let params = CallToolRequestParams::new(spec.tool.clone())
                    .with_arguments(super::lookup::arguments(spec, &held.key));
                match self.upstream.call(params, held.call_timeout).await {
                    Ok(answer) => match super::lookup::read(spec, &answer) {
                        Ok(Some(effect)) => Lookup::Found(found_result(&spec.tool, effect)),
                        Ok(None) => Lookup::NotFound,
                        Err(why) => Lookup::Failed(why),
                    },
                    Err(e) => Lookup::Failed(format!("the lookup tool {}: {e}", spec.tool)),
                }
            }
        };
        (found, i64::try_from(started.elapsed().as_millis()).ok())
    }
}

/// What a lookup found, stored as the key's result in the shape of a tool result.
fn found_result(lookup_tool: &str, effect: Value) -> Value {
    let text = format!("found by {lookup_tool}: {effect}");
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(effect);
    serde_json::to_value(&r).unwrap_or(Value::Null)
}

/// The business ref support searches by: the tool and its natural key's values
/// (`issue_refund order=A-88214`), when short enough to be one.
pub(super) fn business_ref(tool: &str, natural: &Value) -> Option<String> {
    let fields = natural.as_object()?;
    let parts: Vec<String> = fields
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    let text = format!("{tool} {}", parts.join(","));
    (text.len() <= 512).then_some(text)
}
