//! Natural keys (docs/GUARD.md): the argument fields a tool's policy names as the
//! identity of the business action (`invoice_id`). The claim stores one row per
//! tenant, tool and value; a second intent with the same value is answered from the
//! first intent's key, so a caller that mints a new intent id every turn still gets
//! one effect.

use super::error::GuardError;
use super::key::BusinessArgs;
use crate::base::canonical::canonical_json;
use crate::base::hash::sha256_hex;
use serde_json::{Map, Value};

/// The natural key of one call: the named fields and their values, and the hash the
/// store keeps unique per tenant and tool.
#[derive(Debug, Clone, PartialEq)]
pub struct NaturalKey {
    /// `{"invoice_id": "inv_1"}`: what the attempt log records.
    pub fields: Value,
    /// SHA-256 of the canonical JSON of `fields`.
    pub hash: String,
}

impl NaturalKey {
    /// The natural key of `args` under a policy naming `fields`; `None` when the
    /// policy names none. A named field that is missing or null is refused: the call
    /// could not be told apart from another action.
    pub fn of(args: &BusinessArgs, fields: &[String]) -> Result<Option<NaturalKey>, GuardError> {
        if fields.is_empty() {
            return Ok(None);
        }
        let mut named = Map::new();
        for field in fields {
            match args.value.get(field) {
                Some(v) if !v.is_null() => {
                    named.insert(field.clone(), v.clone());
                }
                _ => {
                    return Err(GuardError::Invalid {
                        field: "args",
                        message: format!(
                            "the tool's natural key needs the argument {field:?} (present and not null)"
                        ),
                    });
                }
            }
        }
        let fields = Value::Object(named);
        let canonical = canonical_json(&fields).map_err(|e| GuardError::InvalidCall(e.into()))?;
        Ok(Some(NaturalKey {
            hash: sha256_hex(canonical.as_bytes()),
            fields,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> BusinessArgs {
        BusinessArgs::new(&v, &["reason"]).unwrap()
    }

    #[test]
    fn a_natural_key_depends_only_on_the_named_fields() {
        let fields = vec!["invoice_id".to_string()];
        let a = NaturalKey::of(&args(json!({"invoice_id": "inv_1", "amount": 5})), &fields)
            .unwrap()
            .unwrap();
        let b = NaturalKey::of(&args(json!({"amount": 7, "invoice_id": "inv_1"})), &fields)
            .unwrap()
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.fields, json!({"invoice_id": "inv_1"}));
        let c = NaturalKey::of(&args(json!({"invoice_id": "inv_2"})), &fields)
            .unwrap()
            .unwrap();
        assert_ne!(a.hash, c.hash);
    }

    #[test]
    fn a_missing_or_null_natural_key_field_is_refused_by_name() {
        let fields = vec!["invoice_id".to_string()];
        for v in [json!({"amount": 5}), json!({"invoice_id": null})] {
            let err = NaturalKey::of(&args(v), &fields).unwrap_err();
            assert!(err.to_string().contains("\"invoice_id\""), "{err}");
        }
    }

    #[test]
    fn a_policy_without_natural_key_fields_has_none() {
        assert_eq!(NaturalKey::of(&args(json!({"a": 1})), &[]).unwrap(), None);
    }
}
