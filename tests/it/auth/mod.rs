//! Authentication and roles through `web::app`: the role matrix (each role × each page
//! and endpoint, by session and by bearer token), the login, proxy headers from
//! trusted and untrusted peers, CSRF refusals that write nothing, and the security
//! headers on every kind of response.

mod csrf;
mod proxy_headers;
mod roles;
mod security_headers;
mod sign_in;

use crate::support::TestDb;
use crate::support::auth::*;
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use chrono::Utc;
use std::sync::Arc;

pub(super) async fn setup(db: &TestDb) -> (Router, Seeded) {
    let s = seed(&db.store, Utc::now(), 0).await;
    (builtin_app(&db.store, Arc::new(s.clock.clone())).await, s)
}
