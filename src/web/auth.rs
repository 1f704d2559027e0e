//! Who is calling, and what they may do (docs/AUTH.md).
//!
//! [`authenticate`] runs on every request: it finds the [`Principal`] (bearer token,
//! session cookie, trusted proxy headers, or the local admin when no auth file is
//! configured), puts it in the request's extensions, and answers 401 (or a redirect
//! to `/login` for a page in built-in mode) when nobody is signed in. Every page and
//! API path needs the `View` permission; [`require_resolve`] and [`require_export`]
//! guard the routes that change keys or download the log.
//!
//! Public, with no sign-in: `/healthz`, `/readyz` (load balancers probe without
//! credentials), `/metrics` (Prometheus scrapes without them; it carries counts per
//! tool, never a key, an id or a business ref), `/static/*` (the CSS, the script and
//! the icon), `/api/v1/openapi.json` (the API's description, no data) and `/login`.
//!
//! The guard's routes (`/api/v1/guard/*`) need [`Permission::Guard`] instead of
//! `View`: a bearer token with the `worker` or `admin` role, or the local admin.
//!
//! Sessions: in built-in mode the session cookie names a row of `idemwatch_sessions`
//! (`auth::sessions`); it is looked up here on every request but static files and
//! probes, so a session ended anywhere (sign-out, idle, lifetime, user removed,
//! password changed) stops working on every replica at once.
//!
//! CSRF: a random `idemwatch_csrf` cookie is issued to every browser that lacks one,
//! on every path that can answer with a page or a token (not the guard's routes, the
//! probes, `/metrics`, static files or the API's description: [`makes_csrf`]).
//! Forms carry `csrf_token`, the server's HMAC of a binding and the time: for a
//! signed-in session, the binding recorded in its row at sign-in (so a CSRF cookie
//! planted later changes nothing), otherwise the CSRF cookie (signed double submit).
//! Tokens expire after `auth::CSRF_TOKEN_SECONDS`. A state-changing request without a
//! valid token is refused with 403 before anything is read from its body or written.
//! JSON requests authenticated by ambient browser state (session cookie, proxy, local
//! admin) must send the token in `X-CSRF-Token`; bearer-token requests need none (a
//! browser never adds the token). With `Secure` cookies both cookies are named
//! `__Host-…`, and only those names are read.

use super::links::link;
use super::{AppState, Error};
use crate::auth::sessions::random_cookie;
use crate::auth::{
    AuthError, CSRF_COOKIE, Mode, Permission, Principal, SESSION_COOKIE, Via, cookie, cookie_name,
    csrf_binding,
};
use crate::store::SessionRow;
use axum::extract::{ConnectInfo, FromRequestParts, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::net::SocketAddr;

/// The header a JSON request authenticated by a cookie carries its CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// On every response, error pages and static files included.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; \
     base-uri 'none'";

use super::layout::CONTEXT;
pub use super::layout::{SignedIn, Viewer};

/// What the page header says about principal `p`.
fn signed_in_as(p: &Principal) -> SignedIn {
    SignedIn {
        name: p.name.clone(),
        roles: p
            .roles
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        can_resolve: p.can(Permission::Resolve),
        has_session: p.via == Via::Session,
    }
}

/// The CSRF token forms of this request must carry (bound to its CSRF cookie).
#[derive(Debug, Clone)]
pub(crate) struct Csrf {
    pub token: String,
}

fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz"
            | "/readyz"
            | "/metrics"
            | "/login"
            | "/api/v1/openapi.json"
            | "/api/v1/checkpoints/public-key"
    ) || path.starts_with("/static/")
}

/// The guard's routes: they need [`Permission::Guard`] instead of `View`.
pub(crate) fn is_guard(path: &str) -> bool {
    path.starts_with("/api/v1/guard/")
}

/// Paths that never need the session looked up: probes, metrics and static files
/// answer the same to everyone (`/login` does look: it sends a signed-in browser on).
fn skips_session(path: &str) -> bool {
    is_public(path) && path != "/login"
}

/// Paths whose answers never hold a form, so no CSRF cookie or token is made for them:
/// the guard's routes (workers with a bearer token, or loopback harnesses, that send
/// JSON marked `application/json` and never a token: `web/guard/access.rs`), and the
/// public paths that skip the session (probes, `/metrics`, static files, the API's
/// description and the checkpoint key). Making a token is an HMAC and a new cookie is
/// 32 random bytes: on the guard's hot path, per request, for nothing. Every other
/// check (Host, Origin, roles, the worker role's limits) runs as before.
fn makes_csrf(path: &str) -> bool {
    !is_guard(path) && !skips_session(path)
}

/// Paths for scripts: errors in JSON, never a login redirect.
fn is_api(path: &str) -> bool {
    path.starts_with("/api/") || path.starts_with("/export/")
}

/// Authenticates the request and checks the `View` permission (a step of
/// `super::every_request`, after the site check).
pub async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let public = is_public(&path);
    let headers = request.headers();
    let secure = secure_cookies(&state, headers);
    let csrf = makes_csrf(&path);
    let (csrf_cookie, issued) = csrf_cookie(headers, secure, csrf);
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_canonical());
    let now = state.sessions.now();
    let (principal, session) = match caller(&state, headers, peer, &path, secure, now).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let (binding, csrf_token) = csrf_of(&state, csrf_cookie, session.as_ref(), now);
    let signed_in = !public && principal.is_some();
    let asked = (request.method(), request.uri());
    let response = match refusal(&state, asked, &path, public, principal.as_ref()).await {
        Some(refused) => refused,
        None => {
            let viewer = (!is_guard(&path)).then(|| Viewer {
                user: principal.as_ref().map(signed_in_as),
                csrf_token: csrf_token.clone(),
                csrf_binding: binding,
            });
            let csrf = csrf.then_some(Csrf { token: csrf_token });
            run(&state, request, next, principal, csrf, viewer).await
        }
    };
    finish(response, signed_in, issued, secure)
}

/// Who is calling and their session: the credentials the request carries, else (in
/// built-in mode) the session its cookie names. Credentials that do not stand are
/// refused, unless the path is public.
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
    path: &str,
    secure: bool,
    now: i64,
) -> Result<(Option<Principal>, Option<SessionRow>), Response> {
    match state.auth.authenticate(headers, peer, now) {
        Ok(Some(p)) => Ok((Some(p), None)),
        Err(e) if !is_public(path) => Err(bad_credentials(state, path, e)),
        Ok(None) | Err(_) => match session_of(state, headers, secure, path).await {
            Ok(Some((p, row))) => Ok((Some(p), Some(row))),
            Ok(None) => Ok((None, None)),
            Err(e) => Err(e.into_response()),
        },
    }
}

/// The browser's CSRF cookie, or a new one, and the new one for this response to set;
/// neither on a path that makes none (`csrf`).
fn csrf_cookie(headers: &HeaderMap, secure: bool, csrf: bool) -> (Option<String>, Option<String>) {
    let sent = csrf
        .then(|| cookie(headers, &cookie_name(CSRF_COOKIE, secure)))
        .flatten()
        .filter(|c| well_formed_cookie(c))
        .map(str::to_string);
    let issued = (csrf && sent.is_none()).then(random_cookie);
    (sent.or_else(|| issued.clone()), issued)
}

/// What this request's CSRF tokens are bound to, and its token: for a signed-in
/// session, the binding recorded at sign-in; otherwise the CSRF cookie. Both empty on
/// a path that makes none (`csrf_cookie` is `None` there): a form check on such a path
/// would fail closed (`csrf_valid` refuses an empty binding), though none checks one.
fn csrf_of(
    state: &AppState,
    csrf_cookie: Option<String>,
    session: Option<&SessionRow>,
    now: i64,
) -> (String, String) {
    let Some(csrf_cookie) = csrf_cookie else {
        return (String::new(), String::new());
    };
    let binding = match session {
        Some(row) => row.csrf_sha256.clone(),
        None => csrf_binding(&csrf_cookie),
    };
    let token = state.auth.csrf_token(&binding, now);
    (binding, token)
}

/// 401 for credentials that were sent but do not stand (counted, logged in bursts).
fn bad_credentials(state: &AppState, path: &str, e: AuthError) -> Response {
    let reason = match e {
        AuthError::BadToken => "bad_token",
        AuthError::ExpiredToken { .. } => "expired_token",
        AuthError::DuplicateIdentity(_) => "duplicate_identity",
    };
    state.auth_log.refused(reason, || {
        tracing::info!(path, error = %e, "refused credentials");
    });
    let message = match e {
        AuthError::BadToken => {
            "The bearer token is not valid: it is not in the auth file (or was removed)."
                .to_string()
        }
        AuthError::ExpiredToken { name, expired } => format!(
            "The bearer token {name:?} expired at {expired}: make a new one with `idemwatch new-token` (docs/AUTH.md)."
        ),
        AuthError::DuplicateIdentity(header) => format!(
            "The {header} header came more than once, so who is calling is unclear: the proxy in front must replace it, not append to it (docs/AUTH.md)."
        ),
    };
    Error::Unauthorized(message).into_response()
}

/// Built-in mode: the session the cookie names, if it is still live, and whose it is.
/// The cookie's name is looked for (a new `String`) only where a session can count.
async fn session_of(
    state: &AppState,
    headers: &HeaderMap,
    secure: bool,
    path: &str,
) -> Result<Option<(Principal, SessionRow)>, Error> {
    if state.auth.mode() != Some(Mode::Builtin) || skips_session(path) {
        return Ok(None);
    }
    let Some(value) = cookie(headers, &cookie_name(SESSION_COOKIE, secure)) else {
        return Ok(None);
    };
    let Some(row) = state.sessions.find(value).await? else {
        return Ok(None);
    };
    match state.auth.session_principal(&row) {
        Some(p) => Ok(Some((p, row))),
        None => {
            tracing::info!(user = ?row.user_name, "session ended: the user was removed or changed password");
            state.sessions.end(value).await?;
            Ok(None)
        }
    }
}

/// Why the request may not go on (not signed in, a role missing, a token's limits),
/// or `None`. A 403 is counted and logged in bursts.
async fn refusal(
    state: &AppState,
    (method, uri): (&Method, &Uri),
    path: &str,
    public: bool,
    principal: Option<&Principal>,
) -> Option<Response> {
    // Signing out needs no role: a user whose roles were all removed can still end
    // their session.
    let sign_out = path == "/logout";
    let guard = is_guard(path);
    let refused = match principal {
        _ if public => return None,
        None => return Some(not_signed_in(state, method, uri, path)),
        Some(p) if guard && !p.can(Permission::Guard) => Error::Forbidden(format!(
            "Calling the guard needs a bearer token with the worker (or admin) role; {} has none (sessions and proxy users cannot call it). See docs/AUTH.md.",
            p.name
        ))
        .into_response(),
        Some(p) if !guard && !p.can(Permission::View) && !sign_out => Error::Forbidden(format!(
            "Reading idemwatch needs one of the roles viewer, resolver, auditor or admin; {} has none. Ask an admin to add a role (docs/AUTH.md).",
            p.name
        ))
        .into_response(),
        Some(p) if !guard => super::limits::check(state, p, path, uri.query())
            .await
            .err()?
            .into_response(),
        Some(_) => return None,
    };
    if let Some(p) = principal
        && refused.status() == axum::http::StatusCode::FORBIDDEN
    {
        state.auth_log.refused("forbidden", || {
            tracing::info!(user = %p.name, path, "forbidden");
        });
    }
    Some(refused)
}

/// Runs the rest of the request with what handlers read: the principal, and for pages
/// the viewer. The guard's answers are JSON, never a page: no page context for them (a
/// task-local scope, and the caller's name and roles copied, per request on the
/// guard's hot path: docs/PERFORMANCE.md, "Guard over HTTP").
async fn run(
    state: &AppState,
    mut request: Request,
    next: Next,
    principal: Option<Principal>,
    csrf: Option<Csrf>,
    viewer: Option<Viewer>,
) -> Response {
    if let Some(csrf) = csrf {
        request.extensions_mut().insert(csrf);
    }
    if let Some(p) = principal {
        request.extensions_mut().insert(p);
    }
    match viewer {
        Some(viewer) => {
            // For `require`, a route layer without the state.
            request.extensions_mut().insert(state.auth_log.clone());
            request.extensions_mut().insert(viewer.clone());
            CONTEXT.scope(viewer, next.run(request)).await
        }
        None => next.run(request).await,
    }
}

/// What every answer gets: `no-store` for a signed-in person's, and the CSRF cookie
/// issued for this browser unless the handler set its own (sign-in rotates it).
fn finish(
    mut response: Response,
    signed_in: bool,
    issued: Option<String>,
    secure: bool,
) -> Response {
    // What a signed-in person sees must not stay in a shared or back-button cache
    // after they sign out (downloads already say `no-store`).
    if signed_in && !response.headers().contains_key(header::CACHE_CONTROL) {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    let name = cookie_name(CSRF_COOKIE, secure);
    let sets_csrf = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.as_bytes().starts_with(name.as_bytes()));
    let new_cookie = issued
        .filter(|_| !sets_csrf)
        .and_then(|value| cookie_header(CSRF_COOKIE, &value, None, secure));
    if let Some(v) = new_cookie {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// A cookie value as [`random_cookie`] makes them.
fn well_formed_cookie(c: &str) -> bool {
    c.len() == 43
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What this request's CSRF tokens are bound to (empty outside a request).
fn request_csrf_binding() -> Option<String> {
    CONTEXT
        .try_with(|c| c.csrf_binding.clone())
        .ok()
        .filter(|b| !b.is_empty())
}

/// 401, or in built-in mode a page request goes to the login form and comes back.
fn not_signed_in(state: &AppState, method: &Method, uri: &Uri, path: &str) -> Response {
    let page_read = matches!(*method, Method::GET | Method::HEAD);
    match state.auth.mode() {
        Some(Mode::Builtin) if page_read && !is_api(path) => {
            let back = uri
                .path_and_query()
                .map_or(path, |pq| pq.as_str());
            Redirect::to(&link("/login", &[("next", Some(back))])).into_response()
        }
        Some(Mode::Builtin) => Error::Unauthorized(
            "Sign in at /login, or send `Authorization: Bearer <token>` (docs/AUTH.md).".into(),
        )
        .into_response(),
        _ => Error::Unauthorized(
            "No signed-in user: sign in through the company login in front of idemwatch, or send `Authorization: Bearer <token>` (docs/AUTH.md).".into(),
        )
        .into_response(),
    }
}

/// The proxy in front says the browser used HTTPS: cookies get `Secure`.
fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// `Set-Cookie` for one of our cookies (`base`: `SESSION_COOKIE`, `CSRF_COOKIE`):
/// HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
/// Path=/ and no Domain; over HTTPS `Secure` and named `__Host-…`. `max_age` None:
/// until the browser closes; Some(0) deletes it.
pub(crate) fn cookie_header(
    base: &str,
    value: &str,
    max_age: Option<i64>,
    secure: bool,
) -> Option<HeaderValue> {
    let name = cookie_name(base, secure);
    let mut text = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
    if let Some(age) = max_age {
        text.push_str(&format!("; Max-Age={age}"));
    }
    if secure {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text).ok()
}

/// Whether this request's cookies should be `Secure`.
pub(crate) fn secure_cookies(state: &AppState, headers: &HeaderMap) -> bool {
    state.cookie_secure || forwarded_https(headers)
}

/// Refuses a form whose `csrf_token` is not valid for this request's binding (its
/// session's, or its CSRF cookie's) or has expired. A bearer-token caller needs none:
/// a browser never sends a token on its own. (`_headers`: the binding is found by the
/// middleware, from the cookies, before the handler runs.)
pub(crate) fn check_form_csrf(
    state: &AppState,
    principal: Option<&Principal>,
    token: Option<&str>,
) -> Result<(), Error> {
    check_csrf(
        state,
        principal,
        token,
        "form refused: missing or wrong CSRF token",
        "This form's security token is missing or out of date (CSRF check). Nothing was changed: reload the page and submit it again.",
    )
}

/// A posted form that carries its CSRF token.
pub(crate) trait CsrfForm {
    fn csrf_token(&self) -> Option<&str>;
}

/// A person's posted form, read and checked: 400 naming `form` when it cannot be read,
/// 403 ([`check_form_csrf`]) when its token is missing or wrong.
pub(crate) fn checked_form<T: CsrfForm>(
    state: &AppState,
    principal: &Principal,
    form: Result<axum::extract::Form<T>, axum::extract::rejection::FormRejection>,
) -> Result<T, Error> {
    let axum::extract::Form(form) = form.map_err(|e| Error::bad_request("form", e.body_text()))?;
    check_form_csrf(state, Some(principal), form.csrf_token())?;
    Ok(form)
}

/// A JSON request that changes something: bearer tokens need nothing more; anyone
/// authenticated by the browser (cookie, proxy, local admin) must send `X-CSRF-Token`.
pub(crate) fn check_api_csrf(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
) -> Result<(), Error> {
    check_csrf(
        state,
        Some(principal),
        headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()),
        "JSON request refused: missing or wrong X-CSRF-Token",
        "A request signed in by the browser (not by a bearer token) must carry the X-CSRF-Token header (GET /api/v1/csrf gives one). Nothing was changed.",
    )
}

/// Bearer tokens need no CSRF token (a browser never adds one); anyone else's `token`
/// must be this request's. A refusal is counted and logged (`log`) in bursts: 403
/// saying `message`.
fn check_csrf(
    state: &AppState,
    principal: Option<&Principal>,
    token: Option<&str>,
    log: &'static str,
    message: &str,
) -> Result<(), Error> {
    if principal.is_some_and(|p| p.via == Via::Token) {
        return Ok(());
    }
    let now = state.sessions.now();
    let binding = request_csrf_binding();
    if token.is_some_and(|t| state.auth.csrf_valid(binding.as_deref(), t, now)) {
        return Ok(());
    }
    state.auth_log.refused("csrf", || tracing::info!("{log}"));
    Err(Error::Forbidden(message.into()))
}

/// Route middleware: only callers who may resolve keys get through.
pub(crate) async fn require_resolve(request: Request, next: Next) -> Response {
    require(Permission::Resolve, request, next).await
}

/// Route middleware: only callers who may download exports get through.
pub(crate) async fn require_export(request: Request, next: Next) -> Response {
    require(Permission::Export, request, next).await
}

async fn require(permission: Permission, request: Request, next: Next) -> Response {
    let Some(p) = request.extensions().get::<Principal>() else {
        return Error::Unauthorized("Sign in first.".into()).into_response();
    };
    if p.can(permission) {
        return next.run(request).await;
    }
    let (what, role) = match permission {
        Permission::Resolve => ("Resolving keys", "resolver"),
        Permission::Export => ("Downloading exports", "auditor"),
        Permission::View => ("Reading idemwatch", "viewer"),
        Permission::Guard => ("Calling the guard", "worker"),
    };
    let has = if p.roles.is_empty() {
        "no role".to_string()
    } else {
        p.roles
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let log = || tracing::info!(user = %p.name, ?permission, "forbidden");
    match request
        .extensions()
        .get::<std::sync::Arc<crate::web::auth_log::AuthLog>>()
    {
        Some(auth_log) => auth_log.refused("forbidden", log),
        None => log(),
    }
    Error::Forbidden(format!(
        "{what} needs the {role} role (or admin); {} has: {has}. Nothing was changed.",
        p.name
    ))
    .into_response()
}

/// The security headers on every response (the last step of
/// `super::every_request`), and HSTS when `--hsts` is on.
pub fn security_headers(response: &mut Response, hsts: Option<&HeaderValue>) {
    let h = response.headers_mut();
    if let Some(hsts) = hsts {
        h.insert(header::STRICT_TRANSPORT_SECURITY, hsts.clone());
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The caller, for handlers: `async fn h(principal: Principal, …)`.
impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| Error::Unauthorized("Sign in first.".into()))
    }
}

/// The caller if anyone is signed in (public paths such as `/login`).
impl<S: Send + Sync> OptionalFromRequestParts<S> for Principal {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Principal>().cloned())
    }
}

/// The TCP peer's address; `None` for an in-process request (tests).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddress(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip().to_canonical()),
        ))
    }
}

/// This request's CSRF token, for handlers that render a form outside the layout.
impl<S: Send + Sync> FromRequestParts<S> for Csrf {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        parts
            .extensions
            .get::<Csrf>()
            .cloned()
            .ok_or_else(|| Error::Internal("no CSRF token: the auth middleware is missing".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_probes_metrics_static_files_and_the_login_are_public() {
        for p in [
            "/healthz",
            "/readyz",
            "/metrics",
            "/login",
            "/static/app.css",
        ] {
            assert!(is_public(p), "{p}");
        }
        for p in [
            "/",
            "/keys",
            "/backlog",
            "/api/v1/keys/x",
            "/export/attempts.csv",
            "/logout",
            "/metricsx",
            "/login/x",
        ] {
            assert!(!is_public(p), "{p}");
        }
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_when_asked() {
        let v = cookie_header("c", "v", None, false).unwrap();
        assert_eq!(v, "c=v; Path=/; HttpOnly; SameSite=Strict");
        let v = cookie_header("c", "", Some(0), true).unwrap();
        assert_eq!(
            v,
            "__Host-c=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure"
        );
    }
}
