//! The HTML pages, one module per page family, and the JSON view of a key. Every page
//! reads fully without JavaScript; every filter lives in the query string.

mod api;
mod backlog;
mod chart;
mod diff;
mod key_detail;
mod keys;
mod overview;
mod resolve;
mod resolve_bulk;

pub use overview::OverviewCache;
pub mod params;
mod search;

use super::AppState;
use super::assets;
use super::filters::{When, when};
use crate::guard::Status;
use crate::store::KeySummary;
use axum::Router;
use chrono::{DateTime, Utc};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(overview::router())
        .merge(keys::router())
        .merge(key_detail::router())
        .merge(backlog::router())
        .merge(search::router())
        .merge(api::router())
        .merge(resolve::router())
        .merge(resolve_bulk::router())
}

/// What `templates/base.html` needs on every page.
#[derive(Debug, Clone)]
pub struct Layout {
    pub title: String,
    /// Which main navigation entry is the current page: `overview`, `keys`, `backlog`.
    pub nav: &'static str,
    /// The search box's value.
    pub q: String,
    pub css: String,
    pub js: String,
    pub icon: String,
    pub version: &'static str,
    /// Who is signed in, and the CSRF token of the page's forms.
    pub ctx: crate::web::auth::PageContext,
}

impl Layout {
    pub fn new(title: impl Into<String>, nav: &'static str) -> Self {
        Self {
            title: title.into(),
            nav,
            q: String::new(),
            css: assets::url("app.css"),
            js: assets::url("app.js"),
            icon: assets::url("favicon.svg"),
            version: env!("CARGO_PKG_VERSION"),
            ctx: crate::web::auth::page_context(),
        }
    }

    pub fn with_query(mut self, q: impl Into<String>) -> Self {
        self.q = q.into();
        self
    }
}

/// A status as a badge: text first, colour second.
#[derive(Debug, Clone)]
pub struct Badge {
    pub label: String,
    /// CSS modifier: `ok`, `fail`, `unknown`, `progress`, `expired`.
    pub class: &'static str,
}

pub fn status_badge(status: Status, lease_expired: bool) -> Badge {
    let (label, class) = match status {
        Status::Done => ("DONE", "ok"),
        Status::Failed => ("FAILED", "fail"),
        Status::Unknown => ("UNKNOWN", "unknown"),
        Status::InProgress if lease_expired => ("IN_PROGRESS · lease expired", "expired"),
        Status::InProgress => ("IN_PROGRESS", "progress"),
    };
    Badge {
        label: label.to_string(),
        class,
    }
}

/// One key in a table (keys list, backlog, same business ref).
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub key: String,
    pub short: String,
    pub tenant: String,
    pub tool: String,
    pub intent_id: String,
    pub business_ref: Option<String>,
    pub badge: Badge,
    /// The fencing token as listed: a bulk resolve expects each key still at it.
    pub token: i64,
    pub attempts: i64,
    pub created: When,
    pub updated: When,
    /// Time left in the provider's key retention, or how long ago it ran out.
    pub retention: String,
    pub past_retention: bool,
    /// Age of the key (since its claim).
    pub age: String,
}

impl KeyRow {
    pub fn new(k: &KeySummary, now: DateTime<Utc>) -> Self {
        let past_retention = k.provider_retention_until <= now;
        let left = super::filters::duration(k.provider_retention_until - now);
        Self {
            short: super::filters::short_key(&k.key),
            key: k.key.clone(),
            tenant: k.tenant.clone(),
            tool: k.tool.clone(),
            intent_id: k.intent_id.clone(),
            business_ref: k.business_ref.clone(),
            badge: status_badge(k.status, k.lease_expired(now)),
            token: k.fencing_token,
            attempts: k.attempt_count,
            created: when(k.created_at, now),
            updated: when(k.updated_at, now),
            retention: if past_retention {
                format!("forgotten {left} ago")
            } else {
                format!("{left} left")
            },
            past_retention,
            age: super::filters::duration(now - k.created_at),
        }
    }
}
