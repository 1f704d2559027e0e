//! `context`: what a worker may add to the attempt log about its call, such as the MCP
//! proxy's session id, JSON-RPC request id and client (docs/GUARD.md). Optional on
//! every body that writes attempts (admit, settle, reconcile); recorded as the
//! `context` member of each attempt row the request writes (`guard::WithContext`),
//! and shown on the key page with the rest of the detail.
//!
//! It is the caller's own words, never a decision's input: small and bounded, so a
//! worker cannot grow every row of a key by sending a large one.

use crate::base::canonical::holds_nul;
use crate::web::Error;
use serde_json::Value;
use serde_json::value::RawValue;

/// The most bytes of JSON text a context may take (the MCP proxy's three members
/// take ~150).
pub const MAX_CONTEXT_BYTES: usize = 1024;

/// The context as sent, read: absent or `null` is none; else a JSON object of at most
/// [`MAX_CONTEXT_BYTES`], without NUL (PostgreSQL's jsonb cannot hold U+0000).
pub(crate) fn read(raw: Option<Box<RawValue>>) -> Result<Option<Value>, Error> {
    let Some(raw) = raw else { return Ok(None) };
    let bad = |message: String| Error::bad_request("context", message);
    if raw.get().len() > MAX_CONTEXT_BYTES {
        return Err(bad(format!(
            "must be at most {MAX_CONTEXT_BYTES} bytes of JSON"
        )));
    }
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::Null) => Ok(None),
        Ok(v @ Value::Object(_)) if !holds_nul(&v) => Ok(Some(v)),
        Ok(Value::Object(_)) => Err(bad(
            "must not contain the NUL character (U+0000)".to_string()
        )),
        _ => Err(bad(
            "expected a JSON object (e.g. {\"session_id\": …, \"request_id\": …})".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Option<Box<RawValue>> {
        Some(RawValue::from_string(text.to_string()).unwrap())
    }

    fn refused(text: &str) -> String {
        let e = read(raw(text)).unwrap_err();
        let problem = e.problem();
        assert_eq!(problem.field.as_deref(), Some("context"), "{text}");
        problem.detail.clone()
    }

    #[test]
    fn a_context_is_a_small_json_object_or_nothing() {
        assert_eq!(read(None).unwrap(), None);
        assert_eq!(read(raw("null")).unwrap(), None);
        let ok = read(raw(r#"{"session_id":"s","request_id":7}"#)).unwrap();
        assert_eq!(
            ok,
            Some(serde_json::json!({"session_id": "s", "request_id": 7}))
        );
        assert!(refused("[1]").contains("expected a JSON object"));
        assert!(refused(r#""s""#).contains("expected a JSON object"));
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_CONTEXT_BYTES));
        assert!(refused(&big).contains("at most 1024 bytes"));
        assert!(refused(r#"{"a":"\u0000"}"#).contains("NUL"));
    }
}
