//! The web app in process: `web::app` driven with `oneshot`, the seeded app the page
//! tests start from, and readers for what a page links to.

use crate::support::TestDb;
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use idemwatch::web::{self, AppState};
use std::sync::Arc;
use tower::ServiceExt;

/// An answer, its body as text.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

pub async fn get(app: &Router, uri: &str) -> Page {
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Page {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// The keys a page links to (`/keys/<64 hex>`), in page order, each once.
pub fn linked_keys(body: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, _) in body.match_indices("href=\"/keys/") {
        let start = i + "href=\"/keys/".len();
        let Some(candidate) = body.get(start..start + 64) else {
            continue;
        };
        let hex = candidate
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if hex && body[start + 64..].starts_with('"') && !out.iter().any(|k| k == candidate) {
            out.push(candidate.to_string());
        }
    }
    out
}

/// The href of the link with `rel="next"`, unescaped.
pub fn next_link(body: &str) -> Option<String> {
    let at = body.find("rel=\"next\"")?;
    let start = body[..at].rfind("href=\"")? + "href=\"".len();
    let end = start + body[start..].find('"')?;
    Some(body[start..end].replace("&#38;", "&"))
}

/// The overview card of `tool`.
pub async fn setup(db: &TestDb) -> (Router, Seeded) {
    let seeded = seed(&db.store, Utc::now(), 0).await;
    let state = AppState::new(db.store.clone()).with_clock(Arc::new(seeded.clock.clone()));
    (web::app(state), seeded)
}
