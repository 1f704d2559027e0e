//! The HTML pages, one module per page family, and the JSON view of a key. Every page
//! reads fully without JavaScript; every filter lives in the query string.

mod api;
mod backlog;
mod chart;
mod counted;
mod diff;
mod duplicates;
mod key_detail;
mod key_steps;
mod key_view;
mod keys;
mod overview;
mod pairs;
mod resolve;
mod resolve_bulk;
mod runbook;

pub use overview::OverviewCache;
pub mod params;

pub use crate::web::layout::Layout;
mod search;

use super::AppState;
use super::filters::{When, when};
use crate::guard::{LeaseState, Status, resend_safe};
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
        .merge(duplicates::router())
        .merge(runbook::router())
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

/// A lease in words (the key page, the resolve pages).
pub fn lease_note(state: LeaseState) -> &'static str {
    match state {
        LeaseState::Held => "held by a worker",
        LeaseState::Expired => "expired: the worker died or hung",
        LeaseState::Released => "released",
    }
}

/// Where a key stands against its provider's retention, as every page shows it.
/// `past` is the one decision ([`crate::guard::resend_safe`] on `resend_safe_until`);
/// the words name the provider's own deadline once it is inside the safety margin.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// A resend is no longer safe: only a person can resolve an UNKNOWN key.
    pub past: bool,
    /// For tables: "23 h 19 min left", "forgotten in 40 s", "forgotten 2 h ago".
    pub short: String,
    /// For sentences: "the provider remembers this key for 23 h 19 min more".
    pub long: String,
}

impl Retention {
    pub fn new(
        resend_safe_until: DateTime<Utc>,
        provider_retention_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Self {
        use super::filters::duration;
        if resend_safe(resend_safe_until, now) {
            let left = duration(resend_safe_until - now);
            Self {
                past: false,
                short: format!("{left} left"),
                long: format!("the provider remembers this key for {left} more"),
            }
        } else if now < provider_retention_until {
            let left = duration(provider_retention_until - now);
            Self {
                past: true,
                short: format!("forgotten in {left}"),
                long: format!(
                    "the provider forgets this key in {left}, too soon for a safe resend"
                ),
            }
        } else {
            let ago = duration(now - provider_retention_until);
            Self {
                past: true,
                short: format!("forgotten {ago} ago"),
                long: format!("the provider forgot this key {ago} ago"),
            }
        }
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
    /// Time left for a safe resend, or when the provider forgets / forgot the key.
    pub retention: String,
    pub past_retention: bool,
    /// Age of the key (since its claim).
    pub age: String,
}

impl KeyRow {
    pub fn new(k: &KeySummary, now: DateTime<Utc>) -> Self {
        let retention = Retention::new(k.resend_safe_until, k.provider_retention_until, now);
        Self {
            short: super::filters::short_key(k.key.as_str()),
            key: k.key.to_string(),
            tenant: k.intent.tenant.clone(),
            tool: k.intent.tool.clone(),
            intent_id: k.intent.intent_id.clone(),
            business_ref: k.business_ref.clone(),
            badge: status_badge(
                k.status,
                LeaseState::of(k.status, k.lease_until, now) == LeaseState::Expired,
            ),
            token: k.fencing_token.0,
            attempts: k.attempt_count,
            created: when(k.created_at, now),
            updated: when(k.updated_at, now),
            past_retention: retention.past,
            retention: retention.short,
            age: super::filters::duration(now - k.created_at),
        }
    }
}
