//! `/duplicates`: open suspected duplicate pairs (docs/UI.md), and
//! `POST /duplicates/{key}/review`, where a resolver marks a pair intended (a genuine
//! repeat, with a reason) or confirmed (a real duplicate: the page says what to do at
//! the provider). The review is the guard's (`Guard::review_duplicate`): written with a
//! `duplicate_reviewed` attempt under the key's lock, refused if someone reviewed first.

use super::Layout;
use super::pairs::{CONFIRMED_ADVICE, PairView};
use super::params::parse_key;
use crate::auth::Principal;
use crate::guard::{DuplicateReview, DuplicateVerdict};
use crate::web::auth::{CsrfForm, checked_form, require_resolve};
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::middleware::from_fn;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

/// The most pairs the page lists (newest first).
const LISTED: i64 = 200;

pub fn router() -> Router<AppState> {
    Router::new().route("/duplicates", get(list)).route(
        "/duplicates/{key}/review",
        post(review).layer(from_fn(require_resolve)),
    )
}

#[derive(Template)]
#[template(path = "duplicates.html")]
struct DuplicatesPage {
    layout: Layout,
    /// The tool filter, or empty.
    tool: String,
    pairs: Vec<PairView>,
    capped: bool,
    may_review: bool,
    csrf_token: String,
    advice: &'static str,
}

/// `?tool=`: the open pairs of one tool (the alert's link).
#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    tool: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    viewer: Viewer,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, Error> {
    let Query(query) = query.map_err(|e| Error::bad_request("query", e.body_text()))?;
    let tool = query.tool.filter(|t| !t.is_empty());
    let now = state.clock.now();
    let pairs = state
        .store
        .open_suspected_pairs(tool.as_deref(), LISTED + 1)
        .await?;
    let page = DuplicatesPage {
        layout: Layout::new("Suspected duplicates", "duplicates", &viewer),
        tool: tool.unwrap_or_default(),
        capped: pairs.len() as i64 > LISTED,
        pairs: pairs
            .iter()
            .take(LISTED as usize)
            .map(|p| PairView::new(p, None, now))
            .collect(),
        may_review: viewer.user.as_ref().is_some_and(|u| u.can_resolve),
        csrf_token: viewer.csrf_token.clone(),
        advice: CONFIRMED_ADVICE,
    };
    Ok(Html(page.render()?).into_response())
}

/// The form as typed; every field optional so a missing one is named.
#[derive(Debug, Default, Deserialize)]
struct ReviewForm {
    other_key: Option<String>,
    verdict: Option<String>,
    reason: Option<String>,
    csrf_token: Option<String>,
}

impl CsrfForm for ReviewForm {
    fn csrf_token(&self) -> Option<&str> {
        self.csrf_token.as_deref()
    }
}

async fn review(
    State(state): State<AppState>,
    principal: Principal,
    Path(key): Path<String>,
    form: Result<Form<ReviewForm>, FormRejection>,
) -> Result<Response, Error> {
    let form = checked_form(&state, &principal, form)?;
    let key = parse_key(&key)?;
    let other_key = parse_key(form.other_key.as_deref().unwrap_or_default())
        .map_err(|_| Error::bad_request("other_key", "expected the earlier key of the pair"))?;
    let verdict: DuplicateVerdict = form
        .verdict
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|_| Error::bad_request("verdict", "choose intended or confirmed"))?;
    let review = DuplicateReview {
        other_key,
        verdict,
        reason: form.reason.unwrap_or_default(),
        actor: principal.actor(),
    };
    state.guard.review_duplicate(&key, &review).await?;
    Ok(Redirect::to(&format!("/keys/{key}#duplicates")).into_response())
}
