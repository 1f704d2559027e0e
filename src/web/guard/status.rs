//! `GET /api/v1/guard/keys?workflow_id=…` / `?business_ref=…`: the keys of one run or
//! of one business object, for a worker (and the status tool its model calls): "did
//! this run already refund order A-88214, and how did it end?". Read-only, bounded
//! (`limit`, at most [`MAX_LIMIT`] rows, newest activity first), and a token limited to
//! tenants or tools sees only the keys inside its scope.
//!
//! A key's result, error and whether a person is needed come from
//! `GET /api/v1/guard/keys/{key}`: this listing names the keys and where they stand.

use crate::auth::Principal;
use crate::guard::rfc3339;
use crate::store::{KeyFilter, KeySummary};
use crate::web::{AppState, Error};
use axum::Json;
use axum::extract::{RawQuery, State};
use serde_json::{Value, json};

/// The most keys one answer lists.
pub(crate) const MAX_LIMIT: u32 = 100;
const DEFAULT_LIMIT: u32 = 20;
/// A longer value cannot be a stored one (intent fields and business refs are ≤ 512 bytes).
const MAX_VALUE: usize = 512;

/// What the listing is asked for: one of `workflow_id` / `business_ref` (both narrow it),
/// and optionally `tenant`, `tool`, `limit`.
#[derive(Debug, Default, PartialEq)]
struct KeysQuery {
    filter: KeyFilter,
    limit: u32,
}

impl KeysQuery {
    fn parse(query: Option<&str>) -> Result<Self, Error> {
        let mut q = KeysQuery {
            limit: DEFAULT_LIMIT,
            ..KeysQuery::default()
        };
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let (field, slot) = match name.as_ref() {
                "workflow_id" => ("workflow_id", &mut q.filter.workflow_id),
                "business_ref" => ("business_ref", &mut q.filter.business_ref),
                "tenant" => ("tenant", &mut q.filter.tenant),
                "tool" => ("tool", &mut q.filter.tool),
                "limit" => {
                    let n = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n));
                    q.limit = n.ok_or_else(|| {
                        Error::bad_request("limit", format!("expected 1 to {MAX_LIMIT}"))
                    })?;
                    continue;
                }
                other => {
                    return Err(Error::bad_request(
                        "query",
                        format!(
                            "unknown parameter {:?}; expected workflow_id, business_ref, tenant, tool, limit",
                            other.chars().take(40).collect::<String>()
                        ),
                    ));
                }
            };
            if value.is_empty() || value.len() > MAX_VALUE || value.contains('\0') {
                return Err(Error::bad_request(
                    field,
                    format!("expected 1 to {MAX_VALUE} bytes without NUL"),
                ));
            }
            *slot = Some(value.into_owned());
        }
        if q.filter.workflow_id.is_none() && q.filter.business_ref.is_none() {
            return Err(Error::bad_request(
                "query",
                "name the run or the business object: workflow_id=… or business_ref=…",
            ));
        }
        Ok(q)
    }
}

pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, Error> {
    let q = KeysQuery::parse(query.as_deref())?;
    let page = state.store.list_keys(&q.filter, None, q.limit).await?;
    // A limited token sees its own tenants and tools only: the rest of the page is left
    // out (never named, never counted).
    let keys: Vec<Value> = page
        .keys
        .iter()
        .filter(|k| {
            principal
                .scope
                .check(&k.intent.tenant, &k.intent.tool)
                .is_ok()
        })
        .map(row)
        .collect();
    Ok(Json(
        json!({ "keys": keys, "truncated": page.next.is_some() }),
    ))
}

fn row(k: &KeySummary) -> Value {
    json!({
        "key": k.key.as_str(),
        "tenant": k.intent.tenant,
        "tool": k.intent.tool,
        "workflow_id": k.intent.workflow_id,
        "step_id": k.intent.step_id,
        "intent_id": k.intent.intent_id,
        "business_ref": k.business_ref,
        "status": k.status.as_str(),
        "fencing_token": k.fencing_token.0,
        "attempt_count": k.attempt_count,
        "lease_until": rfc3339(k.lease_until),
        "created_at": rfc3339(k.created_at),
        "updated_at": rfc3339(k.updated_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_names_the_run_or_the_business_object() {
        let q = KeysQuery::parse(Some("business_ref=order%3AA-88214&limit=5")).unwrap();
        assert_eq!(q.filter.business_ref.as_deref(), Some("order:A-88214"));
        assert_eq!(q.limit, 5);
        assert!(KeysQuery::parse(Some("tenant=acme")).is_err());
        assert!(KeysQuery::parse(None).is_err());
    }

    #[test]
    fn a_bad_parameter_is_refused_by_name() {
        for bad in [
            "workflow_id=r&limit=0",
            "workflow_id=r&limit=101",
            "workflow_id=",
            "workflow_id=r&colour=red",
        ] {
            assert!(KeysQuery::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
