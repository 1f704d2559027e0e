//! The reconciliation query of a guarded tool, run on the same upstream (the tools
//! file's `lookup = { tool, arguments, found }`): the clients' `find_by_key`, for MCP.

use crate::guard::{IdempotencyKey, LookupEntry};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::Value;

/// The lookup's arguments: every `{key}` in a string value replaced by the key.
pub fn arguments(spec: &LookupEntry, key: &IdempotencyKey) -> JsonObject {
    spec.arguments
        .iter()
        .map(|(name, value)| (name.clone(), with_key(value, key.as_str())))
        .collect()
}

fn with_key(value: &Value, key: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("{key}", key)),
        Value::Array(items) => Value::Array(items.iter().map(|v| with_key(v, key)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), with_key(v, key)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What the lookup's answer says: `Ok(Some(effect))`, `Ok(None)` (not found), or
/// `Err(why)` when the lookup itself failed (a tool error).
pub fn read(spec: &LookupEntry, answer: &CallToolResult) -> Result<Option<Value>, String> {
    let text = text_of(answer);
    if answer.is_error == Some(true) {
        return Err(format!("the lookup tool {} failed: {text}", spec.tool));
    }
    let whole = match &answer.structured_content {
        Some(v) => v.clone(),
        None => serde_json::from_str(&text).unwrap_or(Value::String(text)),
    };
    let at = whole.pointer(&spec.found).cloned();
    Ok(at.filter(|v| !is_empty(v)))
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// The text blocks of a result, joined: what a tool error says.
pub fn text_of(answer: &CallToolResult) -> String {
    answer
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(found: &str) -> LookupEntry {
        LookupEntry {
            tool: "find_refund".into(),
            arguments: json!({"idempotency_key": "{key}", "n": 1})
                .as_object()
                .unwrap()
                .clone(),
            found: found.into(),
        }
    }

    fn answer(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_key_goes_where_the_template_says() {
        let key = IdempotencyKey::parse(&"a".repeat(64)).unwrap();
        let args = arguments(&spec(""), &key);
        assert_eq!(args["idempotency_key"], json!("a".repeat(64)));
        assert_eq!(args["n"], json!(1));
    }

    #[test]
    fn found_not_found_and_failed_are_told_apart() {
        let s = spec("/refund");
        let found = answer(json!({"content": [], "structuredContent": {"refund": {"id": "rf_1"}}}));
        assert_eq!(read(&s, &found).unwrap(), Some(json!({"id": "rf_1"})));
        let none = answer(json!({"content": [], "structuredContent": {"refund": null}}));
        assert_eq!(read(&s, &none).unwrap(), None);
        let text = answer(
            json!({"content": [{"type": "text", "text": "{\"refund\": {\"id\": \"rf_2\"}}"}]}),
        );
        assert_eq!(read(&s, &text).unwrap(), Some(json!({"id": "rf_2"})));
        let failed =
            answer(json!({"content": [{"type": "text", "text": "db down"}], "isError": true}));
        assert!(read(&s, &failed).unwrap_err().contains("db down"));
        let whole = answer(json!({"content": [{"type": "text", "text": ""}]}));
        assert_eq!(read(&spec(""), &whole).unwrap(), None);
    }
}
