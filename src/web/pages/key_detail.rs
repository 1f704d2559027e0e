//! `/keys/{key}`: one key's record, its attempt timeline, and the other keys with the
//! same business ref. Answers "what happened to order A-88214?". The page is one read
//! ([`crate::store::Store::key_history`]) shown by a pure view ([`KeyPageView`]).

use super::key_view::{Context, KeyPageView, SIBLINGS};
use super::params::parse_key_prefix;
use crate::guard::IdempotencyKey;
use crate::store::HistoryRead;
use crate::web::links::link;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;

pub fn router() -> Router<AppState> {
    Router::new().route("/keys/{key}", get(key_page))
}

/// Attempts shown on one page of a key's timeline (and in one `GET /api/v1/keys/{key}`):
/// a key retried 60,000 times made a 122 MB page when all were shown.
pub const TIMELINE_PAGE: u32 = 500;

/// `?after=SEQ`: the timeline from the attempt after `SEQ` (default: from the first).
pub fn parse_after(pairs: &[(String, String)]) -> Result<i64, Error> {
    match pairs.iter().rev().find(|(k, _)| k == "after") {
        None => Ok(0),
        Some((_, v)) if v.is_empty() => Ok(0),
        Some((_, v)) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                Error::bad_request(
                    "after",
                    format!(
                        "after must be an attempt number (0 or more), not {:?}",
                        v.chars().take(40).collect::<String>()
                    ),
                )
            }),
    }
}

/// A prefix or an upper-case key: the keys it stands for.
fn prefix_redirect(text: &str) -> Result<Response, Error> {
    let prefix = parse_key_prefix("key", text)?;
    let to = match prefix.len() {
        64 => format!("/keys/{prefix}"),
        _ => link("/keys", &[("key", Some(&prefix))]),
    };
    Ok(Redirect::to(&to).into_response())
}

async fn key_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(key): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, Error> {
    let after = parse_after(&pairs)?;
    let Ok(key) = IdempotencyKey::parse(&key) else {
        return prefix_redirect(&key);
    };
    let now = state.clock.now();
    let read = HistoryRead {
        after,
        page: TIMELINE_PAGE,
        siblings: SIBLINGS + 1,
    };
    let history = state.store.key_history(&key, read).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "No key {key} is recorded. It may never have been claimed, or retention has removed it."
        ))
    })?;
    let money = state.tools.amount(&history.record.intent.tool);
    let page = KeyPageView::new(
        history,
        Context {
            money,
            provider_lookup: state.provider_lookup.map(|prefix| format!("{prefix}{key}")),
            viewer: &viewer,
            after,
            page_size: TIMELINE_PAGE,
            now,
        },
    );
    Ok(Html(page.render()?).into_response())
}
