//! The web app in process: [`TestApp`] drives `web::app` with `oneshot` as one caller
//! (anonymous, a signed-in person or a script with a token), with typed helpers for
//! what the tests do again and again; and readers for what a page links to.

use crate::support::TestDb;
use crate::support::auth::{Who, builtin_app, csrf_token, form, request};
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use idemwatch::guard::ManualClock;
use idemwatch::web::{self, AppState};
use serde_json::Value;
use std::sync::Arc;
use tower::ServiceExt;

/// An answer, its body as text.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    /// The JSON body; panics (showing the body) when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends `request` to `app`. A body that is not UTF-8 is shown lossily: some tests send
/// bytes on purpose and read only the status.
pub async fn send(app: &Router, request: Request<Body>) -> Page {
    let (status, headers, bytes) = answer(app, request).await;
    Page {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).to_string(),
    }
}

/// A plain GET with no credentials; the page must be UTF-8.
pub async fn get(app: &Router, uri: &str) -> Page {
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let (status, headers, bytes) = answer(app, request).await;
    Page {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

async fn answer(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, bytes)
}

/// `GET /metrics` of `app`: the exposition text, after checking status and content type.
pub async fn metrics(app: &Router) -> String {
    let page = get(app, "/metrics").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(
        page.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    page.body
}

/// The two steps of the resolve form: the review page, then the confirmed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Review,
    Confirm,
}

/// The web app over a test database, as one caller. Cheap to clone: [`TestApp::as_`]
/// is the same app (same database, same clock) asked by someone else.
#[derive(Clone)]
pub struct TestApp {
    pub router: Router,
    /// The clock the app reads (the seed's: it ends at the seed's `end`).
    pub clock: ManualClock,
    who: Who<'static>,
}

impl TestApp {
    /// The seeded app without an auth file (the local-only mode), asked anonymously.
    pub async fn open(db: &TestDb) -> (TestApp, Seeded) {
        Self::open_at(db, Utc::now()).await
    }

    /// As [`TestApp::open`], the seed ending at `end`.
    pub async fn open_at(db: &TestDb, end: DateTime<Utc>) -> (TestApp, Seeded) {
        let seeded = seed(&db.store, end, 0).await;
        let state = AppState::new(db.store.clone()).with_clock(Arc::new(seeded.clock.clone()));
        (Self::new(web::app(state), &seeded.clock), seeded)
    }

    /// As [`TestApp::open`], serving with a tools file's `tools` (its money fields).
    pub async fn open_with_tools(db: &TestDb, tools: &str) -> (TestApp, Seeded) {
        let seeded = seed(&db.store, Utc::now(), 0).await;
        let tools = idemwatch::guard::ToolPolicies::parse(tools).expect("a valid tools file");
        let state = AppState::new(db.store.clone())
            .with_clock(Arc::new(seeded.clock.clone()))
            .with_guard(tools, Default::default());
        (Self::new(web::app(state), &seeded.clock), seeded)
    }

    /// The seeded app with the built-in auth file of `support::auth` (every user signed
    /// in), asked by the resolver `sam` unless [`TestApp::as_`] says otherwise.
    pub async fn builtin(db: &TestDb) -> (TestApp, Seeded) {
        let seeded = seed(&db.store, Utc::now(), 0).await;
        (Self::builtin_on(db, &seeded.clock).await, seeded)
    }

    /// As [`TestApp::builtin`] over the database as it is (no seed), on `clock`.
    pub async fn builtin_on(db: &TestDb, clock: &ManualClock) -> TestApp {
        let router = builtin_app(&db.store, Arc::new(clock.clone())).await;
        Self::new(router, clock).as_(Who::Session("sam"))
    }

    fn new(router: Router, clock: &ManualClock) -> TestApp {
        TestApp {
            router,
            clock: clock.clone(),
            who: Who::Anonymous,
        }
    }

    /// The same app, asked by `who`.
    pub fn as_(&self, who: Who<'static>) -> TestApp {
        TestApp {
            who,
            ..self.clone()
        }
    }

    /// A request as this caller sends it (`support::auth::request`): a form body
    /// unless it starts with `{`.
    pub async fn call(&self, method: Method, uri: &str, body: Option<String>) -> Page {
        send(&self.router, request(method, uri, self.who, body)).await
    }

    pub async fn get(&self, uri: &str) -> Page {
        match self.who {
            Who::Anonymous => get(&self.router, uri).await,
            _ => self.call(Method::GET, uri, None).await,
        }
    }

    /// Posts a form as a browser does: the page's CSRF token is added unless the test
    /// sets `csrf_token` itself.
    pub async fn post_form(&self, uri: &str, pairs: &[(&str, &str)]) -> Page {
        let csrf = csrf_token();
        let mut pairs = pairs.to_vec();
        if !pairs.iter().any(|(k, _)| *k == "csrf_token") {
            pairs.push(("csrf_token", &csrf));
        }
        self.call(Method::POST, uri, Some(form(&pairs))).await
    }

    /// The resolve form of one key as a browser posts it, with the reason every test
    /// gives: step 1 (review) or 2 (confirm).
    pub async fn resolve(
        &self,
        key: &str,
        resolution: &str,
        evidence: &str,
        expected_token: i64,
        step: Step,
    ) -> Page {
        let token = expected_token.to_string();
        let mut pairs = vec![
            ("resolution", resolution),
            ("reason", "checked the provider dashboard"),
            ("evidence", evidence),
            ("result", ""),
            ("expected_token", token.as_str()),
        ];
        if step == Step::Confirm {
            pairs.push(("confirm", "yes"));
        }
        self.post_form(&format!("/keys/{key}/resolve"), &pairs)
            .await
    }

    /// `POST /login` from a browser without a session, with the page's CSRF token.
    pub async fn sign_in(&self, name: &str, password: &str, next: &str) -> Page {
        let pairs = [("name", name), ("password", password), ("next", next)];
        self.as_(Who::Anonymous).post_form("/login", &pairs).await
    }

    /// Follows `rel="next"` from `first` to the last page (at most `max` pages): each
    /// page's keys in page order, after checking that each page answered 200 and that
    /// every next link starts with `next_prefix` (the list's filter and page size).
    pub async fn keys_page_by_page(
        &self,
        first: &str,
        next_prefix: &str,
        max: usize,
    ) -> Vec<Vec<String>> {
        let mut pages = Vec::new();
        let mut uri = Some(first.to_string());
        while let Some(u) = uri {
            assert!(pages.len() < max, "too many pages: {u}");
            let p = self.get(&u).await;
            assert_eq!(p.status, StatusCode::OK, "{u}");
            pages.push(linked_keys(&p.body));
            uri = next_link(&p.body);
            if let Some(next) = &uri {
                assert!(next.starts_with(next_prefix), "{next}");
            }
        }
        pages
    }

    /// `GET /export/attempts.<format>?<query>` (`csv`, `ndjson`, `manifest`).
    pub async fn export(&self, format: &str, query: &str) -> Page {
        self.get(&format!("/export/attempts.{format}?{query}"))
            .await
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
