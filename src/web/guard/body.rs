//! The guard routes' request bodies, each read once by serde's derive into its wire
//! struct (unknown members refused: a typo such as `fencing_tokn` must not pass as
//! "absent"), then checked by its one `validate()`, which names the field that is
//! wrong (400 `invalid` with `field`). `request.rs` does the reading.
//!
//! Members that hold any JSON (`args`, `result`) are kept as raw text until the
//! caller's token has been checked: a body is not grown into a tree for a tenant or a
//! tool the token may not touch (docs/AUTH.md). [`AdmitBody::args`] and
//! [`raw_result`] read them afterwards.

use crate::base::canonical::canonical_json;
use crate::base::canonical::holds_nul;
use crate::guard::{CallOutcome, IdempotencyKey, Intent, Lookup};
use crate::web::Error;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

/// The longest wait of a long poll.
pub(super) const MAX_WAIT_SECONDS: u64 = 60;
const MAX_REF_BYTES: usize = 512;
const MAX_WORKER_BYTES: usize = 200;
const MAX_TEXT_BYTES: usize = 4000;
/// Each part of an intent.
const MAX_INTENT_BYTES: usize = 512;
/// A tool name's grammar: what MCP allows (1 to 128 ASCII letters, digits, `_`, `-`,
/// `.`), and `:` and `/` for namespaced names. A worker's tool name becomes a metric
/// label and appears on pages and in alerts: it must not carry markup or run long.
const MAX_TOOL_BYTES: usize = 128;

fn bad(field: &'static str, message: impl Into<String>) -> Error {
    Error::bad_request(field, message)
}

/// A text member: not empty, at most `max` bytes, no NUL (PostgreSQL's text cannot
/// hold U+0000; refused for both backends alike rather than a 500 on one of them).
fn text(s: String, field: &'static str, max: usize) -> Result<String, Error> {
    if s.is_empty() {
        Err(bad(field, "must not be empty"))
    } else if s.len() > max {
        Err(bad(field, format!("must be at most {max} bytes")))
    } else if s.contains('\0') {
        Err(bad(field, "must not contain the NUL character (U+0000)"))
    } else {
        Ok(s)
    }
}

fn optional(s: Option<String>, field: &'static str, max: usize) -> Result<Option<String>, Error> {
    s.map(|s| text(s, field, max)).transpose()
}

/// The worker id: no control characters (it is shown in logs and on pages as the
/// attempt's actor).
fn worker(w: Option<String>) -> Result<Option<String>, Error> {
    let w = optional(w, "worker", MAX_WORKER_BYTES)?;
    if w.as_deref()
        .is_some_and(|w| w.chars().any(char::is_control))
    {
        return Err(bad("worker", "must not contain control characters"));
    }
    Ok(w)
}

/// The tool name's grammar ([`MAX_TOOL_BYTES`]).
pub(crate) fn check_tool(tool: &str) -> Result<(), Error> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:/".contains(c);
    if tool.len() > MAX_TOOL_BYTES || !tool.chars().all(allowed) {
        return Err(bad(
            "intent.tool",
            format!(
                "a tool name is 1 to {MAX_TOOL_BYTES} ASCII letters, digits, '_', '-', '.', ':' or '/'"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn parse_key(text: &str) -> Result<IdempotencyKey, Error> {
    IdempotencyKey::parse(text).map_err(|_| {
        bad(
            "key",
            "expected 64 lowercase hexadecimal characters (a SHA-256 key)",
        )
    })
}

/// A JSON number that is a whole number: `7` and `7.0` alike (JSON Schema's `integer`,
/// and the fingerprint's rule that `4500` and `4500.0` are the same number).
fn whole_number(n: &serde_json::Number) -> Option<i64> {
    // 2^63 as f64: the first value past i64::MAX; every whole f64 below it converts exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (-LIMIT..LIMIT).contains(f))
            .map(|f| f as i64)
    })
}

fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    whole_number(&n).ok_or_else(|| D::Error::custom("expected a whole number"))
}

fn whole_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => whole_number(&n)
            .map(Some)
            .ok_or_else(|| D::Error::custom("expected a whole number")),
    }
}

/// A member that may be `null`, told apart from an absent one (`None`): `"error":
/// null` beside `"outcome": "done"` is a member of another choice, refused.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The most values a member holding any JSON (`args`, `result`) may have. A tree
/// costs up to ~20 times its text in memory, and the guard copies arguments a few
/// times (fingerprint, record, attempt): bounded here, a body under the size limit
/// stays a few MiB however it is shaped. Business arguments and a provider's record
/// have tens of values.
pub const MAX_VALUES: usize = 10_000;

/// How many JSON values the text holds (at least): its array and object openings and
/// separators outside strings, plus one.
fn values_in(raw: &str) -> usize {
    let (mut n, mut in_string, mut escaped) = (1, false, false);
    for b in raw.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' | b',' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Raw JSON read as a tree, storable: no NUL anywhere, at most [`MAX_VALUES`].
fn tree(raw: &RawValue, field: &'static str) -> Result<Value, Error> {
    if values_in(raw.get()) > MAX_VALUES {
        return Err(bad(
            field,
            format!(
                "may hold at most {MAX_VALUES} JSON values (arrays, objects and their members)"
            ),
        ));
    }
    let v: Value = serde_json::from_str(raw.get()).map_err(|e| bad(field, e.to_string()))?;
    if holds_nul(&v) {
        return Err(bad(
            field,
            "must not contain the NUL character (U+0000), in a value or a member name",
        ));
    }
    Ok(v)
}

/// A result to store, read after the caller's token was checked: any JSON value with
/// a canonical form (it is hashed in it).
pub(crate) fn raw_result(raw: &RawValue) -> Result<Value, Error> {
    let v = tree(raw, "result")?;
    canonical_json(&v).map_err(|e| bad("result", e.to_string()))?;
    Ok(v)
}

/// A text member that must be there (`error`, `reason`).
fn required_text(raw: Option<Box<RawValue>>, field: &'static str) -> Result<String, Error> {
    let s: Option<String> = match raw {
        None => None,
        Some(raw) => {
            serde_json::from_str(raw.get()).map_err(|_| bad(field, "expected a string"))?
        }
    };
    text(
        s.ok_or_else(|| bad(field, "is required"))?,
        field,
        MAX_TEXT_BYTES,
    )
}

/// Members that belong to another choice of `outcome` / `lookup` must be absent.
fn absent(members: &[(&'static str, bool)], when: &str) -> Result<(), Error> {
    match members.iter().find(|(_, there)| *there) {
        Some((name, _)) => Err(bad(name, format!("{name} does not go with {when}"))),
        None => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentWire {
    tenant: String,
    tool: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdmitWire {
    intent: Object<IntentWire>,
    #[serde(default)]
    business_ref: Option<String>,
    args: Box<RawValue>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    context: Option<Box<RawValue>>,
}

/// `POST /api/v1/guard/admit`. `args` stays raw until [`AdmitBody::args`].
#[derive(Debug)]
pub(crate) struct AdmitBody {
    pub intent: Intent,
    pub business_ref: Option<String>,
    args: Box<RawValue>,
    pub worker: Option<String>,
    /// For the attempt log (`context.rs`).
    pub context: Option<Value>,
}

impl AdmitWire {
    pub(crate) fn validate(self) -> Result<AdmitBody, Error> {
        let i = self.intent.0;
        let intent = Intent {
            tenant: text(i.tenant, "intent.tenant", MAX_INTENT_BYTES)?,
            tool: text(i.tool, "intent.tool", MAX_INTENT_BYTES)?,
            workflow_id: text(i.workflow_id, "intent.workflow_id", MAX_INTENT_BYTES)?,
            step_id: text(i.step_id, "intent.step_id", MAX_INTENT_BYTES)?,
            intent_id: text(i.intent_id, "intent.intent_id", MAX_INTENT_BYTES)?,
        };
        check_tool(&intent.tool)?;
        // The object test on the raw text: `null`, an array or a string is refused
        // without being read.
        match self.args.get().trim_start().as_bytes().first() {
            Some(b'{') => {}
            Some(b'n') => return Err(bad("args", "is required")),
            _ => return Err(bad("args", "expected a JSON object")),
        }
        Ok(AdmitBody {
            intent,
            business_ref: optional(self.business_ref, "business_ref", MAX_REF_BYTES)?,
            args: self.args,
            worker: worker(self.worker)?,
            context: super::context::read(self.context)?,
        })
    }
}

impl AdmitBody {
    /// The arguments as a tree, read once the caller may call the tool.
    pub fn args(&self) -> Result<Value, Error> {
        tree(&self.args, "args")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SettleWire {
    key: String,
    #[serde(deserialize_with = "whole")]
    fencing_token: i64,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    reason: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "whole_or_null")]
    duration_ms: Option<i64>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    context: Option<Box<RawValue>>,
}

/// What a settle reports; a `done` result stays raw until the key was checked.
#[derive(Debug)]
pub enum Reported {
    Done(Box<RawValue>),
    Failed(String),
    Unknown(String),
}

/// `POST /api/v1/guard/settle`.
#[derive(Debug)]
pub(crate) struct SettleBody {
    pub key: IdempotencyKey,
    pub fencing_token: i64,
    pub outcome: Reported,
    pub duration_ms: Option<i64>,
    pub worker: Option<String>,
    pub context: Option<Value>,
}

fn token(t: i64) -> Result<i64, Error> {
    if t >= 1 {
        Ok(t)
    } else {
        Err(bad(
            "fencing_token",
            "expected a whole number of at least 1 (the token admit answered)",
        ))
    }
}

fn duration(ms: Option<i64>) -> Result<Option<i64>, Error> {
    match ms {
        Some(ms) if ms < 0 => Err(bad(
            "duration_ms",
            "expected a whole number of milliseconds, 0 or more",
        )),
        ms => Ok(ms),
    }
}

impl SettleWire {
    pub(crate) fn validate(self) -> Result<SettleBody, Error> {
        let (result, error, reason) = (self.result, self.error, self.reason);
        let outcome = match self.outcome.as_deref() {
            Some("done") => {
                let when = "outcome done";
                absent(
                    &[("error", error.is_some()), ("reason", reason.is_some())],
                    when,
                )?;
                Reported::Done(
                    result.ok_or_else(|| bad("result", "is required with outcome done"))?,
                )
            }
            Some("failed") => {
                let when = "outcome failed";
                absent(
                    &[("result", result.is_some()), ("reason", reason.is_some())],
                    when,
                )?;
                Reported::Failed(required_text(error, "error")?)
            }
            Some("unknown") => {
                let when = "outcome unknown";
                absent(
                    &[("result", result.is_some()), ("error", error.is_some())],
                    when,
                )?;
                Reported::Unknown(required_text(reason, "reason")?)
            }
            _ => {
                return Err(bad(
                    "outcome",
                    "expected \"done\" (with result), \"failed\" (with error) or \"unknown\" (with reason)",
                ));
            }
        };
        Ok(SettleBody {
            key: parse_key(&self.key)?,
            fencing_token: token(self.fencing_token)?,
            outcome,
            duration_ms: duration(self.duration_ms)?,
            worker: worker(self.worker)?,
            context: super::context::read(self.context)?,
        })
    }
}

impl Reported {
    /// The outcome as the guard takes it, its result read now.
    pub fn read(self) -> Result<CallOutcome, Error> {
        Ok(match self {
            Reported::Done(raw) => CallOutcome::Done {
                result: raw_result(&raw)?,
            },
            Reported::Failed(error) => CallOutcome::Failed { error },
            Reported::Unknown(reason) => CallOutcome::Unknown { reason },
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReconcileWire {
    key: String,
    #[serde(deserialize_with = "whole")]
    fencing_token: i64,
    #[serde(default)]
    lookup: Option<String>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "whole_or_null")]
    duration_ms: Option<i64>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    context: Option<Box<RawValue>>,
}

/// What a lookup found; a found result stays raw until the key was checked.
#[derive(Debug)]
pub(crate) enum Looked {
    Found(Box<RawValue>),
    NotFound,
    Failed(String),
}

/// `POST /api/v1/guard/reconcile`.
#[derive(Debug)]
pub(crate) struct ReconcileBody {
    pub key: IdempotencyKey,
    pub fencing_token: i64,
    pub lookup: Looked,
    pub duration_ms: Option<i64>,
    pub worker: Option<String>,
    pub context: Option<Value>,
}

impl ReconcileWire {
    pub(crate) fn validate(self) -> Result<ReconcileBody, Error> {
        let (result, error) = (self.result, self.error);
        let lookup = match self.lookup.as_deref() {
            Some("found") => {
                absent(&[("error", error.is_some())], "lookup found")?;
                Looked::Found(result.ok_or_else(|| bad("result", "is required with lookup found"))?)
            }
            Some("not_found") => {
                let when = "lookup not_found";
                absent(
                    &[("result", result.is_some()), ("error", error.is_some())],
                    when,
                )?;
                Looked::NotFound
            }
            Some("failed") => {
                absent(&[("result", result.is_some())], "lookup failed")?;
                Looked::Failed(required_text(error, "error")?)
            }
            _ => {
                return Err(bad(
                    "lookup",
                    "expected \"found\" (with result), \"not_found\" or \"failed\" (with error)",
                ));
            }
        };
        Ok(ReconcileBody {
            key: parse_key(&self.key)?,
            fencing_token: token(self.fencing_token)?,
            lookup,
            duration_ms: duration(self.duration_ms)?,
            worker: worker(self.worker)?,
            context: super::context::read(self.context)?,
        })
    }
}

impl Looked {
    /// The lookup as the guard takes it, its result read now.
    pub fn read(self) -> Result<Lookup, Error> {
        Ok(match self {
            Looked::Found(raw) => Lookup::Found(raw_result(&raw)?),
            Looked::NotFound => Lookup::NotFound,
            Looked::Failed(error) => Lookup::Failed(format!("provider lookup failed: {error}")),
        })
    }
}

/// `GET /api/v1/guard/keys/{key}?after_token=N&wait=S&attempts_after=SEQ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitQuery {
    pub after_token: Option<i64>,
    pub wait: Duration,
    /// Ask for a page of the key's attempts after this `seq` (0: from the first).
    pub attempts_after: Option<i64>,
}

impl WaitQuery {
    /// `after_token=N&wait=S&attempts_after=SEQ`, all optional; `wait` at most 60 seconds.
    pub fn parse(query: Option<&str>) -> Result<Self, Error> {
        let mut q = WaitQuery {
            after_token: None,
            wait: Duration::ZERO,
            attempts_after: None,
        };
        let whole = |value: &str, field, what: &str| {
            let n = value.parse::<i64>().ok().filter(|t| *t >= 0);
            n.ok_or_else(|| bad(field, format!("expected a whole number ({what})")))
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "after_token" => {
                    q.after_token = Some(whole(value, "after_token", "a fencing token")?)
                }
                "attempts_after" => {
                    q.attempts_after = Some(whole(value, "attempts_after", "an attempt's seq")?);
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
                            "unknown parameter {:?}; expected after_token, wait, attempts_after",
                            name.chars().take(40).collect::<String>()
                        ),
                    ));
                }
            }
        }
        Ok(q)
    }
}

/// `T` read only from a JSON object: a derived struct would also take an array of its
/// members in order.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Members<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Members(PhantomData)).map(Object)
    }
}
