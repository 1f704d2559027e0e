//! `GET/POST /login` and `POST /logout` for built-in users (docs/AUTH.md). In proxy
//! mode and without an auth file there is nothing to sign in to: `/login` goes on to
//! the page asked for.

use super::auth::{ClientAddress, Csrf, check_form_csrf, cookie_header, secure_cookies};
use super::filters;
use super::layout::Layout;
use super::{AppState, Error, Viewer};
use crate::auth::sessions::random_cookie;
use crate::auth::throttle::LoginRefusal;
use crate::auth::{
    CSRF_COOKIE, Mode, Principal, SESSION_COOKIE, SignIn, cookie, cookie_name, csrf_binding,
};
use askama::Template;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    layout: Layout,
    csrf_token: String,
    next: String,
    name: String,
    error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

#[derive(Default, Deserialize)]
struct LoginForm {
    name: Option<String>,
    password: Option<String>,
    csrf_token: Option<String>,
    next: Option<String>,
}

/// Where to go after signing in: a path on this site only (`/keys?…`), never another
/// site. The value is parsed the way a browser will read the `Location` header
/// (against a stand-in origin, with tabs and newlines dropped and `\` read as `/`),
/// and only a result on that same origin is kept, re-serialised as path and query:
/// `/%09/evil.example`, `/\evil`, `https://…` and `//…` all become `/`, and control
/// or non-ASCII characters come out percent-encoded, so the header is always valid.
fn safe_next(next: Option<&str>) -> String {
    static BASE: std::sync::LazyLock<url::Url> = std::sync::LazyLock::new(|| {
        url::Url::parse("http://idemwatch.invalid/").expect("a valid base URL")
    });
    let home = || "/".to_string();
    let Some(next) = next.filter(|n| n.starts_with('/')) else {
        return home();
    };
    let Ok(url) = BASE.join(next) else {
        return home();
    };
    if url.origin() != BASE.origin() {
        return home();
    }
    let mut out = url.path().to_string();
    if let Some(query) = url.query() {
        out.push('?');
        out.push_str(query);
    }
    // A path that normalises to `//host` (`/.//evil.example`) would be read as
    // another host by the browser.
    if out.starts_with("//") { home() } else { out }
}

async fn login_page(
    State(state): State<AppState>,
    csrf: Csrf,
    principal: Option<Principal>,
    Query(q): Query<NextQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    if state.auth.mode() != Some(Mode::Builtin) || principal.is_some() {
        return Redirect::to(&next).into_response();
    }
    render(csrf.token, next, String::new(), None, StatusCode::OK)
}

fn render(
    csrf_token: String,
    next: String,
    name: String,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    let page = LoginPage {
        // Nobody is signed in on the sign-in form (a signed-in caller is sent on).
        layout: Layout::new("Sign in", "", &Viewer::default()),
        csrf_token,
        next,
        name,
        error,
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => Error::from(e).into_response(),
    }
}

async fn login(
    State(state): State<AppState>,
    csrf: Csrf,
    ClientAddress(peer): ClientAddress,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, Error> {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    check_form_csrf(&state, None, form.csrf_token.as_deref())?;
    let next = safe_next(form.next.as_deref());
    if state.auth.mode() != Some(Mode::Builtin) {
        return Ok(Redirect::to(&next).into_response());
    }
    let name = form.name.unwrap_or_default().trim().to_string();
    let password = form.password.unwrap_or_default();
    match check_password(&state, &name, password, peer).await? {
        Ok(signed_in) => start_session(&state, &headers, &signed_in, &next).await,
        Err(refusal) => Ok(refused(&state, refusal, peer, csrf.token, next, name)),
    }
}

/// Who `name` is if `password` is theirs, or why they were not checked or not let in.
async fn check_password(
    state: &AppState,
    name: &str,
    password: String,
    peer: Option<std::net::IpAddr>,
) -> Result<Result<SignIn, LoginRefusal>, Error> {
    let now = state.clock.now().timestamp();
    // Throttled names and addresses, and a flood beyond the password check slots,
    // are refused before hashing: argon2 costs ~19 MiB and tens of ms of CPU.
    let slot = match state.logins.admit(name, peer, now) {
        Ok(slot) => slot,
        Err(refusal) => return Ok(Err(refusal)),
    };
    // Off the async workers, on the password checking threads; the slot is held
    // until the hash is done, even if the browser gives up first.
    let auth = state.auth.clone();
    let who = name.to_string();
    let signed_in = state
        .logins
        .check(slot, move || auth.login(&who, &password))
        .await
        .ok_or_else(|| Error::Internal("the password check failed".into()))?;
    let now = state.clock.now().timestamp();
    state.logins.record(name, peer, now, signed_in.is_some());
    Ok(signed_in.ok_or(LoginRefusal::BadCredentials))
}

/// A new session id and a new CSRF cookie, whatever the browser brought: a session id
/// planted before sign-in (fixation) is ended, not reused, and tokens from before
/// sign-in are bound to the old cookie.
async fn start_session(
    state: &AppState,
    headers: &HeaderMap,
    signed_in: &SignIn,
    next: &str,
) -> Result<Response, Error> {
    let secure = secure_cookies(state, headers);
    if let Some(old) = cookie(headers, &cookie_name(SESSION_COOKIE, secure)) {
        state.sessions.end(old).await?;
    }
    let csrf_cookie = random_cookie();
    let session = state
        .sessions
        .start(
            &signed_in.name,
            &signed_in.password_tag,
            &csrf_binding(&csrf_cookie),
        )
        .await?;
    tracing::info!(user = %state.auth.loggable_name(&signed_in.name), "signed in");
    let mut response = Redirect::to(next).into_response();
    let lifetime = state.sessions.settings().lifetime.num_seconds();
    let cookies = [
        cookie_header(SESSION_COOKIE, &session, Some(lifetime), secure),
        cookie_header(CSRF_COOKIE, &csrf_cookie, None, secure),
    ];
    for v in cookies.into_iter().flatten() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(response)
}

/// The login form again, saying why: 401 for a wrong password, 429 with `Retry-After`
/// for a refusal that passes with time. Logged and counted.
fn refused(
    state: &AppState,
    refusal: LoginRefusal,
    peer: Option<std::net::IpAddr>,
    csrf_token: String,
    next: String,
    name: String,
) -> Response {
    state.metrics.login_refused(refusal.reason());
    let wait = |s: i64| filters::duration(chrono::TimeDelta::seconds(s));
    let (message, status) = match refusal {
        LoginRefusal::BadCredentials => (
            "Wrong user name or password.".to_string(),
            StatusCode::UNAUTHORIZED,
        ),
        LoginRefusal::Busy => (
            "Too many sign-ins are being checked right now, so this one was not checked. \
             Try again in a moment."
                .to_string(),
            StatusCode::TOO_MANY_REQUESTS,
        ),
        LoginRefusal::ThrottledUser(s) => (
            format!(
                "Too many failed sign-ins for this user name: sign-in for it is paused for \
                 {}, and the password was not checked. Try again then, or ask an admin.",
                wait(s)
            ),
            StatusCode::TOO_MANY_REQUESTS,
        ),
        LoginRefusal::ThrottledAddress(s) => (
            format!(
                "Too many failed sign-ins for this user name from your address: sign-in for \
                 it from here is paused for {}, and the password was not checked. Try again \
                 then, or ask an admin.",
                wait(s)
            ),
            StatusCode::TOO_MANY_REQUESTS,
        ),
    };
    let retry_after = refusal.retry_after();
    // Counted above, logged through the limiter: a guessing run must not flood the log.
    state
        .auth_log
        .limited(refusal.reason(), || match retry_after {
            None => tracing::info!(
                user = %state.auth.loggable_name(&name),
                address = ?peer,
                "login refused"
            ),
            Some(retry_after) => {
                tracing::warn!(reason = refusal.reason(), address = ?peer, retry_after, "sign-in refused")
            }
        });
    let mut response = render(csrf_token, next, name, Some(message), status);
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[derive(Default, Deserialize)]
struct LogoutForm {
    csrf_token: Option<String>,
}

async fn logout(
    State(state): State<AppState>,
    principal: Option<Principal>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Result<Response, Error> {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    check_form_csrf(&state, principal.as_ref(), form.csrf_token.as_deref())?;
    let builtin = state.auth.mode() == Some(Mode::Builtin);
    let secure = secure_cookies(&state, &headers);
    // Ended in the database: a copy of the cookie stops working too, on every replica.
    if let Some(value) = cookie(&headers, &cookie_name(SESSION_COOKIE, secure)).filter(|_| builtin)
    {
        state.sessions.end(value).await?;
        if let Some(p) = &principal {
            tracing::info!(user = ?p.name, "signed out");
        }
    }
    let to = if builtin { "/login" } else { "/" };
    let mut response = Redirect::to(to).into_response();
    if let Some(v) = cookie_header(SESSION_COOKIE, "", Some(0), secure) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_login_only_paths_on_this_site_are_followed() {
        assert_eq!(safe_next(Some("/keys?tool=a")), "/keys?tool=a");
        assert_eq!(safe_next(Some("/keys/a%2Fb")), "/keys/a%2Fb");
        // Encoded slashes stay encoded: a path segment, not a host.
        assert_eq!(
            safe_next(Some("/%2F%2Fevil.example")),
            "/%2F%2Fevil.example"
        );
        // Control and non-ASCII characters come out encoded (a valid header).
        assert_eq!(safe_next(Some("/keys\u{1}x")), "/keys%01x");
        assert_eq!(safe_next(Some("/k\u{e9}")), "/k%C3%A9");
        assert_eq!(safe_next(Some("/a/../b#frag")), "/b");
        for bad in [
            "//evil.example/x",
            "https://evil.example",
            "/\\evil",
            "/\\/evil.example",
            "\\\\evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "/.//evil.example",
            "/./\\evil.example",
            "javascript:alert(1)",
            "data:text/html,x",
            " //evil.example",
            "keys",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
