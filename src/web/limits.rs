//! A token's `tenants` and `tools` limits outside the guard (docs/AUTH.md, "Token
//! limits"). The guard's routes check them per call (`web::guard::access`); every other
//! route is checked here, once, before its handler runs, so a route added later is
//! covered too:
//!
//! - routes of one key (`/keys/{key}`, its resolve form, `/api/v1/keys/{key}` and its
//!   resolve): the key's tenant and tool are read first (they never change) and a key
//!   outside the limits is refused before anything is read for the page or written;
//! - listings with a filter (`/keys`, the exports): the query must filter by the
//!   limited dimension, with values inside the limits, so the store's own filter
//!   (`tenant = $n`, `tool = $n`) keeps every other tenant out;
//! - the bulk resolve checks each listed key ([`keys_in_scope`]);
//! - everything else that shows data across tenants (the overview, the backlog, the
//!   duplicates, search, the runbook, and any route not named here) is refused to a
//!   limited token: failing closed is what keeps a new page from leaking.
//!
//! Refusals never name the tenant or tool of a key the token may not see.

use super::{AppState, Error};
use crate::auth::{Principal, Scope};
use crate::guard::IdempotencyKey;
use std::collections::BTreeSet;

/// What a path shows, as far as the limits are concerned.
#[derive(Debug, PartialEq, Eq)]
enum Reach<'a> {
    /// One key, named by this (still percent-encoded) path segment.
    Key(&'a str),
    /// A listing filtered by the query's `tenant` and `tool`.
    Filtered,
    /// Nothing of any tenant (the CSRF token, signing out, the bulk resolve: which
    /// checks its keys itself).
    Nothing,
    /// Data across tenants that no filter narrows.
    Everything,
}

fn reach(path: &str) -> Reach<'_> {
    match path {
        "/keys"
        | "/export/attempts.csv"
        | "/export/attempts.ndjson"
        | "/export/attempts.manifest" => return Reach::Filtered,
        "/logout" | "/api/v1/csrf" | "/backlog/resolve" => return Reach::Nothing,
        _ => {}
    }
    let segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        ["", "keys", key] | ["", "keys", key, "resolve"] => Reach::Key(key),
        ["", "api", "v1", "keys", key] | ["", "api", "v1", "keys", key, "resolve"] => {
            Reach::Key(key)
        }
        _ => Reach::Everything,
    }
}

/// 403 (or 400 for a key that cannot be read) unless a limited token's request stays
/// inside its limits. Unlimited callers pass at once; the guard's routes and the public
/// paths are not sent here.
pub async fn check(
    state: &AppState,
    principal: &Principal,
    path: &str,
    query: Option<&str>,
) -> Result<(), Error> {
    let scope = &principal.scope;
    if !scope.is_limited() {
        return Ok(());
    }
    match reach(path) {
        Reach::Nothing => Ok(()),
        Reach::Key(segment) => {
            // Decoded as the router decodes it; a key that does not read is refused
            // here rather than passed on, so no spelling reaches a key unchecked.
            let key = percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .ok()
                .and_then(|k| IdempotencyKey::parse(&k).ok())
                .ok_or_else(|| {
                    Error::bad_request(
                        "key",
                        "expected 64 lowercase hexadecimal characters (a SHA-256 key)",
                    )
                })?;
            keys_in_scope(state, principal, &[&key]).await
        }
        Reach::Filtered => filtered(principal, query),
        Reach::Everything => Err(Error::Forbidden(format!(
            "This page shows keys of every tenant and tool, and the token {:?} is limited to {}. Use /keys or /export/… filtered by {} (docs/AUTH.md, \"Token limits\").",
            principal.name,
            describe(scope),
            filters(scope)
        ))),
    }
}

/// 403 unless every key that exists is inside the token's limits (a key that does not
/// exist is left to the handler's 404). Read one at a time: a bulk resolve lists at
/// most 1,000 keys, each an indexed lookup.
pub(crate) async fn keys_in_scope(
    state: &AppState,
    principal: &Principal,
    keys: &[&IdempotencyKey],
) -> Result<(), Error> {
    let scope = &principal.scope;
    if !scope.is_limited() {
        return Ok(());
    }
    for key in keys {
        if let Some(r) = state.store.record(key).await?
            && scope.check(&r.intent.tenant, &r.intent.tool).is_err()
        {
            return Err(Error::Forbidden(format!(
                "The token {:?} is limited to {}; key {} is outside them. Nothing was read or changed.",
                principal.name,
                describe(scope),
                crate::web::filters::short_key(key.as_str())
            )));
        }
    }
    Ok(())
}

/// A listing's query must filter by each limited dimension, with values inside it.
/// Every non-empty value given counts (pages read the first, exports refuse a second),
/// so whichever one the handler uses is inside the limits.
fn filtered(principal: &Principal, query: Option<&str>) -> Result<(), Error> {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.trim().to_string()))
            .collect();
    let dimensions = [
        ("tenant", &principal.scope.tenants),
        ("tool", &principal.scope.tools),
    ];
    for (field, allowed) in dimensions {
        let Some(allowed) = allowed else { continue };
        let given: Vec<&str> = pairs
            .iter()
            .filter(|(k, v)| k == field && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect();
        let inside = !given.is_empty() && given.iter().all(|v| allowed.contains(*v));
        if !inside {
            return Err(Error::Forbidden(format!(
                "The token {:?} is limited to {field}s {}: add {field}= one of them to the query. Nothing was read.",
                principal.name,
                list(allowed)
            )));
        }
    }
    Ok(())
}

fn list(values: &BTreeSet<String>) -> String {
    values.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// "tenants acme, initech and tools issue_refund".
fn describe(scope: &Scope) -> String {
    let parts: Vec<String> = [("tenants", &scope.tenants), ("tools", &scope.tools)]
        .into_iter()
        .filter_map(|(name, values)| values.as_ref().map(|v| format!("{name} {}", list(v))))
        .collect();
    parts.join(" and ")
}

/// "tenant=acme" or "tenant and tool".
fn filters(scope: &Scope) -> &'static str {
    match (scope.tenants.is_some(), scope.tools.is_some()) {
        (true, true) => "tenant and tool",
        (true, false) => "tenant",
        _ => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, Via};

    fn limited(tenants: &[&str]) -> Principal {
        Principal {
            name: "acme-admin".into(),
            roles: BTreeSet::from([Role::Admin]),
            via: Via::Token,
            scope: Scope {
                tenants: Some(tenants.iter().map(|t| t.to_string()).collect()),
                tools: None,
            },
        }
    }

    #[test]
    fn paths_are_sorted_by_what_they_show_and_unknown_ones_show_everything() {
        let k = "ab".repeat(32);
        assert_eq!(reach(&format!("/keys/{k}")), Reach::Key(&k));
        assert_eq!(reach(&format!("/keys/{k}/resolve")), Reach::Key(&k));
        assert_eq!(reach(&format!("/api/v1/keys/{k}/resolve")), Reach::Key(&k));
        assert_eq!(reach("/keys"), Reach::Filtered);
        assert_eq!(reach("/export/attempts.ndjson"), Reach::Filtered);
        for p in [
            "/",
            "/backlog",
            "/duplicates",
            "/search",
            "/runbook",
            "/a/new/page",
        ] {
            assert_eq!(reach(p), Reach::Everything, "{p}");
        }
        assert_eq!(reach(&format!("/keys/{k}/other")), Reach::Everything);
    }

    #[test]
    fn a_listing_must_filter_inside_the_limits_whichever_value_the_page_reads() {
        let p = limited(&["acme"]);
        assert!(filtered(&p, Some("tenant=acme&status=unknown")).is_ok());
        assert!(
            filtered(&p, Some("tenant=+acme+")).is_ok(),
            "trimmed as pages trim"
        );
        for q in [
            None,
            Some("tenant="),
            Some("tenant=globex"),
            Some("tenant=&tenant=globex"),
            Some("tenant=acme&tenant=globex"),
            Some("tenant=acm%65x"),
        ] {
            let e = filtered(&p, q).unwrap_err();
            assert!(
                e.to_string().contains("limited to tenants acme"),
                "{q:?}: {e}"
            );
        }
    }
}
