//! The guard's request bodies read straight into their types, without a JSON tree
//! first: the common case of every guarded call (two of them per call).
//!
//! Each function returns `None` for anything it does not accept, and `body.rs` then
//! reads the body again as a tree to say which member is wrong, so a refusal names the
//! same field with the same words as ever. What these functions accept, they accept
//! with the result the tree reading gives (same rules: `body::check_*`): unknown
//! members, a member given twice, an array where an object belongs, `2.0` for a whole
//! number, a NUL character all fall back, and the tree reading decides.

use super::body::{
    self, AdmitBody, MAX_INTENT_BYTES, MAX_REF_BYTES, MAX_TEXT_BYTES, MAX_WORKER_BYTES,
    ReconcileBody, SettleBody,
};
use crate::guard::{CallOutcome, Intent, Lookup};
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::marker::PhantomData;

/// `T` read only from a JSON object: a derived struct would also take an array of its
/// members in order, which the tree reading refuses.
struct Object<T>(T);

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

/// A member that may be `null`, told apart from an absent one (`None`): the tree
/// reading refuses `"error": null` beside `"outcome": "done"`, as it refuses any
/// member of another choice.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn from<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Option<T> {
    serde_json::from_slice::<Object<T>>(body).ok().map(|o| o.0)
}

/// A text member as the tree reading takes it, NUL excluded (PostgreSQL cannot store it).
fn text(s: String, max: usize) -> Option<String> {
    body::check_text(&s, "text", max).ok()?;
    (!s.contains('\0')).then_some(s)
}

fn optional(s: Option<String>, max: usize) -> Option<Option<String>> {
    match s {
        None => Some(None),
        Some(s) => text(s, max).map(Some),
    }
}

fn worker(w: Option<String>) -> Option<Option<String>> {
    let w = optional(w, MAX_WORKER_BYTES)?;
    w.as_deref().map_or(Ok(()), body::check_worker).ok()?;
    Some(w)
}

/// A result or arguments: storable as they are.
fn value(v: Value) -> Option<Value> {
    (!body::holds_nul(&v)).then_some(v)
}

fn result(v: Option<Value>) -> Option<Value> {
    let v = value(v?)?;
    body::check_result(&v).ok()?;
    Some(v)
}

fn duration(ms: Option<i64>) -> Option<Option<i64>> {
    match ms {
        Some(ms) if !body::duration_ok(ms) => None,
        ms => Some(ms),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentWire {
    tenant: String,
    tool: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Admit {
    intent: Object<IntentWire>,
    #[serde(default)]
    business_ref: Option<String>,
    args: Value,
    #[serde(default)]
    worker: Option<String>,
}

pub fn admit(body: &[u8]) -> Option<AdmitBody> {
    let w: Admit = from(body)?;
    let i = w.intent.0;
    let part = |s| text(s, MAX_INTENT_BYTES);
    let intent = Intent {
        tenant: part(i.tenant)?,
        tool: part(i.tool)?,
        workflow_id: part(i.workflow_id)?,
        step_id: part(i.step_id)?,
        intent_id: part(i.intent_id)?,
    };
    if !w.args.is_object() {
        return None;
    }
    Some(AdmitBody {
        intent,
        business_ref: optional(w.business_ref, MAX_REF_BYTES)?,
        args: value(w.args)?,
        worker: worker(w.worker)?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settle {
    key: String,
    fencing_token: i64,
    outcome: String,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    reason: Option<Value>,
    #[serde(default)]
    duration_ms: Option<i64>,
    #[serde(default)]
    worker: Option<String>,
}

/// A text member that must be there, and nothing of `others` beside it.
fn only_text(v: Option<Value>, others: &[&Option<Value>]) -> Option<String> {
    if others.iter().any(|o| o.is_some()) {
        return None;
    }
    match v? {
        Value::String(s) => text(s, MAX_TEXT_BYTES),
        _ => None,
    }
}

pub fn settle(body: &[u8]) -> Option<SettleBody> {
    let w: Settle = from(body)?;
    let outcome = match w.outcome.as_str() {
        "done" if w.error.is_none() && w.reason.is_none() => CallOutcome::Done {
            result: result(w.result)?,
        },
        "failed" => CallOutcome::Failed {
            error: only_text(w.error, &[&w.result, &w.reason])?,
        },
        "unknown" => CallOutcome::Unknown {
            reason: only_text(w.reason, &[&w.result, &w.error])?,
        },
        _ => return None,
    };
    Some(SettleBody {
        key: body::parse_key(&w.key).ok()?,
        fencing_token: Some(w.fencing_token).filter(|t| body::token_ok(*t))?,
        outcome,
        duration_ms: duration(w.duration_ms)?,
        worker: worker(w.worker)?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reconcile {
    key: String,
    fencing_token: i64,
    lookup: String,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
    #[serde(default)]
    duration_ms: Option<i64>,
    #[serde(default)]
    worker: Option<String>,
}

pub fn reconcile(body: &[u8]) -> Option<ReconcileBody> {
    let w: Reconcile = from(body)?;
    let lookup = match w.lookup.as_str() {
        "found" if w.error.is_none() => Lookup::Found(result(w.result)?),
        "not_found" if w.result.is_none() && w.error.is_none() => Lookup::NotFound,
        "failed" => body::lookup_failed(&only_text(w.error, &[&w.result])?),
        _ => return None,
    };
    Some(ReconcileBody {
        key: body::parse_key(&w.key).ok()?,
        fencing_token: Some(w.fencing_token).filter(|t| body::token_ok(*t))?,
        lookup,
        duration_ms: duration(w.duration_ms)?,
        worker: worker(w.worker)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    /// Values to put in each member: every JSON type, and the edges the rules draw.
    fn replacements() -> Vec<Value> {
        vec![
            Value::Null,
            json!(""),
            json!("x"),
            json!("a".repeat(513)),
            json!("a".repeat(4001)),
            json!("a\u{0}b"),
            json!("a\nb"),
            json!("done"),
            json!("failed"),
            json!("unknown"),
            json!("found"),
            json!("not_found"),
            json!("b".repeat(64)),
            json!(0),
            json!(1),
            json!(-1),
            json!(2.0),
            json!(7.5),
            json!(u64::MAX),
            json!(9_007_199_254_740_993_u64),
            json!(true),
            json!([]),
            json!(["x"]),
            json!({}),
            json!({"a\u{0}": 1}),
            json!({"tenant": "t"}),
        ]
    }

    /// Each body with each member removed, replaced by each value, and one member too
    /// many; the intent's members too.
    fn variants(base: &Value) -> Vec<String> {
        let o = base.as_object().unwrap();
        let mut out = vec![base.to_string(), "[]".into(), "{".into(), "null".into()];
        let mut edit = |f: &dyn Fn(&mut Map<String, Value>)| {
            let mut c = o.clone();
            f(&mut c);
            out.push(Value::Object(c).to_string());
        };
        edit(&|c| {
            c.insert("extra".into(), json!(1));
        });
        for name in o.keys() {
            edit(&|c| {
                c.remove(name);
            });
            for v in replacements() {
                edit(&|c| {
                    c.insert(name.clone(), v.clone());
                });
            }
            if let Some(inner) = o[name].as_object().filter(|_| name == "intent") {
                for part in inner.keys() {
                    for v in replacements() {
                        edit(&|c| {
                            c["intent"][part] = v.clone();
                        });
                    }
                }
                let members: Vec<Value> = inner.values().cloned().collect();
                edit(&|c| {
                    c.insert("intent".into(), Value::Array(members.clone()));
                });
            }
        }
        // A member twice, and the body as an array of its members in order.
        let s = base.to_string();
        out.push(format!("{},\"worker\":\"w2\"}}", &s[..s.len() - 1]));
        out.push(Value::Array(o.values().cloned().collect()).to_string());
        out
    }

    /// Whatever the direct reading accepts, the tree reading accepts with the same
    /// result; and the direct reading does take the well-formed bodies (else it would
    /// only cost time).
    fn agree<T: PartialEq + std::fmt::Debug>(
        bases: &[Value],
        direct: impl Fn(&[u8]) -> Option<T>,
        tree: impl Fn(&[u8]) -> Result<T, crate::web::Error>,
    ) {
        let mut taken = 0;
        for base in bases {
            assert!(direct(base.to_string().as_bytes()).is_some(), "{base}");
            for body in variants(base) {
                if let Some(v) = direct(body.as_bytes()) {
                    taken += 1;
                    assert_eq!(tree(body.as_bytes()).ok(), Some(v), "{body}");
                }
            }
        }
        assert!(taken > bases.len(), "only {taken} bodies read directly");
    }

    #[test]
    fn the_direct_reading_accepts_only_what_the_tree_reading_accepts_and_reads_it_alike() {
        let intent = json!({"tenant": "acme", "tool": "issue_refund", "workflow_id": "w",
                            "step_id": "4", "intent_id": "i"});
        agree(
            &[
                json!({"intent": intent, "args": {"order": "A-1", "amount": 4500}}),
                json!({"intent": intent, "business_ref": "A-1", "args": {"n": [1, 2.5]},
                       "worker": "worker-3"}),
            ],
            admit,
            AdmitBody::read_tree,
        );
        let key = "a".repeat(64);
        agree(
            &[
                json!({"key": key, "fencing_token": 1, "outcome": "done", "result": {"id": 1},
                       "duration_ms": 12, "worker": "w"}),
                json!({"key": key, "fencing_token": 2, "outcome": "done", "result": null}),
                json!({"key": key, "fencing_token": 3, "outcome": "failed", "error": "declined"}),
                json!({"key": key, "fencing_token": 4, "outcome": "unknown", "reason": "timeout",
                       "worker": null, "duration_ms": null}),
            ],
            settle,
            SettleBody::read_tree,
        );
        agree(
            &[
                json!({"key": key, "fencing_token": 2, "lookup": "found", "result": {"id": 1}}),
                json!({"key": key, "fencing_token": 2, "lookup": "not_found", "worker": "w"}),
                json!({"key": key, "fencing_token": 2, "lookup": "failed", "error": "503",
                       "duration_ms": 40}),
            ],
            reconcile,
            ReconcileBody::read_tree,
        );
    }
}
