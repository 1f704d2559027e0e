//! Signed-in requests for the auth and resolve tests: one built-in auth file with a
//! user and a token per role, sessions made by the real `login`, and the CSRF cookie
//! and token a browser would carry.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use idemwatch::auth::{AuthFile, Authenticator, secrets};
use idemwatch::guard::Clock;
use idemwatch::store::Store;
use idemwatch::web::{self, AppState};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use tower::ServiceExt;

pub const SECRET: &[u8] = b"a test session secret of 32+ bytes!";
pub const PASSWORD: &str = "correct horse battery staple";
/// The CSRF cookie every test browser carries (43 URL-safe characters, as issued).
pub const CSRF_COOKIE: &str = "csrfcookiecsrfcookiecsrfcookiecsrfcookie123";

/// Users (and tokens `iw_test_<name>`) for each role; `nobody` has none.
pub const USERS: [(&str, &str); 5] = [
    ("vic", "[\"viewer\"]"),
    ("sam", "[\"resolver\"]"),
    ("ada", "[\"auditor\"]"),
    ("root", "[\"admin\"]"),
    ("nobody", "[]"),
];

pub fn auth_file_text(password_hash: &str) -> String {
    let mut text = String::from("mode = \"builtin\"\n");
    for (name, roles) in USERS {
        text.push_str(&format!(
            "[[users]]\nname = \"{name}\"\npassword_hash = \"{password_hash}\"\nroles = {roles}\n"
        ));
        text.push_str(&format!(
            "[[tokens]]\nname = \"{name}-script\"\nsha256 = \"{}\"\nroles = {roles}\n",
            secrets::hash_token(&token(name))
        ));
    }
    text
}

pub static HASH: LazyLock<String> = LazyLock::new(|| secrets::hash_password(PASSWORD).unwrap());

/// One authenticator for all tests: argon2 is deliberately slow.
pub static BUILTIN: LazyLock<Authenticator> = LazyLock::new(|| {
    let file = AuthFile::parse(&auth_file_text(&HASH)).unwrap();
    Authenticator::new(Some(file), Some(SECRET))
});

static SESSIONS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    let now = chrono::Utc::now().timestamp();
    USERS
        .iter()
        .map(|(name, _)| (*name, BUILTIN.login(name, PASSWORD, now).unwrap()))
        .collect()
});

pub fn token(name: &str) -> String {
    format!("iw_test_{name}")
}

pub fn session(name: &str) -> String {
    SESSIONS[name].clone()
}

pub fn csrf_token() -> String {
    BUILTIN.csrf_token(CSRF_COOKIE)
}

/// The app with built-in auth over `store`, on `clock`.
pub fn builtin_app(store: &Store, clock: Arc<dyn Clock>) -> Router {
    let state = AppState::new(store.clone())
        .with_clock(clock)
        .with_auth(BUILTIN.clone(), false);
    web::app(state)
}

/// How a request proves who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who<'a> {
    Anonymous,
    /// A browser with a login session (and the CSRF cookie).
    Session(&'a str),
    /// A script with a bearer token (no cookies).
    Token(&'a str),
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
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
}

/// `application/x-www-form-urlencoded`.
pub fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A request as `who` sends it. A browser (anonymous or session) carries the CSRF
/// cookie; `body` is a form unless it starts with `{`.
pub fn request(method: Method, uri: &str, who: Who<'_>, body: Option<String>) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    match who {
        Who::Anonymous => b = b.header("cookie", format!("idemwatch_csrf={CSRF_COOKIE}")),
        Who::Session(name) => {
            b = b.header(
                "cookie",
                format!(
                    "idemwatch_session={}; idemwatch_csrf={CSRF_COOKIE}",
                    session(name)
                ),
            )
        }
        Who::Token(name) => b = b.header("authorization", format!("Bearer {}", token(name))),
    }
    match body {
        Some(body) => {
            let json = body.starts_with('{');
            let ct = if json {
                "application/json"
            } else {
                "application/x-www-form-urlencoded"
            };
            b = b.header("content-type", ct);
            if json && matches!(who, Who::Session(_)) {
                b = b.header("x-csrf-token", csrf_token());
            }
            b.body(Body::from(body)).unwrap()
        }
        None => b.body(Body::empty()).unwrap(),
    }
}

pub async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).to_string(),
    }
}

pub async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    who: Who<'_>,
    body: Option<String>,
) -> Answer {
    send(app, request(method, uri, who, body)).await
}

/// The same request as if it came over TCP from `peer`.
pub fn from_peer(mut request: Request<Body>, peer: &str) -> Request<Body> {
    let addr: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}
