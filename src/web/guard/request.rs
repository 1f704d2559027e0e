//! [`GuardRequest<T>`]: the one reader of a guard request. In this order, each step
//! cheaper than the next and refusing before it:
//!
//! 1. the caller ([`Principal`], set by the auth middleware) and `Content-Type:
//!    application/json` (a cross-site page cannot send it without a CORS preflight,
//!    which idemwatch never grants: this keeps browsers out without an auth file);
//! 2. a slot of the caller's concurrency and rate (429, before any byte is read);
//! 3. the body, read up to `--guard-max-body-bytes` (413 naming the limit);
//! 4. serde's derive into the body's wire struct, `serde_path_to_error` naming the
//!    member at fault; then the body's one `validate()`.
//!
//! Members holding any JSON stay raw text (`body.rs`), so what a token may not touch
//! is never grown into a tree.

use super::body::{
    AdmitBody, AdmitWire, Object, ReconcileBody, ReconcileWire, SettleBody, SettleWire,
};
use super::limits::{Permit, too_large};
use crate::auth::{Principal, Via};
use crate::web::problem::Problem;
use crate::web::{AppState, Error};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

/// A guard body: its wire struct and the check that makes it the body.
pub(crate) trait GuardBody: Sized {
    type Wire: DeserializeOwned;
    fn validate(wire: Self::Wire) -> Result<Self, Error>;
}

impl GuardBody for AdmitBody {
    type Wire = AdmitWire;
    fn validate(wire: AdmitWire) -> Result<Self, Error> {
        wire.validate()
    }
}

impl GuardBody for SettleBody {
    type Wire = SettleWire;
    fn validate(wire: SettleWire) -> Result<Self, Error> {
        wire.validate()
    }
}

impl GuardBody for ReconcileBody {
    type Wire = ReconcileWire;
    fn validate(wire: ReconcileWire) -> Result<Self, Error> {
        wire.validate()
    }
}

/// A guard request: who calls, its body read and checked, and the caller's slot,
/// held until the handler returns.
pub(crate) struct GuardRequest<T> {
    pub principal: Principal,
    pub body: T,
    _permit: Permit,
}

impl<T: GuardBody> FromRequest<AppState> for GuardRequest<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Error> {
        let (mut parts, body) = req.into_parts();
        let principal = Principal::from_request_parts(&mut parts, state).await?;
        require_json(&parts.headers)?;
        let permit = slot(state, &principal)?;
        let limit = state.guard_limiter.limits().max_body_bytes;
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > u64::from(limit)) {
            return Err(too_large(limit));
        }
        let bytes = match Limited::new(body, limit as usize).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(too_large(limit));
            }
            Err(e) => {
                return Err(Error::bad_request(
                    "body",
                    format!("could not be read: {e}"),
                ));
            }
        };
        let wire = read::<T::Wire>(&bytes)?;
        Ok(Self {
            principal,
            body: T::validate(wire)?,
            _permit: permit,
        })
    }
}

/// A slot of the caller's guard bounds (a route without a body takes one too).
pub fn slot(state: &AppState, principal: &Principal) -> Result<Permit, Error> {
    let who = match principal.via {
        Via::Local => "local".to_string(),
        _ => principal.actor(),
    };
    state.guard_limiter.admit(&who)
}

/// The body read once, straight into `W`; a refusal names the member at fault:
/// `intent.tool`, `fencing_token`, or `body` for a body that is not a JSON object.
fn read<W: DeserializeOwned>(bytes: &[u8]) -> Result<W, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let wire = serde_path_to_error::deserialize::<_, Object<W>>(&mut de).map_err(|e| {
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            return Error::bad_request("body", format!("is not valid JSON: {inner}"));
        }
        let mut field: Vec<String> = e
            .path()
            .iter()
            .map(|segment| match segment {
                serde_path_to_error::Segment::Map { key } => key.clone(),
                serde_path_to_error::Segment::Seq { index } => index.to_string(),
                _ => "?".into(),
            })
            .collect();
        // serde reports a missing member on its object: name the member; and an
        // unknown one under its own name: name the object that does not take it.
        let message = inner.to_string();
        if message.starts_with("unknown field `") {
            field.pop();
        }
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            field.push(name.to_string());
        }
        let field = match field.join(".") {
            f if f.is_empty() => "body".to_string(),
            f => f,
        };
        invalid(field, message)
    })?;
    de.end()
        .map_err(|e| Error::bad_request("body", format!("is not valid JSON: {e}")))?;
    Ok(wire.0)
}

/// 400 `invalid` naming `field`: the same document as [`Error::BadRequest`], for a
/// field named at run time.
pub fn invalid(field: String, message: String) -> Error {
    Error::refused(
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            "That input cannot be read",
            format!("{field}: {message}"),
        )
        .field(field),
    )
}

/// 400 unless the request says its body is JSON.
fn require_json(headers: &HeaderMap) -> Result<(), Error> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(Error::bad_request(
            "content-type",
            "the guard takes JSON: send Content-Type: application/json",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        match r {
            Err(e) => e.problem().field.expect("a field"),
            other => panic!("{other:?}"),
        }
    }

    fn admit(body: &str) -> Result<AdmitBody, Error> {
        read::<AdmitWire>(body.as_bytes()).and_then(AdmitWire::validate)
    }
    fn settle(body: &str) -> Result<SettleBody, Error> {
        read::<SettleWire>(body.as_bytes()).and_then(SettleWire::validate)
    }
    fn reconcile(body: &str) -> Result<ReconcileBody, Error> {
        read::<ReconcileWire>(body.as_bytes()).and_then(ReconcileWire::validate)
    }

    const INTENT: &str = r#""intent":{"tenant":"acme","tool":"issue_refund","workflow_id":"w","step_id":"4","intent_id":"i"}"#;

    #[test]
    fn each_bad_admit_names_its_field() {
        let with = |rest: &str| admit(&format!("{{{INTENT}{rest}}}"));
        assert!(with(r#","args":{"a":1}"#).unwrap().args().is_ok());
        assert_eq!(field(admit("{")), "body");
        assert_eq!(field(admit("[]")), "body");
        assert_eq!(field(with(r#","args":{}} x"#)), "body");
        assert_eq!(field(admit(r#"{"args":{}}"#)), "intent");
        assert_eq!(field(with(r#","args":[1]"#)), "args");
        assert_eq!(field(with(r#","args":null"#)), "args");
        assert_eq!(field(with("")), "args");
        assert_eq!(field(with(r#","args":{},"worker":7"#)), "worker");
        assert_eq!(field(with(r#","args":{},"worker":"a\nb""#)), "worker");
        assert_eq!(
            field(with(r#","args":{},"business_ref":"""#)),
            "business_ref"
        );
        assert_eq!(field(with(r#","args":{},"extra":1"#)), "body");
        let no_tool = r#"{"intent":{"tenant":"acme","workflow_id":"w","step_id":"4","intent_id":"i"},"args":{}}"#;
        assert_eq!(field(admit(no_tool)), "intent.tool");
        let numeric_step = r#"{"intent":{"tenant":"acme","tool":"t","workflow_id":"w","step_id":4,"intent_id":"i"},"args":{}}"#;
        assert_eq!(field(admit(numeric_step)), "intent.step_id");
        let listed = r#"{"intent":["acme","t","w","4","i"],"args":{}}"#;
        assert_eq!(field(admit(listed)), "intent");
        let extra = r#"{"intent":{"tenant":"acme","tool":"t","workflow_id":"w","step_id":"4","intent_id":"i","x":1},"args":{}}"#;
        assert_eq!(field(admit(extra)), "intent");
    }

    #[test]
    fn a_tool_name_outside_the_grammar_is_refused_naming_the_field() {
        for tool in ["[click](https://x.example)", "a b", &"t".repeat(129), "é"] {
            let body = format!(
                r#"{{"intent":{{"tenant":"acme","tool":{},"workflow_id":"w","step_id":"4","intent_id":"i"}},"args":{{}}}}"#,
                serde_json::json!(tool)
            );
            assert_eq!(field(admit(&body)), "intent.tool", "{tool}");
        }
        for tool in ["issue_refund", "billing.refund-v2", "mcp:server/tool"] {
            assert!(check_ok(tool), "{tool}");
        }
    }

    fn check_ok(tool: &str) -> bool {
        super::super::body::check_tool(tool).is_ok()
    }

    #[test]
    fn a_nul_character_anywhere_is_refused_naming_the_member() {
        let args = |a: &str| admit(&format!("{{{INTENT},\"args\":{a}}}")).unwrap().args();
        assert_eq!(field(args(r#"{"a":["ok","b\u0000"]}"#)), "args");
        assert_eq!(field(args(r#"{"a\u0000":1}"#)), "args");
        assert!(args(r#"{"a":"ok"}"#).is_ok());
        let tenant = r#"{"intent":{"tenant":"t\u0000","tool":"x","workflow_id":"w","step_id":"1","intent_id":"i"},"args":{}}"#;
        assert_eq!(field(admit(tenant)), "intent.tenant");
    }

    #[test]
    fn arguments_past_the_value_cap_are_refused_before_they_are_read() {
        use super::super::body::MAX_VALUES;
        let args = |n: usize| {
            let list = vec!["[0]"; n].join(",");
            admit(&format!(
                "{{{INTENT},\"args\":{{\"a\":[{list}],\"s\":\"[,{{\\\"\"}}}}"
            ))
            .unwrap()
            .args()
        };
        // One, `{`, the list's `[`, each cell's `[`, the n - 1 commas between cells
        // and the member's `,`: 2n + 3 counted (not the brackets and commas inside the
        // string).
        assert!(args(MAX_VALUES / 2 - 2).is_ok());
        assert_eq!(field(args(MAX_VALUES / 2 - 1)), "args");
    }

    #[test]
    fn a_whole_number_may_be_written_with_a_fraction_of_zero() {
        let s = settle(
            r#"{"key":"0000000000000000000000000000000000000000000000000000000000000000",
                "fencing_token":2.0,"outcome":"done","result":1,"duration_ms":12.0}"#,
        )
        .unwrap();
        assert_eq!((s.fencing_token, s.duration_ms), (2, Some(12)));
        let half = r#"{"key":"0000000000000000000000000000000000000000000000000000000000000000",
                "fencing_token":2.5,"outcome":"unknown","reason":"r"}"#;
        assert_eq!(field(settle(half)), "fencing_token");
    }

    #[test]
    fn each_bad_settle_names_its_field() {
        let key = "a".repeat(64);
        let with = |rest: &str| settle(&format!(r#"{{"key":"{key}","fencing_token":1{rest}}}"#));
        let done = |rest: &str| with(rest).and_then(|s| s.outcome.read());
        assert!(done(r#","outcome":"done","result":{"id":1}"#).is_ok());
        assert!(done(r#","outcome":"done","result":null"#).is_ok());
        assert_eq!(field(with(r#","outcome":"done""#)), "result");
        assert_eq!(field(with(r#","outcome":"failed""#)), "error");
        assert_eq!(field(with(r#","outcome":"failed","error":3"#)), "error");
        assert_eq!(field(with(r#","outcome":"unknown","reason":"""#)), "reason");
        assert_eq!(field(with(r#","outcome":"maybe""#)), "outcome");
        assert_eq!(field(with("")), "outcome");
        assert_eq!(
            field(with(r#","outcome":"failed","error":"x","result":1"#)),
            "result"
        );
        assert_eq!(
            field(with(r#","outcome":"done","result":1,"error":null"#)),
            "error"
        );
        assert_eq!(
            field(done(r#","outcome":"done","result":9007199254740993"#)),
            "result"
        );
        assert_eq!(
            field(with(r#","outcome":"done","result":1,"duration_ms":-1"#)),
            "duration_ms"
        );
        let zero =
            format!(r#"{{"key":"{key}","fencing_token":0,"outcome":"unknown","reason":"r"}}"#);
        assert_eq!(field(settle(&zero)), "fencing_token");
        let text =
            format!(r#"{{"key":"{key}","fencing_token":"1","outcome":"unknown","reason":"r"}}"#);
        assert_eq!(field(settle(&text)), "fencing_token");
        let bad_key = r#"{"key":"ABC","fencing_token":1,"outcome":"unknown","reason":"r"}"#;
        assert_eq!(field(settle(bad_key)), "key");
    }

    #[test]
    fn each_bad_reconcile_names_its_field() {
        let key = "a".repeat(64);
        let with = |rest: &str| reconcile(&format!(r#"{{"key":"{key}","fencing_token":2{rest}}}"#));
        assert!(matches!(
            with(r#","lookup":"not_found""#).unwrap().lookup,
            super::super::body::Looked::NotFound
        ));
        assert_eq!(field(with(r#","lookup":"found""#)), "result");
        assert_eq!(field(with(r#","lookup":"failed""#)), "error");
        assert_eq!(field(with(r#","lookup":"nothing""#)), "lookup");
        assert_eq!(
            field(with(r#","lookup":"not_found","result":{}"#)),
            "result"
        );
    }

    #[test]
    fn the_wait_is_bounded_and_named() {
        use super::super::body::WaitQuery;
        use std::time::Duration;
        let q = WaitQuery::parse(Some("after_token=3&wait=30")).unwrap();
        assert_eq!((q.after_token, q.wait), (Some(3), Duration::from_secs(30)));
        assert_eq!(WaitQuery::parse(None).unwrap().wait, Duration::ZERO);
        assert_eq!(field(WaitQuery::parse(Some("wait=61"))), "wait");
        assert_eq!(
            field(WaitQuery::parse(Some("after_token=x"))),
            "after_token"
        );
        assert_eq!(
            field(WaitQuery::parse(Some("attempts_after=-1"))),
            "attempts_after"
        );
        assert_eq!(field(WaitQuery::parse(Some("wiat=3"))), "query");
    }
}
