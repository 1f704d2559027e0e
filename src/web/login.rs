//! `GET/POST /login` and `POST /logout` for built-in users (docs/AUTH.md). In proxy
//! mode and without an auth file there is nothing to sign in to: `/login` goes on to
//! the page asked for.

use super::auth::{Csrf, check_form_csrf, cookie_header, secure_cookies};
use super::pages::Layout;
use super::{AppState, Error};
use crate::auth::{Mode, Principal, SESSION_COOKIE, SESSION_SECONDS};
use askama::Template;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
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
    error: Option<&'static str>,
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
/// site (`//evil.example`, `https://…`, `/\evil`).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.contains(['\r', '\n']) =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
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
    error: Option<&'static str>,
    status: StatusCode,
) -> Response {
    let page = LoginPage {
        layout: Layout::new("Sign in", ""),
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
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Result<Response, Error> {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    check_form_csrf(&state, None, &headers, form.csrf_token.as_deref())?;
    let next = safe_next(form.next.as_deref());
    if state.auth.mode() != Some(Mode::Builtin) {
        return Ok(Redirect::to(&next).into_response());
    }
    let name = form.name.unwrap_or_default().trim().to_string();
    let password = form.password.unwrap_or_default();
    let now = state.clock.now().timestamp();
    // argon2 takes tens of milliseconds of CPU: off the async workers.
    let auth = state.auth.clone();
    let who = name.clone();
    let session = tokio::task::spawn_blocking(move || auth.login(&who, &password, now))
        .await
        .map_err(|e| Error::Internal(format!("login task: {e}")))?;
    let Some(session) = session else {
        tracing::info!(user = %name, "login refused");
        return Ok(render(
            csrf.token,
            next,
            name,
            Some("Wrong user name or password."),
            StatusCode::UNAUTHORIZED,
        ));
    };
    tracing::info!(user = %name, "signed in");
    let mut response = Redirect::to(&next).into_response();
    let secure = secure_cookies(&state, &headers);
    if let Some(v) = cookie_header(SESSION_COOKIE, &session, Some(SESSION_SECONDS), secure) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(response)
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
    check_form_csrf(
        &state,
        principal.as_ref(),
        &headers,
        form.csrf_token.as_deref(),
    )?;
    let to = if state.auth.mode() == Some(Mode::Builtin) {
        "/login"
    } else {
        "/"
    };
    let mut response = Redirect::to(to).into_response();
    if let Some(v) = cookie_header(
        SESSION_COOKIE,
        "",
        Some(0),
        secure_cookies(&state, &headers),
    ) {
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
        for bad in [
            "//evil.example/x",
            "https://evil.example",
            "/\\evil",
            "keys",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
