//! What the model reads: every answer of a guarded call as an MCP tool result. Each
//! says what happened and what the model may do next, in one place, and carries the
//! key and the decision in `_meta` (`io.idemwatch/guard`) for hosts that read it.

use chrono::{DateTime, Utc};
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};

/// The `_meta` member idemwatch adds to the answers it makes.
pub const META: &str = "io.idemwatch/guard";

/// Where a person decides about a key, when the proxy knows the public URL.
#[derive(Debug, Clone, Default)]
pub struct KeyPages {
    pub public_url: Option<String>,
}

impl KeyPages {
    pub fn of(&self, key: &str) -> Option<String> {
        self.public_url
            .as_ref()
            .map(|base| format!("{}/keys/{key}", base.trim_end_matches('/')))
    }

    fn sentence(&self, key: &str) -> String {
        match self.of(key) {
            Some(url) => format!(" The key's page: {url}"),
            None => String::new(),
        }
    }
}

fn marked(mut result: CallToolResult, meta: Value) -> CallToolResult {
    let mut object = result.meta.take().unwrap_or_default();
    object.0.insert(META.to_string(), meta);
    result.meta = Some(object);
    result
}

fn error(text: String, meta: Value) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.meta = Some(MetaObject::default());
    marked(r, meta)
}

/// A stored result as an MCP result: what the proxy stored (the upstream's own result),
/// or a result a person or a lookup recorded, shown as structured content.
pub fn stored(result: &Value) -> CallToolResult {
    let is_tool_result = result.get("content").is_some_and(Value::is_array);
    if is_tool_result && let Ok(r) = serde_json::from_value::<CallToolResult>(result.clone()) {
        return r;
    }
    let mut r = CallToolResult::structured(result.clone());
    r.is_error = None;
    r
}

/// DONE earlier: the original result, marked, with one line saying so.
pub fn replayed(key: &str, result: &Value) -> CallToolResult {
    let mut r = stored(result);
    r.content.push(ContentBlock::text(format!(
        "idemwatch: this is the result of an earlier identical call (key {key}); no new effect happened."
    )));
    marked(
        r,
        json!({"key": key, "decision": "replay", "replayed": true}),
    )
}

pub fn failed_before(tool: &str, key: &str, failure: &str) -> CallToolResult {
    error(
        format!(
            "{tool} already failed for these arguments and was not run again (key {key}): {failure}. The server refused it definitively; calling again with the same arguments returns this failure."
        ),
        json!({"key": key, "decision": "failed", "replayed": true}),
    )
}

pub fn in_flight(tool: &str, key: &str, lease_until: DateTime<Utc>) -> CallToolResult {
    error(
        format!(
            "{tool} with these arguments is still running (key {key}; its lease ends at {}). Do not call it again with other arguments; ask idemwatch_status with this key later, or call again with the same arguments.",
            crate::guard::rfc3339(lease_until)
        ),
        json!({"key": key, "decision": "in_flight", "lease_until": crate::guard::rfc3339(lease_until)}),
    )
}

pub fn mismatch(tool: &str, key: &str, fields: &[String], natural: bool) -> CallToolResult {
    let fields = fields.join(", ");
    let advice = if natural {
        "This action (the same natural key) was already requested with other values: it is not run a second time. Ask a person which values are right."
    } else {
        "The same idempotencyKey was used with other arguments: a new action needs a new idempotencyKey."
    };
    error(
        format!(
            "{tool} was refused: key {key} was first used with other arguments (differing: {fields}). {advice}"
        ),
        json!({"key": key, "decision": "payload_mismatch", "differing_fields": fields}),
    )
}

pub fn unknown(
    tool: &str,
    key: &str,
    reason: &str,
    pages: &KeyPages,
    has_lookup: bool,
) -> CallToolResult {
    let next = if has_lookup {
        "Do not call it again blindly: ask idemwatch_status with this key first. Calling it again with the same arguments looks the effect up at the server before anything is resent."
    } else {
        "Do not call it again blindly: ask idemwatch_status with this key; without a lookup for this tool a person checks the server and decides."
    };
    error(
        format!(
            "The outcome of {tool} is UNKNOWN ({reason}): the effect may have happened. {next} Key: {key}.{}",
            pages.sentence(key)
        ),
        json!({"key": key, "decision": "unknown", "reason": reason}),
    )
}

pub fn needs_person(tool: &str, key: &str, pages: &KeyPages) -> CallToolResult {
    error(
        format!(
            "{tool}: a person decides about key {key}: the server no longer remembers the key and shows no effect, so a resend could act twice. Do not call it again; tell the user a person must check.{}",
            pages.sentence(key)
        ),
        json!({"key": key, "decision": "needs_human_review", "page": pages.of(key)}),
    )
}

pub fn refused(why: &str) -> CallToolResult {
    error(
        format!("idemwatch refused the call: {why}"),
        json!({"decision": "refused"}),
    )
}

/// The guard could not be reached or refused the call as malformed.
pub fn guard_error(tool: &str, e: &dyn std::fmt::Display) -> CallToolResult {
    error(
        format!("{tool} was not run: the idempotency guard answered: {e}"),
        json!({"decision": "error"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_keeps_the_original_and_says_no_new_effect_happened() {
        let original = json!({"content": [{"type": "text", "text": "refund rf_1"}], "structuredContent": {"id": "rf_1"}});
        let r = replayed("k", &original);
        assert_eq!(r.structured_content, Some(json!({"id": "rf_1"})));
        assert_eq!(r.content.len(), 2);
        assert_eq!(r.meta.unwrap().0[META]["replayed"], json!(true));
    }

    #[test]
    fn a_result_a_person_recorded_is_structured_content() {
        let r = stored(&json!({"refund_id": "rf_8"}));
        assert_eq!(r.structured_content, Some(json!({"refund_id": "rf_8"})));
        assert_ne!(r.is_error, Some(true));
    }

    #[test]
    fn the_page_url_is_named_when_public() {
        let pages = KeyPages {
            public_url: Some("https://idem.example/".into()),
        };
        let r = needs_person("refund", "abc", &pages);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("https://idem.example/keys/abc"), "{text}");
    }
}
