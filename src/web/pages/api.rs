//! The JSON API for scripts. Errors come back as JSON (see `web::error::json_under_api`).
//!
//! - `GET /api/v1/keys/{key}`: one key's record and its attempts, at most
//!   [`TIMELINE_PAGE`] of them after `?after=SEQ` (default from the first); `next` is
//!   the URL of the following page, or null.
//! - `POST /api/v1/keys/{key}/resolve`: a person's decision, through the guard, with
//!   `{"resolution": "done"|"failed"|"release", "reason": "…", "evidence": "rf_8XM1",
//!   "result": {…}, "expected_token": 3}`; answers the key as `GET` does. 400 names the
//!   field, 409 when the key moved (or a worker holds it), 422 when it cannot be resolved.
//! - `GET /api/v1/csrf`: the CSRF token a browser-authenticated caller sends in
//!   `X-CSRF-Token` (bearer-token callers need none).

use super::key_detail::{TIMELINE_PAGE, parse_after};
use super::params::{parse_key, parse_resolution};
use crate::auth::Principal;
use crate::guard::{Attempt, FencingToken, IdempotencyKey, Record, ResolveRequest};
use crate::web::auth::{Csrf, check_api_csrf, require_resolve};
use crate::web::links::link;
use crate::web::{AppState, Error};
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::middleware::from_fn;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Map, Value, json};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/keys/{key}", get(key))
        .route(
            "/api/v1/keys/{key}/resolve",
            post(resolve).layer(from_fn(require_resolve)),
        )
        .route("/api/v1/csrf", get(csrf))
}

#[derive(Serialize)]
struct KeyView {
    record: Record,
    attempts: Vec<Attempt>,
    /// The next page of attempts (`?after=` the last one here), or null.
    next: Option<String>,
}

async fn key(
    State(state): State<AppState>,
    key: Result<Path<String>, PathRejection>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<KeyView>, Error> {
    let key = parse_key(&path_key(key)?)?;
    // The JSON API takes `after` as the integer its schema declares: an empty value is a
    // client's mistake, not "from the first" as the page's own links may send it.
    if pairs
        .iter()
        .any(|(k, v)| k == "after" && v.trim().is_empty())
    {
        return Err(Error::bad_request(
            "after",
            "after must be an attempt number (0 or more), not empty".to_string(),
        ));
    }
    let after = parse_after(&pairs)?;
    view(&state, &key, after).await.map(Json)
}

/// The `{key}` segment, or a 400 naming it in the JSON error shape (axum's own
/// rejection, for `%FF` say, is plain text).
fn path_key(key: Result<Path<String>, PathRejection>) -> Result<String, Error> {
    key.map(|Path(k)| k)
        .map_err(|e| Error::bad_request("key", e.body_text()))
}

async fn view(state: &AppState, key: &IdempotencyKey, after: i64) -> Result<KeyView, Error> {
    let record = state
        .store
        .record(key)
        .await?
        .ok_or_else(|| Error::NotFound(format!("No key {key} is recorded.")))?;
    let page = state.store.attempts_page(key, after, TIMELINE_PAGE).await?;
    let next = match page.attempts.last() {
        Some(last) if page.more => Some(link(
            &format!("/api/v1/keys/{key}"),
            &[("after", Some(&last.seq.to_string()))],
        )),
        _ => None,
    };
    Ok(KeyView {
        record,
        attempts: page.attempts,
        next,
    })
}

async fn csrf(csrf: Csrf) -> Json<Value> {
    Json(json!({ "csrf_token": csrf.token }))
}

const FIELDS: [&str; 5] = [
    "resolution",
    "reason",
    "evidence",
    "result",
    "expected_token",
];

/// The request body, each field checked and named when wrong. `actor` is never read
/// from the body: it is the authenticated caller.
fn parse_body(body: &[u8], actor: String) -> Result<ResolveRequest, Error> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Error::bad_request("body", format!("is not valid JSON: {e}")))?;
    let Value::Object(o) = value else {
        return Err(Error::bad_request("body", "expected a JSON object"));
    };
    if let Some(unknown) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Error::bad_request(
            "body",
            format!("unknown field {unknown:?}; expected {}", FIELDS.join(", ")),
        ));
    }
    let text = |o: &Map<String, Value>, field: &'static str| match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Error::bad_request(field, "expected a string")),
    };
    let resolution = match o.get("resolution") {
        None | Some(Value::String(_)) => parse_resolution(text(&o, "resolution")?.as_deref())?,
        Some(_) => {
            return Err(Error::bad_request(
                "resolution",
                "expected \"done\", \"failed\" or \"release\"",
            ));
        }
    };
    let expected_token = match o.get("expected_token") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().map(FencingToken).ok_or_else(|| {
            Error::bad_request(
                "expected_token",
                "expected a whole number (a fencing token)",
            )
        })?),
    };
    let req = ResolveRequest {
        resolution,
        reason: text(&o, "reason")?.unwrap_or_default().trim().to_string(),
        evidence: text(&o, "evidence")?
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        result: o.get("result").filter(|v| !v.is_null()).cloned(),
        actor,
        expected_token,
    };
    req.validate()?;
    Ok(req)
}

async fn resolve(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<KeyView>, Error> {
    check_api_csrf(&state, &principal, &headers)?;
    let key = parse_key(&path_key(key)?)?;
    let req = parse_body(&body, principal.actor())?;
    state.guard.resolve(&key, &req).await?;
    view(&state, &key, 0).await.map(Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::Resolution;

    fn field(body: &str) -> &'static str {
        match parse_body(body.as_bytes(), "token:ops".into()) {
            Err(Error::BadRequest { field, .. }) => field,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn each_bad_body_names_its_field() {
        assert_eq!(field("{\"resolution\": "), "body");
        assert_eq!(field("[1]"), "body");
        assert_eq!(
            field(r#"{"resolution":"done","reason":"r","evidance":"rf"}"#),
            "body"
        );
        assert_eq!(field(r#"{"reason":"r"}"#), "resolution");
        assert_eq!(
            field(r#"{"resolution":"refund","reason":"r"}"#),
            "resolution"
        );
        assert_eq!(field(r#"{"resolution":3,"reason":"r"}"#), "resolution");
        assert_eq!(field(r#"{"resolution":"failed"}"#), "reason");
        assert_eq!(field(r#"{"resolution":"done","reason":"r"}"#), "evidence");
        assert_eq!(
            field(r#"{"resolution":"failed","reason":"r","result":{}}"#),
            "result"
        );
        assert_eq!(
            field(r#"{"resolution":"failed","reason":"r","expected_token":"3"}"#),
            "expected_token"
        );
        assert_eq!(field(r#"{"resolution":"failed","reason":1}"#), "reason");
    }

    #[test]
    fn a_good_body_becomes_the_guards_request_with_the_caller_as_actor() {
        let req = parse_body(
            br#"{"resolution":"done","reason":"seen at provider","evidence":"rf_8XM1","result":{"id":"rf_8XM1"},"expected_token":3}"#,
            "token:ops".into(),
        )
        .unwrap();
        assert_eq!(req.resolution, Resolution::Done);
        assert_eq!(req.actor, "token:ops");
        assert_eq!(req.expected_token, Some(FencingToken(3)));
        assert_eq!(req.result, Some(json!({"id": "rf_8XM1"})));
    }
}
