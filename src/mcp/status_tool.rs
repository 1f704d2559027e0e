//! `idemwatch_status`, the proxy's own read-only tool: given a key, or a tool and its
//! arguments, the key's state, its result or the reason, and what the model may do
//! next. Seed 000's "call the status tool before retrying".

use super::answer::KeyPages;
use super::call::Calls;
use super::classify::{Guarded, Treatment};
use super::intent::Session;
use super::port::KeyState;
use crate::guard::{BusinessArgs, IdempotencyKey, NaturalKey, Status};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const NAME: &str = "idemwatch_status";

/// The tool as `tools/list` shows it.
pub fn definition() -> Tool {
    serde_json::from_value(json!({
        "name": NAME,
        "title": "Check a guarded call before retrying it",
        "description": "Read-only. Tells whether a guarded tool call already happened: give the `key` an idemwatch answer named, or the `tool` and the `arguments` you called it with (and the idempotencyKey, if the host sent one). Answers the state (DONE, FAILED, IN_PROGRESS, UNKNOWN or not found), the stored result or the reason, and what you may do next. Call it before retrying anything whose outcome you did not see.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "The idemwatch key (64 hex characters)."},
                "tool": {"type": "string", "description": "The guarded tool's name."},
                "arguments": {"type": "object", "description": "The arguments the tool was called with."},
                "idempotencyKey": {"type": "string", "description": "The host's idempotencyKey for that call, if it sent one."}
            }
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "destructiveHint": false, "openWorldHint": false}
    }))
    .expect("the status tool's definition is valid")
}

pub async fn answer(
    calls: &Calls,
    tools: &BTreeMap<String, Treatment>,
    caller: &Session,
    args: &JsonObject,
) -> CallToolResult {
    match find(calls, tools, caller, args).await {
        Ok(found) => {
            let body = describe(found, &calls.pages, calls.clock.now());
            let text = format!(
                "{}\n{}",
                body["next"].as_str().unwrap_or_default(),
                serde_json::to_string(&body).unwrap_or_default()
            );
            let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
            r.structured_content = Some(body);
            r
        }
        Err(why) => CallToolResult::error(vec![ContentBlock::text(format!("{NAME}: {why}"))]),
    }
}

/// What the status is asked about.
struct Found {
    tool: Option<String>,
    has_lookup: bool,
    state: Option<KeyState>,
    /// The key the question names or the call would use, when there is no record.
    key: Option<IdempotencyKey>,
}

async fn find(
    calls: &Calls,
    tools: &BTreeMap<String, Treatment>,
    caller: &Session,
    args: &JsonObject,
) -> Result<Found, String> {
    let text = |name: &str| -> Result<Option<&str>, String> {
        match args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("`{name}` must be a string")),
        }
    };
    let guard_error = |e: super::port::PortError| format!("the guard: {e}");
    let (key, tool, guarded) = if let Some(key) = text("key")? {
        let key = IdempotencyKey::parse(key).map_err(|e| format!("`key`: {e}"))?;
        (key, None, None)
    } else if let Some(name) = text("tool")? {
        let guarded: &Guarded = match tools.get(name) {
            Some(Treatment::Guarded(g)) => g,
            Some(_) => return Err(format!("{name} is not a guarded tool: it has no keys")),
            None => return Err(format!("the upstream server has no tool {name:?}")),
        };
        let mut arguments = match args.get("arguments") {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Err("`arguments` must be an object".into()),
        };
        if let Some(arg) = &guarded.key_argument {
            arguments.remove(arg);
        }
        let business =
            BusinessArgs::new(&Value::Object(arguments), &guarded.policy.free_text_fields)
                .map_err(|e| format!("`arguments`: {e}"))?;
        let intent = caller.intent(name, text("idempotencyKey")?, &business.fingerprint);
        let key = intent.key().map_err(|e| format!("`idempotencyKey`: {e}"))?;
        // Under a natural key, the call may have reached another session's key.
        if calls
            .guard
            .key_state(&key)
            .await
            .map_err(guard_error)?
            .is_none()
            && let Ok(Some(natural)) = NaturalKey::of(&business, &guarded.policy.natural_key)
            && let Some(holder) = natural_holder(calls, caller, name, &natural).await?
        {
            (holder, Some(name.to_string()), Some(guarded))
        } else {
            (key, Some(name.to_string()), Some(guarded))
        }
    } else {
        return Err("give `key`, or `tool` and `arguments`".into());
    };
    let state = calls.guard.key_state(&key).await.map_err(guard_error)?;
    let tool = tool.or_else(|| state.as_ref().and_then(|s| s.tool.clone()));
    let has_lookup = match (guarded, &tool) {
        (Some(g), _) => g.lookup.is_some(),
        (None, Some(t)) => {
            matches!(tools.get(t), Some(Treatment::Guarded(g)) if g.lookup.is_some())
        }
        (None, None) => false,
    };
    Ok(Found {
        tool,
        has_lookup,
        key: Some(key),
        state,
    })
}

async fn natural_holder(
    calls: &Calls,
    caller: &Session,
    tool: &str,
    natural: &NaturalKey,
) -> Result<Option<IdempotencyKey>, String> {
    let Some(reference) = super::call::business_ref(tool, &natural.fields) else {
        return Ok(None);
    };
    calls
        .guard
        .holder_of(super::port::NaturalRef {
            tenant: &caller.tenant,
            tool,
            reference: &reference,
        })
        .await
        .map_err(|e| format!("the guard: {e}"))
}

fn describe(found: Found, pages: &KeyPages, now: chrono::DateTime<chrono::Utc>) -> Value {
    let tool = found.tool.as_deref().unwrap_or("the tool");
    let key = found.key.as_ref().map(|k| k.as_str().to_string());
    let Some(rec) = found.state else {
        return json!({
            "key": key, "status": "NOT_FOUND",
            "next": format!("No call of {tool} with this key or these arguments is recorded (calls without an idempotencyKey or a natural key are keyed per MCP session): calling {tool} performs the action."),
        });
    };
    let page = pages.of(rec.key.as_str());
    let next = match rec.status {
        Status::Done => format!(
            "{tool} already happened (result attached). Do not call it again for the same action: a call with the same arguments returns this result, not a new effect."
        ),
        Status::Failed => format!(
            "{tool} was refused definitively: {}. Calling again with the same arguments returns this failure.",
            rec.error.clone().unwrap_or_default()
        ),
        Status::InProgress if rec.lease_until.is_none_or(|until| until > now) => {
            match rec.lease_until {
                Some(until) => format!(
                    "{tool} is still running (until {} at the latest). Wait, then ask again.",
                    crate::guard::rfc3339(until)
                ),
                None => format!("{tool} is still running. Wait, then ask again."),
            }
        }
        _ if rec.awaiting_person => format!(
            "A person decides about this key: the server no longer remembers it and shows no effect, so a resend could act twice. Do not call {tool} again; tell the user."
        ),
        _ if found.has_lookup => format!(
            "The outcome is UNKNOWN: the effect may have happened. Call {tool} again only as the same action (the same arguments in this session or under the same natural key, or the same idempotencyKey): idemwatch then looks the effect up at the server first and resends only if it finds none while the server still remembers the key. A call that differs is a new action."
        ),
        _ => format!(
            "The outcome is UNKNOWN: the effect may have happened and {tool} has no lookup, so a person checks the server and decides. Do not call {tool} again; tell the user."
        ),
    };
    json!({
        "key": rec.key.as_str(),
        "tool": rec.tool.or(found.tool),
        "status": rec.status.as_str(),
        "result": rec.result,
        "error": rec.error,
        "awaiting_person": rec.awaiting_person,
        "page": page,
        "next": next,
    })
}
