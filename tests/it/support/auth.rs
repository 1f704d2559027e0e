//! Signed-in requests for the auth and resolve tests: one built-in auth file with a
//! user and a token per role, a session per user stored in each test's database (as
//! the real sign-in stores them), and the CSRF cookie and token a browser would carry.

pub use crate::support::app::{Page as Answer, send};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request};
use idemwatch::auth::sessions::{id_hash, random_cookie};
use idemwatch::auth::{AuthFile, Authenticator, csrf_binding, password_tag, secrets};
use idemwatch::guard::Clock;
use idemwatch::store::{SessionRow, Store, StoreError};
use idemwatch::web::{self, AppState};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

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

/// Each user's session cookie, the same for every test of this process;
/// [`sign_in_all`] stores the sessions in a test's database.
static SESSIONS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    USERS
        .iter()
        .map(|(name, _)| (*name, random_cookie()))
        .collect()
});

/// Stores every user's session in `store` (again is fine), bound to [`CSRF_COOKIE`]
/// as a sign-in from a browser carrying that cookie would bind it.
pub async fn sign_in_all(store: &Store) {
    let now = chrono::Utc::now().timestamp();
    for (name, _) in USERS {
        let row = SessionRow {
            id_sha256: id_hash(&session(name)),
            user_name: name.to_string(),
            password_tag: password_tag(&HASH),
            csrf_sha256: csrf_binding(CSRF_COOKIE),
            created_at: now,
            last_seen_at: now,
            expires_at: now + 12 * 3600,
        };
        match store.insert_session(&row).await {
            Ok(()) | Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("cannot store the test sessions: {e}"),
        }
    }
}

pub fn token(name: &str) -> String {
    format!("iw_test_{name}")
}

pub fn session(name: &str) -> String {
    SESSIONS[name].clone()
}

/// The token a page would carry for a browser with [`CSRF_COOKIE`] (and for the
/// test users' sessions, bound to it), issued now.
pub fn csrf_token() -> String {
    BUILTIN.csrf_token(&csrf_binding(CSRF_COOKIE), chrono::Utc::now().timestamp())
}

/// The app with built-in auth over `store`, on `clock`, the users signed in.
pub async fn builtin_app(store: &Store, clock: Arc<dyn Clock>) -> Router {
    sign_in_all(store).await;
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
