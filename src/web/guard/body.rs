//! The guard routes' request bodies and query, each field checked and named when it is
//! wrong (400 `invalid` with `field`). Unknown members are refused too: a typo such as
//! `fencing_tokn` must not pass as "absent".
//!
//! A body is first read straight into the request's types (`wire.rs`), the common case
//! of every guarded call; only when that reading fails, or a value breaks a rule below,
//! is it read again here as a JSON tree, member by member, to name the field that is
//! wrong. Both readings share the rules (`check_*`); the fast one accepts only what this
//! one accepts, with the same result (a test in `wire.rs` holds them to it).

use super::wire;
use crate::guard::canonical::canonical_json;
use crate::guard::{CallOutcome, IdempotencyKey, Intent, Lookup};
use crate::web::Error;
use serde_json::{Map, Value};
use std::time::Duration;

/// The longest wait of a long poll.
pub(super) const MAX_WAIT_SECONDS: u64 = 60;
pub(super) const MAX_REF_BYTES: usize = 512;
pub(super) const MAX_WORKER_BYTES: usize = 200;
pub(super) const MAX_TEXT_BYTES: usize = 4000;
/// Each part of an intent.
pub(super) const MAX_INTENT_BYTES: usize = 512;

#[derive(Debug, Clone, PartialEq)]
pub struct AdmitBody {
    pub intent: Intent,
    pub business_ref: Option<String>,
    pub args: Value,
    pub worker: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SettleBody {
    pub key: IdempotencyKey,
    pub fencing_token: i64,
    pub outcome: CallOutcome,
    pub duration_ms: Option<i64>,
    pub worker: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileBody {
    pub key: IdempotencyKey,
    pub fencing_token: i64,
    pub lookup: Lookup,
    pub duration_ms: Option<i64>,
    pub worker: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitQuery {
    pub after_token: Option<i64>,
    pub wait: Duration,
}

type Object = Map<String, Value>;

fn bad(field: &'static str, message: impl Into<String>) -> Error {
    Error::bad_request(field, message)
}

/// The body as a JSON object whose members are all in `allowed`.
fn object(body: &[u8], allowed: &[&'static str]) -> Result<Object, Error> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad("body", format!("is not valid JSON: {e}")))?;
    let Value::Object(o) = value else {
        return Err(bad("body", "expected a JSON object"));
    };
    only(&o, "body", allowed)?;
    // PostgreSQL's text and jsonb cannot hold U+0000; SQLite can. Refused here, for both
    // backends alike, rather than failing in the store with a 500 on one of them.
    if let Some(field) = allowed
        .iter()
        .find(|name| o.get(**name).is_some_and(holds_nul))
    {
        return Err(bad(
            field,
            "must not contain the NUL character (U+0000), in a value or a member name",
        ));
    }
    Ok(o)
}

/// Whether any string or member name inside `v` contains U+0000.
pub(super) fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

fn only(o: &Object, field: &'static str, allowed: &[&str]) -> Result<(), Error> {
    match o.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(bad(
            field,
            format!(
                "unknown member {unknown:?}; expected {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

fn string(
    o: &Object,
    name: &str,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, Error> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => check_text(s, field, max).map(|()| Some(s.clone())),
        Some(_) => Err(bad(field, "expected a string")),
    }
}

/// A text member: not empty, at most `max` bytes.
pub(super) fn check_text(s: &str, field: &'static str, max: usize) -> Result<(), Error> {
    if s.is_empty() {
        Err(bad(field, "must not be empty"))
    } else if s.len() > max {
        Err(bad(field, format!("must be at most {max} bytes")))
    } else {
        Ok(())
    }
}

fn required(o: &Object, name: &str, field: &'static str, max: usize) -> Result<String, Error> {
    string(o, name, field, max)?.ok_or_else(|| bad(field, "is required"))
}

fn worker(o: &Object) -> Result<Option<String>, Error> {
    let w = string(o, "worker", "worker", MAX_WORKER_BYTES)?;
    w.as_deref().map_or(Ok(()), check_worker)?;
    Ok(w)
}

/// The worker id, already a text member: no control characters (it is shown in logs
/// and on pages as the attempt's actor).
pub(super) fn check_worker(w: &str) -> Result<(), Error> {
    if w.chars().any(char::is_control) {
        return Err(bad("worker", "must not contain control characters"));
    }
    Ok(())
}

fn key(o: &Object) -> Result<IdempotencyKey, Error> {
    let text = required(o, "key", "key", 64).map_err(|_| {
        bad(
            "key",
            "expected the key admit answered: 64 lowercase hex characters",
        )
    })?;
    parse_key(&text)
}

pub fn parse_key(text: &str) -> Result<IdempotencyKey, Error> {
    IdempotencyKey::parse(text).map_err(|_| {
        bad(
            "key",
            "expected 64 lowercase hexadecimal characters (a SHA-256 key)",
        )
    })
}

fn fencing_token(o: &Object) -> Result<i64, Error> {
    match o.get("fencing_token") {
        None | Some(Value::Null) => Err(bad("fencing_token", "is required")),
        Some(v) => whole_number(v).filter(|t| token_ok(*t)).ok_or_else(|| {
            bad(
                "fencing_token",
                "expected a whole number of at least 1 (the token admit answered)",
            )
        }),
    }
}

/// Fencing tokens start at 1.
pub(super) fn token_ok(t: i64) -> bool {
    t >= 1
}

/// A duration is 0 ms or more.
pub(super) fn duration_ok(ms: i64) -> bool {
    ms >= 0
}

/// A JSON number that is a whole number: `7` and `7.0` alike (JSON Schema's `integer`,
/// and the fingerprint's rule that `4500` and `4500.0` are the same number).
fn whole_number(v: &Value) -> Option<i64> {
    // 2^63 as f64: the first value past i64::MAX; every whole f64 below it converts exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (-LIMIT..LIMIT).contains(f))
            .map(|f| f as i64)
    })
}

fn duration_ms(o: &Object) -> Result<Option<i64>, Error> {
    match o.get("duration_ms") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(v)
            .filter(|ms| duration_ok(*ms))
            .map(Some)
            .ok_or_else(|| {
                bad(
                    "duration_ms",
                    "expected a whole number of milliseconds, 0 or more",
                )
            }),
    }
}

/// A result to store: present (any JSON value), and exactly representable.
fn result(o: &Object, when: &str) -> Result<Value, Error> {
    let value = o
        .get("result")
        .ok_or_else(|| bad("result", format!("is required with {when}")))?;
    check_result(value)?;
    Ok(value.clone())
}

/// A result is stored and hashed in its canonical form: it must have one.
pub(super) fn check_result(value: &Value) -> Result<(), Error> {
    canonical_json(value).map_err(|e| bad("result", e.to_string()))?;
    Ok(())
}

/// What the attempt log records of a failed lookup.
pub(super) fn lookup_failed(error: &str) -> Lookup {
    Lookup::Failed(format!("provider lookup failed: {error}"))
}

/// Members that belong to another choice of `outcome` / `lookup` must be absent.
fn absent(o: &Object, members: &[(&str, &'static str)], when: &str) -> Result<(), Error> {
    match members.iter().find(|(name, _)| o.contains_key(*name)) {
        Some((name, field)) => Err(bad(field, format!("{name} does not go with {when}"))),
        None => Ok(()),
    }
}

impl AdmitBody {
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        wire::admit(body).map_or_else(|| Self::read_tree(body), Ok)
    }

    /// The body as a JSON tree: slower, and names the member that is wrong.
    pub(super) fn read_tree(body: &[u8]) -> Result<Self, Error> {
        let o = object(body, &["intent", "business_ref", "args", "worker"])?;
        let intent = match o.get("intent") {
            Some(Value::Object(i)) => i,
            None | Some(Value::Null) => return Err(bad("intent", "is required")),
            Some(_) => return Err(bad("intent", "expected an object")),
        };
        only(
            intent,
            "intent",
            &["tenant", "tool", "workflow_id", "step_id", "intent_id"],
        )?;
        let part = |name, field| required(intent, name, field, MAX_INTENT_BYTES);
        let intent = Intent {
            tenant: part("tenant", "intent.tenant")?,
            tool: part("tool", "intent.tool")?,
            workflow_id: part("workflow_id", "intent.workflow_id")?,
            step_id: part("step_id", "intent.step_id")?,
            intent_id: part("intent_id", "intent.intent_id")?,
        };
        let args = match o.get("args") {
            Some(v @ Value::Object(_)) => v.clone(),
            None | Some(Value::Null) => return Err(bad("args", "is required")),
            Some(_) => return Err(bad("args", "expected a JSON object")),
        };
        Ok(Self {
            intent,
            business_ref: string(&o, "business_ref", "business_ref", MAX_REF_BYTES)?,
            args,
            worker: worker(&o)?,
        })
    }
}

impl SettleBody {
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        wire::settle(body).map_or_else(|| Self::read_tree(body), Ok)
    }

    /// The body as a JSON tree: slower, and names the member that is wrong.
    pub(super) fn read_tree(body: &[u8]) -> Result<Self, Error> {
        let o = object(
            body,
            &[
                "key",
                "fencing_token",
                "outcome",
                "result",
                "error",
                "reason",
                "duration_ms",
                "worker",
            ],
        )?;
        let text = |name, field| required(&o, name, field, MAX_TEXT_BYTES);
        let outcome = match o.get("outcome").and_then(Value::as_str) {
            Some("done") => {
                absent(
                    &o,
                    &[("error", "error"), ("reason", "reason")],
                    "outcome done",
                )?;
                CallOutcome::Done {
                    result: result(&o, "outcome done")?,
                }
            }
            Some("failed") => {
                absent(
                    &o,
                    &[("result", "result"), ("reason", "reason")],
                    "outcome failed",
                )?;
                CallOutcome::Failed {
                    error: text("error", "error")?,
                }
            }
            Some("unknown") => {
                absent(
                    &o,
                    &[("result", "result"), ("error", "error")],
                    "outcome unknown",
                )?;
                CallOutcome::Unknown {
                    reason: text("reason", "reason")?,
                }
            }
            _ => {
                return Err(bad(
                    "outcome",
                    "expected \"done\" (with result), \"failed\" (with error) or \"unknown\" (with reason)",
                ));
            }
        };
        Ok(Self {
            key: key(&o)?,
            fencing_token: fencing_token(&o)?,
            outcome,
            duration_ms: duration_ms(&o)?,
            worker: worker(&o)?,
        })
    }
}

impl ReconcileBody {
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        wire::reconcile(body).map_or_else(|| Self::read_tree(body), Ok)
    }

    /// The body as a JSON tree: slower, and names the member that is wrong.
    pub(super) fn read_tree(body: &[u8]) -> Result<Self, Error> {
        let o = object(
            body,
            &[
                "key",
                "fencing_token",
                "lookup",
                "result",
                "error",
                "duration_ms",
                "worker",
            ],
        )?;
        let lookup = match o.get("lookup").and_then(Value::as_str) {
            Some("found") => {
                absent(&o, &[("error", "error")], "lookup found")?;
                Lookup::Found(result(&o, "lookup found")?)
            }
            Some("not_found") => {
                absent(
                    &o,
                    &[("result", "result"), ("error", "error")],
                    "lookup not_found",
                )?;
                Lookup::NotFound
            }
            Some("failed") => {
                absent(&o, &[("result", "result")], "lookup failed")?;
                let error = required(&o, "error", "error", MAX_TEXT_BYTES)?;
                lookup_failed(&error)
            }
            _ => {
                return Err(bad(
                    "lookup",
                    "expected \"found\" (with result), \"not_found\" or \"failed\" (with error)",
                ));
            }
        };
        Ok(Self {
            key: key(&o)?,
            fencing_token: fencing_token(&o)?,
            lookup,
            duration_ms: duration_ms(&o)?,
            worker: worker(&o)?,
        })
    }
}

impl WaitQuery {
    /// `after_token=N&wait=S`, both optional; `wait` at most 60 seconds.
    pub fn parse(query: Option<&str>) -> Result<Self, Error> {
        let mut q = WaitQuery {
            after_token: None,
            wait: Duration::ZERO,
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "after_token" => {
                    let t = value.parse::<i64>().ok().filter(|t| *t >= 0);
                    q.after_token = Some(t.ok_or_else(|| {
                        bad("after_token", "expected a whole number (a fencing token)")
                    })?);
                }
                "wait" => {
                    let s = value.parse::<u64>().ok().filter(|s| *s <= MAX_WAIT_SECONDS);
                    q.wait = Duration::from_secs(s.ok_or_else(|| {
                        bad(
                            "wait",
                            format!("expected whole seconds from 0 to {MAX_WAIT_SECONDS}"),
                        )
                    })?);
                }
                _ => {
                    return Err(bad(
                        "query",
                        format!(
                            "unknown parameter {:?}; expected after_token, wait",
                            name.chars().take(40).collect::<String>()
                        ),
                    ));
                }
            }
        }
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_character_anywhere_is_refused_naming_the_member() {
        let admit = |args: &str| {
            AdmitBody::parse(
                format!(
                    r#"{{"intent":{{"tenant":"t","tool":"x","workflow_id":"w","step_id":"1","intent_id":"i"}},
                        "args":{args}}}"#
                )
                .as_bytes(),
            )
        };
        assert_eq!(field(admit(r#"{"a":["ok","b\u0000"]}"#)), "args");
        assert_eq!(field(admit(r#"{"a\u0000":1}"#)), "args");
        assert!(admit(r#"{"a":"ok"}"#).is_ok());
        let intent = AdmitBody::parse(
            br#"{"intent":{"tenant":"t\u0000","tool":"x","workflow_id":"w","step_id":"1","intent_id":"i"},"args":{}}"#,
        );
        assert_eq!(field(intent), "intent");
    }

    #[test]
    fn a_whole_number_may_be_written_with_a_fraction_of_zero() {
        use serde_json::json;
        assert_eq!(whole_number(&json!(7)), Some(7));
        assert_eq!(whole_number(&json!(7.0)), Some(7));
        assert_eq!(
            whole_number(&json!(569_269_784_325.0)),
            Some(569_269_784_325)
        );
        assert_eq!(whole_number(&json!(7.5)), None);
        assert_eq!(whole_number(&json!(1e19)), None);
        assert_eq!(whole_number(&json!("7")), None);
        let settle = SettleBody::parse(
            br#"{"key":"0000000000000000000000000000000000000000000000000000000000000000",
                 "fencing_token":2.0,"outcome":"done","result":1,"duration_ms":12.0}"#,
        )
        .unwrap();
        assert_eq!((settle.fencing_token, settle.duration_ms), (2, Some(12)));
    }

    fn field<T: std::fmt::Debug>(r: Result<T, Error>) -> &'static str {
        match r {
            Err(Error::BadRequest { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    const INTENT: &str = r#""intent":{"tenant":"acme","tool":"issue_refund","workflow_id":"w","step_id":"4","intent_id":"i"}"#;

    #[test]
    fn each_bad_admit_names_its_field() {
        let admit = |rest: &str| AdmitBody::parse(format!("{{{INTENT}{rest}}}").as_bytes());
        assert!(admit(r#","args":{"a":1}"#).is_ok());
        assert_eq!(field(AdmitBody::parse(b"{")), "body");
        assert_eq!(field(AdmitBody::parse(b"[]")), "body");
        assert_eq!(field(AdmitBody::parse(br#"{"args":{}}"#)), "intent");
        assert_eq!(field(admit(r#","args":[1]"#)), "args");
        assert_eq!(field(admit("")), "args");
        assert_eq!(field(admit(r#","args":{},"worker":7"#)), "worker");
        assert_eq!(field(admit(r#","args":{},"worker":"a\nb""#)), "worker");
        assert_eq!(
            field(admit(r#","args":{},"business_ref":"""#)),
            "business_ref"
        );
        assert_eq!(field(admit(r#","args":{},"extra":1"#)), "body");
        let no_tool = br#"{"intent":{"tenant":"acme","workflow_id":"w","step_id":"4","intent_id":"i"},"args":{}}"#;
        assert_eq!(field(AdmitBody::parse(no_tool)), "intent.tool");
        let numeric_step = br#"{"intent":{"tenant":"acme","tool":"t","workflow_id":"w","step_id":4,"intent_id":"i"},"args":{}}"#;
        assert_eq!(field(AdmitBody::parse(numeric_step)), "intent.step_id");
    }

    #[test]
    fn each_bad_settle_names_its_field() {
        let key = "a".repeat(64);
        let settle = |rest: &str| {
            SettleBody::parse(format!(r#"{{"key":"{key}","fencing_token":1{rest}}}"#).as_bytes())
        };
        assert!(settle(r#","outcome":"done","result":{"id":1}"#).is_ok());
        assert!(settle(r#","outcome":"done","result":null"#).is_ok());
        assert_eq!(field(settle(r#","outcome":"done""#)), "result");
        assert_eq!(field(settle(r#","outcome":"failed""#)), "error");
        assert_eq!(
            field(settle(r#","outcome":"unknown","reason":"""#)),
            "reason"
        );
        assert_eq!(field(settle(r#","outcome":"maybe""#)), "outcome");
        assert_eq!(
            field(settle(r#","outcome":"failed","error":"x","result":1"#)),
            "result"
        );
        assert_eq!(
            field(settle(r#","outcome":"done","result":9007199254740993"#)),
            "result"
        );
        assert_eq!(
            field(settle(r#","outcome":"done","result":1,"duration_ms":-1"#)),
            "duration_ms"
        );
        let bad_token =
            format!(r#"{{"key":"{key}","fencing_token":0,"outcome":"unknown","reason":"r"}}"#);
        assert_eq!(
            field(SettleBody::parse(bad_token.as_bytes())),
            "fencing_token"
        );
        let bad_key = r#"{"key":"ABC","fencing_token":1,"outcome":"unknown","reason":"r"}"#;
        assert_eq!(field(SettleBody::parse(bad_key.as_bytes())), "key");
    }

    #[test]
    fn each_bad_reconcile_names_its_field() {
        let key = "a".repeat(64);
        let report = |rest: &str| {
            ReconcileBody::parse(format!(r#"{{"key":"{key}","fencing_token":2{rest}}}"#).as_bytes())
        };
        assert_eq!(
            report(r#","lookup":"not_found""#).unwrap().lookup,
            Lookup::NotFound
        );
        assert_eq!(field(report(r#","lookup":"found""#)), "result");
        assert_eq!(field(report(r#","lookup":"failed""#)), "error");
        assert_eq!(field(report(r#","lookup":"nothing""#)), "lookup");
        assert_eq!(
            field(report(r#","lookup":"not_found","result":{}"#)),
            "result"
        );
    }

    #[test]
    fn the_wait_is_bounded_and_named() {
        let q = WaitQuery::parse(Some("after_token=3&wait=30")).unwrap();
        assert_eq!((q.after_token, q.wait), (Some(3), Duration::from_secs(30)));
        assert_eq!(WaitQuery::parse(None).unwrap().wait, Duration::ZERO);
        assert_eq!(field(WaitQuery::parse(Some("wait=61"))), "wait");
        assert_eq!(
            field(WaitQuery::parse(Some("after_token=x"))),
            "after_token"
        );
        assert_eq!(field(WaitQuery::parse(Some("wiat=3"))), "query");
    }
}
