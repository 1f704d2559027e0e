//! RFC 9457 problem details: the one error shape of `/api/` and `/export/`.
//!
//! ```json
//! {"type": "urn:idemwatch:problem:in_flight", "title": "In flight", "status": 409,
//!  "detail": "…", "code": "in_flight", "key": "…", "retry_after": 3, "lease_until": "…"}
//! ```
//!
//! `type` is `urn:idemwatch:problem:` and the `code`; `field` names the request field
//! at fault (400); the other members belong to the code (docs/GUARD.md).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

pub const CONTENT_TYPE: &str = "application/problem+json";

/// Marks a response whose body already is a problem document, so the middleware that
/// rewrites other error responses (`error::json_under_api`) leaves it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rendered;

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    /// A stable, machine-readable name: `invalid`, `in_flight`, `payload_mismatch`…
    pub code: &'static str,
    /// The same for every problem of this code.
    pub title: &'static str,
    /// A sentence about this occurrence that a person can act on.
    pub detail: String,
    /// The request field at fault, for 400 (`intent.tool`, `outcome`, `body`).
    pub field: Option<String>,
    /// Code-specific members (`key`, `retry_after`, `differing_fields`…).
    pub members: Map<String, Value>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code,
            title,
            detail: detail.into(),
            field: None,
            members: Map::new(),
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn member(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.members.insert(name.to_string(), value.into());
        self
    }

    /// The key this problem concerns, if any (the `Idempotency-Key` header).
    pub fn key(&self) -> Option<&str> {
        self.members.get("key").and_then(Value::as_str)
    }

    /// Seconds to wait before a retry (the `Retry-After` header), if any.
    pub fn retry_after(&self) -> Option<u64> {
        self.members.get("retry_after").and_then(Value::as_u64)
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut body = json!({
            "type": format!("urn:idemwatch:problem:{}", self.code),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let object = body.as_object_mut().expect("a problem is an object");
        if let Some(field) = &self.field {
            object.insert("field".into(), json!(field));
        }
        for (name, value) in &self.members {
            object.entry(name.clone()).or_insert_with(|| value.clone());
        }
        body
    }

    /// The problem as its own response, with its headers (`Retry-After`,
    /// `Idempotency-Key`).
    pub fn response(&self) -> Response {
        let mut response = Response::new(Body::from(self.to_json().to_string()));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        self.add_headers(&mut response);
        response.extensions_mut().insert(Rendered);
        response
    }

    pub(crate) fn add_headers(&self, response: &mut Response) {
        let headers = response.headers_mut();
        if let Some(seconds) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(v) = self.key().and_then(|k| HeaderValue::from_str(k).ok()) {
            headers.insert("idempotency-key", v);
        }
    }
}

/// The code and title of a status that no handler explained (axum's own rejections:
/// a body that is not JSON, a wrong method, a body too large).
pub(crate) fn for_status(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 | 415 | 422 => ("invalid", "That input cannot be read"),
        401 => ("unauthorized", "Sign in first"),
        403 => ("forbidden", "Not allowed"),
        404 => ("not_found", "Not found"),
        405 => ("method_not_allowed", "Method not allowed"),
        408 => ("timeout", "Request timed out"),
        413 => ("too_large", "Request body too large"),
        503 => ("unavailable", "Database unavailable"),
        s if s >= 500 => ("internal", "Something went wrong"),
        _ => ("invalid", "That input cannot be read"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_has_the_rfc_9457_members_and_its_own() {
        let p = Problem::new(StatusCode::CONFLICT, "in_flight", "In flight", "wait")
            .member("key", "k")
            .member("retry_after", 3);
        let v = p.to_json();
        assert_eq!(v["type"], "urn:idemwatch:problem:in_flight");
        assert_eq!(v["status"], 409);
        assert_eq!(v["retry_after"], 3);
        assert!(v.get("field").is_none());
        let r = p.response();
        assert_eq!(r.headers()["retry-after"], "3");
        assert_eq!(r.headers()["idempotency-key"], "k");
        assert_eq!(r.headers()["content-type"], CONTENT_TYPE);
    }

    #[test]
    fn a_member_cannot_overwrite_the_standard_ones() {
        let v = Problem::new(StatusCode::BAD_REQUEST, "invalid", "t", "d")
            .member("status", 200)
            .to_json();
        assert_eq!(v["status"], 400);
    }
}
