//! `POST /backlog/resolve`: one decision for many backlog keys.
//!
//! The keys are the ones ticked on the backlog, or exactly the backlog's current
//! filter (its `tool`), never more: the first post lists the keys it found, with the
//! fencing token of each, and the count; the confirming post acts on exactly that
//! list, each key through the guard on its own with its own expected token. A batch
//! is at most [`MAX_BATCH`] keys. Marking done is not offered in bulk: it needs each
//! key's own evidence (the provider's resource id).

use super::Layout;
use super::params::Params;
use super::params::{parse_key, parse_resolution};
use super::resolve::{KeyStateView, label, meaning};
use crate::auth::Principal;
use crate::guard::{FencingToken, IdempotencyKey, Resolution, ResolveRequest};
use crate::web::auth::{Csrf, check_form_csrf, require_resolve};
use crate::web::limits::keys_in_scope;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::middleware::from_fn;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;

/// The most keys one bulk resolve acts on.
pub const MAX_BATCH: usize = 1000;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/backlog/resolve",
        post(bulk).layer(from_fn(require_resolve)),
    )
}

/// One key of a batch, with the fencing token the person saw (`<key>.<token>` in forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: IdempotencyKey,
    pub token: FencingToken,
}

impl Item {
    fn parse(text: &str) -> Result<Item, Error> {
        let bad = || {
            Error::bad_request(
                "key",
                "each selected key must be written <key>.<fencing token>; reload the backlog",
            )
        };
        let (key, token) = text.trim().split_once('.').ok_or_else(bad)?;
        Ok(Item {
            key: parse_key(key).map_err(|_| bad())?,
            token: token.parse().map_err(|_| bad())?,
        })
    }

    /// The value of the item's hidden input or checkbox.
    pub fn value(&self) -> String {
        format!("{}.{}", self.key, self.token)
    }
}

/// One row of the confirmation table.
struct Row {
    item: Item,
    state: Option<KeyStateView>,
}

#[derive(Template)]
#[template(path = "resolve_bulk_confirm.html")]
struct BulkConfirmPage {
    layout: Layout,
    /// "the 12 keys you selected" / "all 37 backlog keys of issue_refund".
    scope: String,
    resolution: &'static str,
    resolution_value: &'static str,
    meaning: &'static str,
    reason: String,
    rows: Vec<Row>,
    csrf_token: String,
}

/// How one key of a confirmed batch ended.
struct BulkResultRow {
    key: String,
    short: String,
    /// "Resolved", or the refusal's title.
    result: &'static str,
    ok: bool,
    why: String,
}

#[derive(Template)]
#[template(path = "resolve_bulk_result.html")]
struct ResultPage {
    layout: Layout,
    resolution: &'static str,
    resolved: usize,
    refused: usize,
    outcomes: Vec<BulkResultRow>,
}

async fn bulk(
    State(state): State<AppState>,
    viewer: Viewer,
    principal: Principal,
    csrf: Csrf,
    form: Result<Form<Vec<(String, String)>>, FormRejection>,
) -> Result<Response, Error> {
    let Form(pairs) = form.map_err(|e| Error::bad_request("form", e.body_text()))?;
    let p = Params(pairs);
    check_form_csrf(&state, Some(&principal), p.get("csrf_token"))?;
    let form = BulkForm::parse(&p, &principal)?;
    // A token limited to some tenants or tools acts on none of the list unless every
    // key is inside its limits (docs/AUTH.md, "Token limits").
    let keys: Vec<&IdempotencyKey> = form.selected.iter().map(|i| &i.key).collect();
    keys_in_scope(&state, &principal, &keys).await?;
    let html = if p.get("confirm") == Some("yes") {
        // Exactly the listed keys, each under the token shown for it.
        let outcomes = resolve_each(&state, &form).await;
        ResultPage::new(&viewer, &principal, form.resolution, outcomes).render()?
    } else {
        // Step 1: find the keys and show them; nothing is written.
        let (scope, rows) = to_confirm(&state, &principal, &p, form.selected).await?;
        BulkConfirmPage {
            layout: Layout::new("Confirm bulk resolve", "backlog", &viewer),
            scope,
            resolution: label(form.resolution),
            resolution_value: form.resolution.as_str(),
            meaning: meaning(form.resolution),
            reason: form.request.reason,
            rows,
            csrf_token: csrf.token,
        }
        .render()?
    };
    Ok(Html(html).into_response())
}

/// What a bulk resolve asks, checked: the decision, the request each key's resolve
/// sends (its expected token left to fill in), and the keys ticked.
struct BulkForm {
    resolution: Resolution,
    request: ResolveRequest,
    selected: Vec<Item>,
}

impl BulkForm {
    fn parse(p: &Params, principal: &Principal) -> Result<Self, Error> {
        let resolution = parse_resolution(p.get("resolution"))?;
        if resolution == Resolution::Done {
            return Err(Error::bad_request(
                "resolution",
                "marking done needs each key's own evidence (the provider's resource id): resolve those keys one at a time from their pages",
            ));
        }
        let request = ResolveRequest {
            resolution,
            reason: p.get("reason").unwrap_or_default().to_string(),
            evidence: None,
            result: None,
            actor: principal.actor(),
            expected_token: None,
        };
        request.validate()?;
        let selected = listed_items(p)?;
        Ok(Self {
            resolution,
            request,
            selected,
        })
    }
}

impl ResultPage {
    fn new(
        viewer: &Viewer,
        principal: &Principal,
        resolution: Resolution,
        outcomes: Vec<BulkResultRow>,
    ) -> Self {
        let resolved = outcomes.iter().filter(|o| o.ok).count();
        let refused = outcomes.len() - resolved;
        tracing::info!(user = %principal.name, resolved, refused, "bulk resolve");
        Self {
            layout: Layout::new("Bulk resolve: result", "backlog", viewer),
            resolution: label(resolution),
            resolved,
            refused,
            outcomes,
        }
    }
}

/// The keys ticked (`key=KEY.TOKEN`, each once).
fn listed_items(p: &Params) -> Result<Vec<Item>, Error> {
    let listed: Vec<&str> =
        p.0.iter()
            .filter(|(k, v)| k == "key" && !v.trim().is_empty())
            .map(|(_, v)| v.as_str())
            .collect();
    check_size(listed.len(), "key")?;
    distinct(
        listed
            .into_iter()
            .map(Item::parse)
            .collect::<Result<_, _>>()?,
    )
}

/// Resolves each key of `form` under its own token, one guard call each: how each ended.
async fn resolve_each(state: &AppState, form: &BulkForm) -> Vec<BulkResultRow> {
    let mut outcomes = Vec::with_capacity(form.selected.len());
    for item in &form.selected {
        let request = ResolveRequest {
            expected_token: Some(item.token),
            ..form.request.clone()
        };
        let done = state.guard.resolve(&item.key, &request).await;
        outcomes.push(BulkResultRow::new(item, done.err().map(Error::from)));
    }
    outcomes
}

impl BulkResultRow {
    /// How `item` ended: resolved, or refused with `refusal`.
    fn new(item: &Item, refusal: Option<Error>) -> Self {
        let (result, why) = match &refusal {
            None => ("Resolved", String::new()),
            Some(e) => (
                match e.status().as_u16() {
                    409 => "Conflict: changed since you looked",
                    422 => "Not resolvable",
                    404 => "Not found",
                    _ => "Failed",
                },
                e.to_string(),
            ),
        };
        Self {
            key: item.key.to_string(),
            short: crate::web::filters::short_key(item.key.as_str()),
            result,
            ok: refusal.is_none(),
            why,
        }
    }
}

/// The keys the confirmation lists, each with its state now, and what they are: the
/// backlog keys of the filter (`scope=filter`), or the keys ticked.
async fn to_confirm(
    state: &AppState,
    principal: &Principal,
    p: &Params,
    selected: Vec<Item>,
) -> Result<(String, Vec<Row>), Error> {
    let (scope, items) = if p.get("scope") == Some("filter") {
        backlog_of(state, principal, p.text("tool")?).await?
    } else if selected.is_empty() {
        return Err(Error::bad_request(
            "key",
            "tick at least one key, or choose all keys matching the filter",
        ));
    } else {
        (
            format!("the {} keys you selected", selected.len()),
            selected,
        )
    };
    let now = state.clock.now();
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let record = state.store.record(&item.key).await?;
        let state = record.map(|r| KeyStateView::new(&r, now));
        rows.push(Row { item, state });
    }
    Ok((scope, rows))
}

/// The backlog keys of `tool` (every tool: `None`), at most [`MAX_BATCH`], each with its
/// token now, and how the confirmation names them.
async fn backlog_of(
    state: &AppState,
    principal: &Principal,
    tool: Option<String>,
) -> Result<(String, Vec<Item>), Error> {
    let wanted = u32::try_from(MAX_BATCH + 1).unwrap_or(u32::MAX);
    let now = state.clock.now();
    let page = state
        .store
        .backlog(tool.as_deref(), None, None, wanted, now)
        .await?;
    if page.keys.len() > MAX_BATCH {
        return Err(Error::bad_request(
            "scope",
            format!(
                "more than {MAX_BATCH} backlog keys match this filter, and a batch is at most {MAX_BATCH}: filter by one tool, or tick the keys to resolve"
            ),
        ));
    }
    let keys: Vec<&IdempotencyKey> = page.keys.iter().map(|k| &k.key).collect();
    keys_in_scope(state, principal, &keys).await?;
    let scope = match &tool {
        Some(t) => format!("all {} backlog keys of tool {t}", page.keys.len()),
        None => format!("all {} backlog keys", page.keys.len()),
    };
    let items = page
        .keys
        .into_iter()
        .map(|k| Item {
            key: k.key,
            token: k.fencing_token,
        })
        .collect();
    Ok((scope, items))
}

/// Each key once. A key listed twice would be resolved once and then refused as a
/// stale write for every further copy, each refusal a permanent row in its log (one
/// request once appended 999). The same key under two different tokens is a form
/// that was edited or merged from two pages: refused, naming the key.
fn distinct(items: Vec<Item>) -> Result<Vec<Item>, Error> {
    let mut seen = std::collections::HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match seen.get(&item.key) {
            None => {
                seen.insert(item.key.clone(), item.token);
                out.push(item);
            }
            Some(&token) if token == item.token => {}
            Some(&token) => {
                return Err(Error::bad_request(
                    "key",
                    format!(
                        "{} is listed twice, with fencing tokens {token} and {}: reload the backlog",
                        crate::web::filters::short_key(item.key.as_str()),
                        item.token
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn check_size(n: usize, field: &'static str) -> Result<(), Error> {
    if n > MAX_BATCH {
        return Err(Error::bad_request(
            field,
            format!("{n} keys selected; a batch is at most {MAX_BATCH}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_listed_twice_is_resolved_once_and_two_tokens_are_refused() {
        let item = |c: &str, token| Item {
            key: IdempotencyKey::parse(&c.repeat(64)).unwrap(),
            token: FencingToken(token),
        };
        let once = distinct(vec![item("a", 1), item("b", 2), item("a", 1), item("a", 1)]);
        assert_eq!(once.unwrap(), vec![item("a", 1), item("b", 2)]);
        let e = distinct(vec![item("a", 1), item("a", 2)]).unwrap_err();
        assert!(e.to_string().starts_with("key: "), "{e}");
    }

    #[test]
    fn a_batch_item_is_a_key_and_the_token_seen() {
        let key = "a".repeat(64);
        let item = Item::parse(&format!("{key}.3")).unwrap();
        assert_eq!(
            (item.key.as_str(), item.token),
            (key.as_str(), FencingToken(3))
        );
        assert_eq!(item.value(), format!("{key}.3"));
        for bad in [key.clone(), format!("{key}.x"), "abc.1".to_string()] {
            assert!(Item::parse(&bad).is_err(), "{bad}");
        }
        assert!(check_size(MAX_BATCH, "key").is_ok());
        assert!(check_size(MAX_BATCH + 1, "key").is_err());
    }
}
