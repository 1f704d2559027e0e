//! The demo's own pages, served only by `idemwatch demo`: `GET /demo/stats` (the
//! provider's own count of effects next to what the guard recorded) and
//! `GET /demo/provider/{key}`, the simulated provider's dashboard lookup of the effects
//! tagged with one idempotency key: what the key page asks a person to check before
//! resolving an undecided key.

use super::Demo;
use crate::guard::{IdempotencyKey, MoneyField};
use crate::web::filters::{When, money, when};
use crate::web::{Layout, Viewer};
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

/// Where the demo provider looks a key up: this path and the key. The key page links
/// it when the demo runs.
pub const PROVIDER_LOOKUP: &str = "/demo/provider/";

/// The demo's routes, with their state applied: merge into `web::app`.
pub fn router(demo: Demo) -> Router {
    Router::new()
        .route("/demo/stats", get(stats))
        .route("/demo/provider/{key}", get(provider_lookup))
        .with_state(demo)
}

async fn stats(State(demo): State<Demo>) -> Response {
    match demo.snapshot().await {
        Ok(snapshot) => Json(snapshot).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "demo: stats unavailable");
            let body = json!({ "error": "the database is unavailable; try again" });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// One effect as the provider's dashboard lists it.
struct EffectRow {
    id: String,
    tool: String,
    order: String,
    amount: String,
    at: When,
}

#[derive(Template)]
#[template(path = "demo_provider.html")]
struct ProviderPage {
    layout: Layout,
    key: String,
    effects: Vec<EffectRow>,
    /// How long the provider deduplicates a key, in the demo's real time.
    retention: String,
}

async fn provider_lookup(
    State(demo): State<Demo>,
    viewer: Viewer,
    Path(key): Path<String>,
) -> Response {
    let Ok(key) = IdempotencyKey::parse(&key.to_ascii_lowercase()) else {
        let text = "Not an idempotency key: 64 hex characters expected.";
        return (StatusCode::NOT_FOUND, text).into_response();
    };
    // The simulated provider refunds in pence.
    let pence = MoneyField::new("amount_p".into(), "GBP".into(), 2).ok();
    let now = chrono::Utc::now();
    let provider = demo.provider();
    let effects = provider
        .effects_tagged(key.as_str())
        .into_iter()
        .map(|e| EffectRow {
            id: e.resource_id,
            tool: e.tool,
            order: e.order.unwrap_or_default(),
            amount: match (e.amount_p, &pence) {
                (Some(p), Some(m)) => money(m, p),
                _ => String::new(),
            },
            at: when(e.performed_at, now),
        })
        .collect();
    let page = ProviderPage {
        layout: Layout::new("Demo provider lookup", "", &viewer),
        key: key.to_string(),
        effects,
        retention: crate::web::filters::duration(
            chrono::TimeDelta::from_std(provider.retention()).unwrap_or(chrono::TimeDelta::MAX),
        ),
    };
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "demo: provider page");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
